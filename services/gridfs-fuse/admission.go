package main

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// errBusy is new work refused because MongoDB's queue is too long
// (admission.admit).
var errBusy = errors.New("MongoDB busy")

// admission refuses new work (a lookup, an open, a listing), at once and
// before any query, while the oldest such call under way has waited past
// a bound: a queue-delay bound, as CoDel keeps a queue's sojourn time short.
// Those calls are small queries (a files document, an existence check, at
// most openFetchBytes of chunks), so their time is MongoDB's queue, not
// their own work; reads of open files are not counted (a 1 MB fetch is long
// by its size) and never refused (their answers have begun). nginx opens a
// file in its event loop, so an open that waits holds every connection of
// its worker, the refusals of limit_conn included: past the bound, more
// opens would only queue behind it, each blocking a worker as long, and
// then run out of MONGO_TIMEOUT (a 503 after seconds, and MongoDB marked
// down for everyone). A bound on delay rather than on a count, because the
// count that finishes in time depends on the load the reads put on MongoDB
// at the moment; the delay measures it. No state beyond the calls under
// way: once the slow one returns, the next open is let through, the probe
// that finds whether MongoDB keeps up again.
type admission struct {
	bound time.Duration // queueDelayBound(MONGO_TIMEOUT)
	calls callsUnderWay
}

// queueDelayBound is a quarter of MONGO_TIMEOUT (500 ms by default): far
// enough below the deadline that what is admitted finishes within it, and
// well above a small query on a busy FerretDB, so that normal load is never
// refused.
func queueDelayBound(timeout time.Duration) time.Duration { return timeout / 4 }

// admit lets a call begin, to be ended by end, or refuses it with errBusy.
func (a *admission) admit(now time.Time) (end func(), err error) {
	if age := a.calls.oldest(now); age > a.bound {
		return nil, fmt.Errorf("%w: a lookup or open has waited %v on it (more than %v)", errBusy,
			age.Round(time.Millisecond), a.bound)
	}
	return a.calls.begin(now), nil
}

// callsUnderWay keeps when each call under way began.
type callsUnderWay struct {
	mu      sync.Mutex
	next    uint64
	started map[uint64]time.Time
}

// begin records a call begun at now; end, once it is over.
func (c *callsUnderWay) begin(now time.Time) (end func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started == nil {
		c.started = map[uint64]time.Time{}
	}
	id := c.next
	c.next++
	c.started[id] = now
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.started, id)
	}
}

// oldest is how long the oldest call under way has been (0 for none). A
// scan: nginx's workers open one file at a time each, so calls under way
// are a few (more with other readers of the mount).
func (c *callsUnderWay) oldest(now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var age time.Duration
	for _, began := range c.started {
		age = max(age, now.Sub(began))
	}
	return age
}
