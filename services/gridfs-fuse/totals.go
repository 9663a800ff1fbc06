package main

import (
	"encoding/json"
	"sync/atomic"
)

// totals counts what the daemon has done since it started, for the line
// SIGUSR1 logs: what a request costs it (chunks fetched per file closed,
// FUSE reads and their sizes), which a benchmark's figures rest on. With
// FUSE_KERNEL_CACHE=off every request should fetch each chunk of its file
// once, and direct I/O brings each read as nginx asked it (output_buffers,
// 256 KiB) rather than as the page cache's read-ahead sizes it (128 KiB
// measured under sendfile).
type totals struct {
	reads       atomic.Int64 // FUSE reads answered
	readBytes   atomic.Int64 // bytes they asked for
	largestRead atomic.Int64
	fetches     atomic.Int64 // chunk queries answered
	chunks      atomic.Int64 // chunks they returned
	closed      atomic.Int64 // files released
}

func (t *totals) read(size int) {
	t.reads.Add(1)
	t.readBytes.Add(int64(size))
	for {
		largest := t.largestRead.Load()
		if int64(size) <= largest || t.largestRead.CompareAndSwap(largest, int64(size)) {
			return
		}
	}
}

func (t *totals) fetched(chunks int) {
	t.fetches.Add(1)
	t.chunks.Add(int64(chunks))
}

// line is the counts as one JSON object.
func (t *totals) line() string {
	out, _ := json.Marshal(map[string]int64{
		"reads": t.reads.Load(), "read_bytes": t.readBytes.Load(), "largest_read": t.largestRead.Load(),
		"chunk_fetches": t.fetches.Load(), "chunks_fetched": t.chunks.Load(), "files_closed": t.closed.Load(),
	})
	return string(out)
}
