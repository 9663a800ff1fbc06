package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// gridRoot is the mount's only directory: one entry per GridFS filename
// (its newest revision). Everything is read-only.
type gridRoot struct {
	fs.Inode
	store   *store
	cfg     config
	mounted time.Time
	logger  *log.Logger
	skipped sync.Map   // names already logged as skipped, so a listing logs each once
	found   sync.Map   // inode number -> when a lookup last found its files document (Unix ns)
	open    *openFiles // FUSE_MAX_OPEN_FILES
	budget  openBudget // files open no longer than REQUEST_DEADLINE_MS allows
	gate    admission  // new work while MongoDB's queue is long
	shed    refusalLog // work the gate refused
	totals  totals     // logged on SIGUSR1
	fetches fetchSlots // reads' chunk fetches at MongoDB at once
}

var (
	_ fs.NodeLookuper  = (*gridRoot)(nil)
	_ fs.NodeReaddirer = (*gridRoot)(nil)
	_ fs.NodeGetattrer = (*gridRoot)(nil)
)

// gridFile is one files document; GridFS files never change, so neither
// do its attributes: a new revision is a new inode.
type gridFile struct {
	fs.Inode
	root *gridRoot
	info fileInfo
}

var (
	_ fs.NodeGetattrer   = (*gridFile)(nil)
	_ fs.NodeOpener      = (*gridFile)(nil)
	_ fs.NodeOnForgetter = (*gridFile)(nil)
)

type fileHandle struct {
	file     *gridFile
	reader   *chunkReader
	released atomic.Bool
}

var (
	_ fs.FileReader   = (*fileHandle)(nil)
	_ fs.FileReleaser = (*fileHandle)(nil)
)

// inodeNumber is stable per files document, so a revision keeps its inode.
func inodeNumber(info fileInfo) uint64 {
	h := fnv.New64a()
	h.Write([]byte{byte(info.ID.Type)})
	h.Write(info.ID.Value)
	ino := h.Sum64() &^ (1 << 63) // below go-fuse's automatic numbers
	if ino < 2 {
		ino += 2 // 1 is the root
	}
	return ino
}

// The errno of a failed lookup or open is chosen for nginx, which tells
// only three kinds of failed open apart (ngx_http_static_module): ENOENT,
// ENOTDIR and ENAMETOOLONG are 404; EACCES, ELOOP and EMLINK 403; any other
// errno 500. So a damaged file (errCorrupt) is EIO, which nginx answers 500,
// and whatever a retry may cure (MongoDB unreachable, failing or busy, no
// place among FUSE_MAX_OPEN_FILES) is EACCES, which its nginx.conf answers
// 503 with Retry-After: nothing else on this mount is ever EACCES (every
// file is 0444, the directory 0555, no symlinks). A read's errno reaches no
// client (nginx has sent the head and cuts the answer): EIO.
const (
	errnoDamaged    = syscall.EIO
	errnoRetryLater = syscall.EACCES
)

// fail logs why a lookup, open or listing failed and gives its errno: a
// MongoDB outage or a damaged file must never look like a missing one.
func (r *gridRoot) fail(op, name string, err error) syscall.Errno {
	switch {
	case errors.Is(err, errCorrupt):
		r.logger.Printf("%s %q: %v", op, name, err)
		return errnoDamaged
	case errors.Is(err, errDown):
		// the store logged the outage as it began
	case errors.Is(err, errBusy):
		if n := r.shed.refusalsToLog(time.Now()); n > 0 {
			r.logger.Printf("%s %q: %v: %d request(s) refused since the last such line (nginx answers 503)",
				op, name, err, n)
		}
	case errors.Is(err, errUnavailable):
		r.logger.Printf("%s %q: %v", op, name, err) // err starts "MongoDB unavailable"
	default:
		r.logger.Printf("%s %q: error: %v", op, name, err)
	}
	return errnoRetryLater
}

// admit lets a lookup, open or listing begin (end it with end), or refuses
// it at once, before any query, while MongoDB's queue is too long
// (admission.go).
func (r *gridRoot) admit(op, name string) (end func(), errno syscall.Errno) {
	end, err := r.gate.admit(time.Now())
	if err != nil {
		r.shed.refuse()
		return nil, r.fail(op, name, err)
	}
	return end, 0
}

func (r *gridRoot) skip(info fileInfo, why string) {
	if _, seen := r.skipped.LoadOrStore(info.Name, true); !seen {
		r.logger.Printf("skipping GridFS file %q (_id %s): %s", info.Name, info.ID, why)
	}
}

func (r *gridRoot) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = fuse.S_IFDIR | 0o555
	out.Nlink = 2
	out.SetTimes(nil, &r.mounted, &r.mounted)
	return 0
}

func (r *gridRoot) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if invalidName(name) != "" {
		return nil, syscall.ENOENT // the listing skips such names too
	}
	end, errno := r.admit("lookup", name)
	if errno != 0 {
		return nil, errno
	}
	defer end()
	info, err := r.store.lookup(ctx, name) // a files document that breaks GridFS's rules is errCorrupt
	if err != nil {
		return nil, r.fail("lookup", name, err)
	}
	if info == nil {
		return nil, syscall.ENOENT
	}
	file := &gridFile{root: r, info: *info}
	file.fill(&out.Attr)
	ino := inodeNumber(*info)
	r.found.Store(ino, time.Now().UnixNano())
	return r.NewInode(ctx, file, fs.StableAttr{Mode: fuse.S_IFREG, Ino: ino}), 0
}

// foundRecently tells whether an open of inode ino may skip asking MongoDB
// for its files document: a lookup found it within FUSE_ENTRY_TIMEOUT (as
// long as the kernel keeps the entry without asking), and MongoDB answered
// a call within pingInterval (how soon the mount notices its return, too).
func (r *gridRoot) foundRecently(ino uint64, now time.Time) bool {
	found, ok := r.found.Load(ino)
	return ok && now.Sub(time.Unix(0, found.(int64))) < r.cfg.EntryTimeout &&
		r.store.answeredWithin(now, pingInterval)
}

func (r *gridRoot) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	end, errno := r.admit("readdir", "/")
	if errno != 0 {
		return nil, errno
	}
	defer end()
	all, invalid, err := r.store.list(ctx)
	if err != nil {
		return nil, r.fail("readdir", "/", err)
	}
	for _, err := range invalid {
		if _, seen := r.skipped.LoadOrStore(err.Error(), true); !seen {
			r.logger.Printf("skipping a GridFS file: %v", err)
		}
	}
	newest := map[string]fileInfo{}
	for _, info := range all {
		if why := invalidName(info.Name); why != "" {
			r.skip(info, why)
			continue
		}
		if have, ok := newest[info.Name]; !ok || info.UploadDate.After(have.UploadDate) {
			newest[info.Name] = info
		}
	}
	entries := make([]fuse.DirEntry, 0, len(newest))
	for name, info := range newest {
		entries = append(entries, fuse.DirEntry{Name: name, Mode: fuse.S_IFREG, Ino: inodeNumber(info)})
	}
	return fs.NewListDirStream(entries), 0
}

func (f *gridFile) fill(attr *fuse.Attr) {
	attr.Mode = fuse.S_IFREG | 0o444
	attr.Nlink = 1
	attr.Size = uint64(f.info.Length)
	attr.Blocks = (attr.Size + 511) / 512
	attr.Blksize = 4096
	t := f.info.UploadDate
	attr.SetTimes(&t, &t, &t)
}

func (f *gridFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.fill(&out.Attr)
	return 0
}

// OnForget: the kernel dropped the inode, so no open of it comes before
// another lookup.
func (f *gridFile) OnForget() { f.root.found.Delete(inodeNumber(f.info)) }

// Open reads no chunk of a file larger than openFetchBytes: a HEAD, a 304
// or a Range request reads none of the first ones, and a GET's first read
// fetches what it needs. Unless the kernel keeps its page cache, it makes
// sure this revision's files document is still there and MongoDB answers,
// so that an outage fails the open, which nginx turns into a 503, instead
// of a read after nginx has sent a 200, and a revision deleted since the
// lookup is not found: by one small query, unless a lookup found the
// document within FUSE_ENTRY_TIMEOUT and MongoDB answered within
// pingInterval (foundRecently). nginx waits out an open on its event loop,
// and under load that query waited behind the chunk reads, every
// connection of the worker with it. A smaller file is fetched whole
// instead, in one query as small: its reads then need MongoDB no more, and
// a damaged chunk shows at the open (a 500) rather than as a cut answer.
func (f *gridFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC|syscall.O_APPEND) != 0 {
		return nil, 0, syscall.EROFS
	}
	end, errno := f.root.admit("open", f.info.Name)
	if errno != 0 {
		return nil, 0, errno
	}
	defer end()
	// A place among FUSE_MAX_OPEN_FILES before anything else: a refused
	// open costs no query (openfiles.go).
	if !f.root.open.take() {
		if n := f.root.open.refusalsToLog(time.Now()); n > 0 {
			f.root.logger.Printf("open %q: FUSE_MAX_OPEN_FILES=%d files are open: %d open(s) refused since the last "+
				"such line (nginx answers 503)", f.info.Name, f.root.open.max, n)
		}
		return nil, 0, errnoRetryLater
	}
	if !f.root.budget.admit(time.Now()) {
		f.root.open.put()
		if n := f.root.budget.refusalsToLog(time.Now()); n > 0 {
			f.root.logger.Printf("open %q: one more file open would not be closed within %v at the rate files "+
				"close: %d open(s) refused since the last such line (nginx answers 503)", f.info.Name,
				f.root.budget.budget, n)
		}
		return nil, 0, errnoRetryLater
	}
	id, l := f.info.ID, f.info.layout()
	h := &fileHandle{file: f}
	fetch := func(ctx context.Context, first, last int64) ([][]byte, error) {
		if !h.reader.fetchesAtOpen() { // a read's fetch (fetchslots.go)
			if !f.root.fetches.take(ctx, f.root.cfg.MongoTimeout) {
				return nil, fmt.Errorf("%w: %d chunk fetches under way for %v", errUnavailable, readFetchSlots,
					f.root.cfg.MongoTimeout)
			}
			defer f.root.fetches.put()
		}
		chunks, err := f.root.store.chunkRange(ctx, id, l, first, last)
		if err == nil {
			f.root.totals.fetched(len(chunks))
		}
		return chunks, err
	}
	h.reader = newChunkReader(l, fetch, f.root.cfg.ReadaheadChunks)
	if f.root.cfg.KernelCache {
		return h, fuse.FOPEN_KEEP_CACHE, 0
	}
	if h.reader.fetchesAtOpen() {
		err := h.reader.fetchAll(ctx)
		if err == nil {
			return h, 0, 0
		}
		if !errors.Is(err, errCorrupt) {
			f.root.unopened()
			return nil, 0, f.root.fail("open", f.info.Name, err)
		}
		// No chunks, or not the chunks the document says: damaged, unless
		// the revision was deleted since the lookup (chunks go with it).
		if found, existsErr := f.root.store.exists(ctx, id); existsErr == nil && !found {
			f.root.unopened()
			return nil, 0, syscall.ENOENT
		}
		f.root.unopened()
		return nil, 0, f.root.fail("open", f.info.Name, err)
	}
	if f.root.foundRecently(inodeNumber(f.info), time.Now()) {
		return h, 0, 0
	}
	found, err := f.root.store.exists(ctx, id)
	if err != nil {
		f.root.unopened()
		return nil, 0, f.root.fail("open", f.info.Name, err)
	}
	if !found {
		f.root.unopened()
		return nil, 0, syscall.ENOENT
	}
	return h, 0, 0
}

// unopened gives back the places of an open admitted that then failed: not
// a file served, so not counted in the close rate.
func (r *gridRoot) unopened() {
	r.open.put()
	r.budget.closed(time.Now(), false)
}

// Release comes once the kernel is done with the file (nginx closed it):
// its place is given back and its chunks dropped. go-fuse keeps a released
// handle in its table until a later open reuses the slot, so without the
// drop every handle of the busiest moment kept its chunks for good (at 1000
// clients on 1 MB, the daemon's heap stayed at 450 MiB with 3 files open).
func (h *fileHandle) Release(ctx context.Context) syscall.Errno {
	if h.released.CompareAndSwap(false, true) {
		h.reader.drop()
		h.file.root.totals.closed.Add(1)
		h.file.root.open.put()
		h.file.root.budget.closed(time.Now(), true)
	}
	return 0
}

func (h *fileHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.file.root.totals.read(len(dest))
	n, err := h.reader.ReadAt(ctx, dest, off)
	if err != nil {
		h.file.root.fail(fmt.Sprintf("read [%d, +%d) of", off, len(dest)), h.file.info.Name, err)
		return nil, syscall.EIO // the head is out: nginx cuts the answer, whatever the errno
	}
	return fuse.ReadResultData(dest[:n]), 0
}
