package main

import (
	"context"
	"time"
)

// readFetchSlots is how many chunk fetches of reads may be at MongoDB at
// once; the others wait their turn in the daemon, in nginx's aio threads.
// Once every request reads GridFS (nginx's directio with
// FUSE_KERNEL_CACHE=off), MongoDB is what runs out first under overload,
// and a queue of reads at MongoDB delayed the small queries behind it: the
// kernel's lookup of a name whose entry expired (FUSE_ENTRY_TIMEOUT), which
// nginx waits out in open(2) on its event loop, every connection of the
// worker with it, the refusals too (their p99 at 3x capacity 2 s); and
// reads past MONGO_TIMEOUT, which cut answers and marked MongoDB down for
// everyone. Lookups, existence queries and a small file's fetch at its
// open take no slot, so they wait behind at most this many fetches. Four
// keep a one-core MongoDB (or the test's FerretDB) busy while one answers.
const readFetchSlots = 4

// fetchSlots bounds the chunk fetches under way at once.
type fetchSlots chan struct{}

func newFetchSlots(n int) fetchSlots { return make(fetchSlots, n) }

// take waits for a slot until ctx is done or wait has passed; false then.
// A slot taken is given back with put.
func (s fetchSlots) take(ctx context.Context, wait time.Duration) bool {
	select {
	case s <- struct{}{}:
		return true
	default:
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case s <- struct{}{}:
		return true
	case <-ctx.Done():
	case <-timer.C:
	}
	return false
}

func (s fetchSlots) put() { <-s }
