package main

import (
	"errors"
	"math"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/bson/primitive"
)

func filesDocument(t *testing.T, changes ...bson.E) bson.Raw {
	t.Helper()
	doc := bson.D{{Key: "_id", Value: primitive.NewObjectID()}, {Key: "filename", Value: "a.bin"},
		{Key: "length", Value: int64(10)}, {Key: "chunkSize", Value: int32(4)},
		{Key: "uploadDate", Value: primitive.NewDateTimeFromTime(time.Unix(1700000000, 0))}}
	for _, change := range changes {
		replaced := false
		for i := range doc {
			if doc[i].Key == change.Key {
				doc[i], replaced = change, true
			}
		}
		if !replaced {
			t.Fatalf("no field %q", change.Key)
		}
	}
	raw, err := bson.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestFilesDocumentsWithinGridFSRulesAreRead(t *testing.T) {
	for _, change := range []bson.E{
		{Key: "length", Value: int64(10)},
		{Key: "length", Value: int32(10)},
		{Key: "length", Value: 10.0}, // some drivers store doubles
		{Key: "chunkSize", Value: 4.0},
	} {
		info, err := parseFileInfo(filesDocument(t, change))
		if err != nil || info.Length != 10 || info.ChunkSize != 4 || info.Name != "a.bin" || info.UploadDate.IsZero() {
			t.Errorf("%v: %+v, %v", change, info, err)
		}
	}
	empty := filesDocument(t, bson.E{Key: "length", Value: 0}, bson.E{Key: "chunkSize", Value: 0})
	if _, err := parseFileInfo(empty); err != nil {
		t.Errorf("an empty file of chunkSize 0: %v", err)
	}
}

func TestFilesDocumentsBreakingGridFSRulesAreCorrupt(t *testing.T) {
	for _, change := range []bson.E{
		{Key: "length", Value: int64(math.MaxInt64)}, // the lying document
		{Key: "length", Value: int64(-1)},
		{Key: "length", Value: 9.5},
		{Key: "length", Value: math.NaN()},
		{Key: "length", Value: math.Inf(1)},
		{Key: "length", Value: 1e300},
		{Key: "length", Value: float64(1 << 60)}, // an integer, but past what a double holds exactly
		{Key: "length", Value: "10"},
		{Key: "length", Value: nil},
		{Key: "length", Value: int64(4)<<31 + 1}, // one byte past 2^31 chunks of 4 bytes
		{Key: "chunkSize", Value: 0},
		{Key: "chunkSize", Value: -4},
		{Key: "chunkSize", Value: maxChunkSize + 1},
		{Key: "chunkSize", Value: "4"},
		{Key: "uploadDate", Value: "2024-05-01"},
		{Key: "uploadDate", Value: nil},
		{Key: "filename", Value: 7},
	} {
		if info, err := parseFileInfo(filesDocument(t, change)); !errors.Is(err, errCorrupt) {
			t.Errorf("%v: %+v, %v; want errCorrupt", change, info, err)
		}
	}
	noID, _ := bson.Marshal(bson.D{{Key: "filename", Value: "a.bin"}})
	if _, err := parseFileInfo(noID); !errors.Is(err, errCorrupt) {
		t.Errorf("a document without _id: %v", err)
	}
	// 2^31 chunks of 4 bytes, exactly: the last n is 2^31-1.
	if _, err := parseFileInfo(filesDocument(t, bson.E{Key: "length", Value: int64(4) << 31})); err != nil {
		t.Errorf("2^31 chunks: %v", err)
	}
}

func chunkDocument(t *testing.T, n, data any) bson.Raw {
	t.Helper()
	raw, err := bson.Marshal(bson.D{{Key: "n", Value: n}, {Key: "data", Value: data}})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestChunksAreCheckedAgainstTheirFile(t *testing.T) {
	l := layout{length: 10, chunkSize: 4}
	for _, c := range []struct {
		n, data any
		want    int64
	}{
		{int32(1), []byte("bbbb"), 1},
		{int64(2), []byte("cc"), 2},
		{1.0, []byte("bbbb"), 1},
	} {
		if data, err := chunkData(chunkDocument(t, c.n, c.data), c.want, l); err != nil || int64(len(data)) != l.chunkLen(c.want) {
			t.Errorf("n %v: %q, %v", c.n, data, err)
		}
	}
	for _, c := range []struct {
		n, data any
		want    int64
	}{
		{"1", []byte("bbbb"), 1},    // a string n
		{1.5, []byte("bbbb"), 1},    // not an integer
		{int32(2), []byte("cc"), 1}, // chunk 1 missing
		{int32(1), "bbbb", 1},       // not binary
		{int32(1), nil, 1},
		{int32(1), []byte("bbb"), 1},    // short
		{int32(2), []byte("ccc"), 2},    // long last chunk
		{int32(0), []byte("aaaaaa"), 0}, // long first chunk
	} {
		if data, err := chunkData(chunkDocument(t, c.n, c.data), c.want, l); !errors.Is(err, errCorrupt) {
			t.Errorf("n %v data %v: %q, %v; want errCorrupt", c.n, c.data, data, err)
		}
	}
}
