package main

import (
	"sync/atomic"
	"time"
)

// defaultMaxOpenFiles is FUSE_MAX_OPEN_FILES unless set (entrypoint.sh
// gives nginx's limit_conn the same default). What an open file holds, in
// the daemon's heap: its chunkReader's chunks, from its first read to its
// close, for as long as nginx sends the body, however slowly the client
// takes it. With GridFS's 255 KiB chunks that is the whole file up to 1.25
// MiB (the lab's 1 MB file: 1 MiB), else at most 7 chunks (1.74 MiB); a read
// under way also holds the driver's reply to its fetch (at most 6 chunks,
// 1.5 MiB, garbage once decoded), and at most 44 reads are under way (nginx's
// 32 aio threads, plus the kernel's 12 background readahead requests). So:
//
//	128 x 1.74 MiB + 44 x 1.5 MiB + ~15 MiB (runtime, driver) ~ 305 MiB
//
// at worst (files over 1.25 MiB, all read at once), 128 + 66 + 15 ~ 210 MiB
// for the lab's 1 MB file (measured: 128 stalled 1 MB responses grew the
// daemon by 159 MiB, 1.24 MiB each; tests/test_gridfs_fuse_overload.py);
// within the Go soft limit of 384 MiB, three quarters of TARGET_MEM's 512 MiB
// (memlimit.go), the rest left to nginx and the kernel's socket buffers
// (reading with direct I/O, FUSE_KERNEL_CACHE=off, nginx holds its two 256
// KiB output buffers per response: 128 x 0.5 MiB = 64 MiB).
// Without a cap, wrk's 1000 clients at once on 1 MB held about 500 files open
// and 460 MiB of chunks in the heap (make overload: the kernel killed the
// daemon at the 512 MiB limit). 128 is above the benchmark's 100 clients at
// once: this cap is for memory; what is served in time, openBudget
// (admission.go) sheds, fewer at a large file.
const defaultMaxOpenFiles = "128"

// maxOpenFilesLimit is nginx's largest limit_conn.
const maxOpenFilesLimit = 65535

// refusalLogInterval: at most one log line this often about refusals of
// one kind.
const refusalLogInterval = time.Second

// openFiles counts the files open at once and refuses an open past max:
// at once, never waiting, since nginx opens a file in its event loop (its
// aio threads read and send, they do not open), so a waiting open would
// stall every connection of the worker, the ones whose closes would free a
// place included. nginx's limit_conn, at the same number, turns most of the
// excess into a 503 before any open; a refusal here is the backstop (e.g.
// a close nginx has made whose release the kernel has not yet sent), and
// nginx answers it 503 too (EACCES, errnoRetryLater in filesystem.go).
type openFiles struct {
	max int64
	n   atomic.Int64
	refusalLog
}

func newOpenFiles(max int) *openFiles { return &openFiles{max: int64(max)} }

// take claims a place; false when max files are open.
func (o *openFiles) take() bool {
	for {
		n := o.n.Load()
		if n >= o.max {
			o.refuse()
			return false
		}
		if o.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// put gives back a place taken.
func (o *openFiles) put() { o.n.Add(-1) }

func (o *openFiles) open() int64 { return o.n.Load() }

// refusalLog counts refusals of one kind for a log line at most once per
// refusalLogInterval: under overload, a line per refusal would be
// thousands a second.
type refusalLog struct {
	refused atomic.Int64 // since the last log line
	logged  atomic.Int64 // when the last line was logged (Unix ns)
}

func (l *refusalLog) refuse() { l.refused.Add(1) }

// refusalsToLog returns how many were refused since the last line, when a
// line is due (the first refusal, then at most one per interval); else 0.
func (l *refusalLog) refusalsToLog(now time.Time) int64 {
	last := l.logged.Load()
	if last != 0 && now.UnixNano()-last < int64(refusalLogInterval) {
		return 0
	}
	if !l.logged.CompareAndSwap(last, now.UnixNano()) {
		return 0 // another refusal logs it
	}
	return l.refused.Swap(0)
}
