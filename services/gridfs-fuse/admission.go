package main

import (
	"errors"
	"fmt"
	"math"
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

// openBudget refuses an open, at once, when one more file open would not be
// closed within a time budget at the rate files are being closed: by
// Little's law, files open = close rate x time each, so rate x budget files
// open are served within budget, on average. admission above bounds how
// long a small query waits, not the reads of open files, where a path
// serving large files queues: at 3x gridfs-fuse's capacity on 1 MB (49
// requests/s offered, 16 files/s served) no lookup or open ever waited 500
// ms, nginx's limit_conn let FUSE_MAX_OPEN_FILES (128) responses be under
// way, each done after about 128 / 16 = 8 s, past REQUEST_DEADLINE_MS
// (3 s) and the client's 10 s timeout (make overload: 963 client timeouts
// in the three windows at 3x, no refusal). The rate is measured, not configured: what the
// store serves depends on the file's size and what else reads it.
type openBudget struct {
	budget time.Duration // openTimeBudget(REQUEST_DEADLINE_MS); 0: no bound
	mu     sync.Mutex
	rate   closeRate
	refusalLog
}

// openTimeBudget is half of REQUEST_DEADLINE_MS: the budget bounds the mean
// time a file is open, and a file's time varies about it.
func openTimeBudget(deadline time.Duration) time.Duration { return deadline / 2 }

// filesWithin is how many files may be open at once at closesPerSecond so
// that each is closed within budget on average; at least one, so that an
// open is let through whenever none is under way (the probe that finds
// whether the store keeps up again).
func filesWithin(closesPerSecond float64, budget time.Duration) int {
	return max(1, int(closesPerSecond*budget.Seconds()))
}

// admit counts an open begun at now, or refuses it (false) when it would
// not be closed within the budget. Before the rate is known (fewer than
// rateKnownAfter closes since the daemon started) nothing is refused here:
// FUSE_MAX_OPEN_FILES still caps the files open, and the lab's checks of
// each path (make overload's capacity steps) close many before any load.
func (b *openBudget) admit(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rate.advance(now)
	if perSecond, known := b.rate.perSecond(); b.budget > 0 && known && b.rate.open >= filesWithin(perSecond, b.budget) {
		b.refuse()
		return false
	}
	b.rate.open++
	return true
}

// closed ends an admitted open: served is a file closed after its reads
// (Release), counted in the rate; else an open that failed.
func (b *openBudget) closed(now time.Time, served bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rate.advance(now)
	b.rate.open--
	if served {
		b.rate.closes++
		b.rate.served++
	}
}

// rateMemory is how much busy time the close rate remembers (an
// exponential decay): a few seconds of the load at hand, kept across idle
// stretches (between a benchmark's cases), which tell nothing of the rate.
const rateMemory = 5 * time.Second

// rateKnownAfter is how many closes the rate needs to be trusted. Counted
// without decay: a store that stalls is known to be slow, not unknown.
const rateKnownAfter = 4

// closeRate measures files closed per second of time with a file open,
// both counted with an exponential decay over rateMemory of that time: the
// rate the store serves at while it has work, however much idle time lies
// between. Not safe for concurrent use (openBudget holds its lock).
type closeRate struct {
	open   int       // files open now
	since  time.Time // busy and closes are brought up to here
	busy   float64   // seconds with a file open, decayed
	closes float64   // files closed after their reads, decayed alike
	served int       // files closed after their reads, ever
}

// advance brings busy and closes up to now.
func (c *closeRate) advance(now time.Time) {
	if dt := now.Sub(c.since).Seconds(); c.open > 0 && dt > 0 {
		tau := rateMemory.Seconds()
		w := math.Exp(-dt / tau)
		c.busy = c.busy*w + tau*(1-w) // the decayed integral of one busy second after another
		c.closes *= w
	}
	c.since = now
}

// perSecond is the close rate, and whether enough closes were seen to
// know it.
func (c *closeRate) perSecond() (float64, bool) {
	if c.served < rateKnownAfter || c.busy <= 0 {
		return 0, false
	}
	return c.closes / c.busy, true
}
