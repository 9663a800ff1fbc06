package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/gridfs"
	"go.mongodb.org/mongo-driver/mongo/options"
)

// fileInfo is the newest revision of one GridFS filename, read and checked
// by parseFileInfo (documents.go).
type fileInfo struct {
	ID         bson.RawValue
	Name       string
	Length     int64
	ChunkSize  int64
	UploadDate time.Time
}

func (f fileInfo) layout() layout { return layout{length: f.Length, chunkSize: f.ChunkSize} }

// errUnavailable wraps every failure to reach MongoDB in time.
var errUnavailable = errors.New("MongoDB unavailable")

// errDown is a call refused at once while MongoDB is known to be down.
var errDown = fmt.Errorf("%w: it did not answer recently, retrying in the background", errUnavailable)

// pingInterval is how often a down MongoDB is pinged: the mount serves
// again within about this much of its return.
const pingInterval = 250 * time.Millisecond

// store reads one GridFS bucket. Every call has a deadline (MONGO_TIMEOUT),
// and server selection gives up sooner, so a MongoDB outage turns into a
// quick error instead of a hung kernel request. A call that ran out of
// time marks MongoDB down: calls then fail at once, until a background
// ping answers. Without that, a frozen MongoDB held answers 18-30 s: the
// kernel runs one lookup of a name at a time, and each waited its deadline.
type store struct {
	client  *mongo.Client
	files   *mongo.Collection
	chunks  *mongo.Collection
	timeout time.Duration
	logger  *log.Logger

	down     atomic.Bool
	answered atomic.Int64 // when a call last had MongoDB's answer (Unix ns; 0: never)
	mu       sync.Mutex   // guards probing
	probing  bool
}

var fileProjection = bson.D{{Key: "filename", Value: 1}, {Key: "length", Value: 1},
	{Key: "chunkSize", Value: 1}, {Key: "uploadDate", Value: 1}}

func openStore(c config, logger *log.Logger) (*store, error) {
	selection := min(c.MongoTimeout, time.Second)
	opts := options.Client().ApplyURI(c.MongoURI).
		SetServerSelectionTimeout(selection).
		SetConnectTimeout(selection).
		SetTimeout(c.MongoTimeout).
		SetAppName("gridfs-fuse")
	// Connect does not wait for a server: the mount comes up while MongoDB
	// is down and answers EIO until it is back.
	client, err := mongo.Connect(context.Background(), opts)
	if err != nil {
		return nil, fmt.Errorf("MONGO_URI=%q: %v", redactURI(c.MongoURI), err)
	}
	bucket, err := gridfs.NewBucket(client.Database(c.Database), options.GridFSBucket().SetName(c.Bucket))
	if err != nil {
		return nil, fmt.Errorf("GRIDFS_BUCKET=%q: %v", c.Bucket, err)
	}
	return &store{client: client, files: bucket.GetFilesCollection(),
		chunks: bucket.GetChunksCollection(), timeout: c.MongoTimeout, logger: logger}, nil
}

// begin gives a call its deadline, or errDown at once while MongoDB is
// known to be down.
func (s *store) begin(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if s.down.Load() {
		return nil, nil, errDown
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	return ctx, cancel, nil
}

// answers records that MongoDB answered a call at now.
func (s *store) answers(now time.Time) { s.answered.Store(now.UnixNano()) }

// answeredWithin tells whether MongoDB answered a call less than d before
// now and is not known to be down since.
func (s *store) answeredWithin(now time.Time, d time.Duration) bool {
	last := s.answered.Load()
	return !s.down.Load() && last != 0 && now.UnixNano()-last < int64(d)
}

// failed classifies a call's error (unavailable) and marks MongoDB down
// when the call ran out of time (its deadline, or no server selected in
// time): the calls that would each wait as long are refused instead. An
// error that came at once (a connection refused or reset, as a restarted
// server's pooled connections give) marks nothing: it cost no wait, and
// the next call may well succeed.
func (s *store) failed(err error) error {
	timedOut := mongo.IsTimeout(err) && !errors.Is(err, context.Canceled)
	err = unavailable(err)
	if errors.Is(err, errUnavailable) && timedOut {
		s.markDown(err)
	}
	return err
}

func (s *store) markDown(cause error) {
	s.down.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.probing {
		s.probing = true
		s.logger.Printf("%v; calls fail at once until a ping answers (every %v)", cause, pingInterval)
		go s.probe()
	}
}

// probe pings until MongoDB answers, then lets calls through again. A
// ping is cheap: a slow query under load marks MongoDB down only until
// the first ping returns.
func (s *store) probe() {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), min(s.timeout, time.Second))
		err := s.client.Ping(ctx, nil)
		cancel()
		if err == nil {
			s.answers(time.Now())
			s.mu.Lock()
			s.down.Store(false)
			s.probing = false
			s.mu.Unlock()
			s.logger.Printf("MongoDB answers again")
			return
		}
		time.Sleep(pingInterval)
	}
}

// unavailable classifies a driver error: reaching the server failed
// (network, selection, deadline) or the server answered with an error.
func unavailable(err error) error {
	if err == nil {
		return nil
	}
	var cmd mongo.CommandError
	if errors.As(err, &cmd) && !cmd.HasErrorLabel("NetworkError") {
		return err
	}
	return fmt.Errorf("%w: %v", errUnavailable, err)
}

// lookup finds the newest revision of name; nil when there is none.
func (s *store) lookup(ctx context.Context, name string) (*fileInfo, error) {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	doc, err := s.files.FindOne(ctx, bson.D{{Key: "filename", Value: name}},
		options.FindOne().SetSort(bson.D{{Key: "uploadDate", Value: -1}}).SetProjection(fileProjection)).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		s.answers(time.Now())
		return nil, nil
	}
	if err != nil {
		return nil, s.failed(err)
	}
	s.answers(time.Now())
	info, err := parseFileInfo(doc)
	if err != nil {
		return nil, err
	}
	return &info, nil
}

// exists tells whether the files document with this _id is still there:
// one small indexed query, which also shows that MongoDB answers.
func (s *store) exists(ctx context.Context, id bson.RawValue) (bool, error) {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return false, err
	}
	defer cancel()
	err = s.files.FindOne(ctx, bson.D{{Key: "_id", Value: id}},
		options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		s.answers(time.Now())
		return false, nil
	}
	if err != nil {
		return false, s.failed(err)
	}
	s.answers(time.Now())
	return true, nil
}

// list returns every files document (name, length, dates), and why each
// one that is not valid was left out; the caller keeps the newest per name.
func (s *store) list(ctx context.Context) (all []fileInfo, invalid []error, err error) {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer cancel()
	cursor, err := s.files.Find(ctx, bson.D{}, options.Find().SetProjection(fileProjection))
	if err != nil {
		return nil, nil, s.failed(err)
	}
	defer cursor.Close(context.Background())
	for cursor.Next(ctx) {
		info, err := parseFileInfo(bytes.Clone(cursor.Current))
		if err != nil {
			invalid = append(invalid, err)
			continue
		}
		all = append(all, info)
	}
	if err := cursor.Err(); err != nil {
		return nil, nil, s.failed(err)
	}
	s.answers(time.Now())
	return all, invalid, nil
}

// chunkRange returns the data of chunks first..last of a file of layout l
// (valid), in order; a chunk missing or not as the layout says
// (chunkData) is errCorrupt. A failure is not tried again, though nginx
// has the head ready when it reads (so the answer is cut): a read that kept
// trying for 3 s held, probably, the kernel's lock on the file's pages, and
// every other request for that file waited behind it (make resilience: an
// answer of 6.2 s, ten times the errors per restart, one recovery of 20 s).
func (s *store) chunkRange(ctx context.Context, id bson.RawValue, l layout, first, last int64) ([][]byte, error) {
	if first < 0 || first > last || last >= l.chunkCount() {
		return nil, fmt.Errorf("chunks %d..%d asked of a file of %d", first, last, l.chunkCount())
	}
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	filter := bson.D{{Key: "files_id", Value: id}, {Key: "n", Value: bson.D{{Key: "$gte", Value: first}, {Key: "$lte", Value: last}}}}
	cursor, err := s.chunks.Find(ctx, filter, options.Find().
		SetSort(bson.D{{Key: "n", Value: 1}}).
		SetProjection(bson.D{{Key: "n", Value: 1}, {Key: "data", Value: 1}}))
	if err != nil {
		return nil, s.failed(err)
	}
	defer cursor.Close(context.Background())
	out := make([][]byte, 0, last-first+1) // checked above: within the file
	for cursor.Next(ctx) {
		data, err := chunkData(cursor.Current, first+int64(len(out)), l)
		if err != nil {
			return nil, err
		}
		out = append(out, data)
	}
	if err := cursor.Err(); err != nil {
		return nil, s.failed(err)
	}
	s.answers(time.Now())
	if int64(len(out)) != last-first+1 {
		return nil, fmt.Errorf("%w: chunk %d missing", errCorrupt, first+int64(len(out)))
	}
	return out, nil
}
