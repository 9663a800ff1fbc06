package main

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestNewWorkIsRefusedWhileACallHasWaitedPastTheBound(t *testing.T) {
	if queueDelayBound(2*time.Second) != 500*time.Millisecond {
		t.Fatalf("bound %v at MONGO_TIMEOUT=2", queueDelayBound(2*time.Second))
	}
	a := &admission{bound: 500 * time.Millisecond}
	now := time.Unix(1000, 0)
	first, err := a.admit(now)
	if err != nil {
		t.Fatalf("nothing under way: %v", err)
	}
	second, err := a.admit(now.Add(400 * time.Millisecond))
	if err != nil {
		t.Fatalf("a call under way for 400 ms: %v", err)
	}
	if _, err := a.admit(now.Add(600 * time.Millisecond)); !errors.Is(err, errBusy) {
		t.Fatalf("a call under way for 600 ms: %v, want errBusy", err)
	}
	if age := a.calls.oldest(now.Add(600 * time.Millisecond)); age != 600*time.Millisecond {
		t.Fatalf("oldest %v, want 600ms (a refusal is not under way)", age)
	}
	first()
	third, err := a.admit(now.Add(600 * time.Millisecond))
	if err != nil {
		t.Fatalf("once the old call ended (the other began 200 ms before): %v", err)
	}
	second()
	third()
	if age := a.calls.oldest(now.Add(time.Hour)); age != 0 {
		t.Fatalf("nothing under way, oldest %v", age)
	}
}

// make overload's kept run (results/evidence/overload-20261128T234415Z):
// gridfs-fuse served 1 MB at 16.269 files/s at c=1, its best; 3x that was
// offered, 48.807 requests/s, for 10 s windows.
const (
	fuseCapacity = 16.269
	offered3x    = 48.807
)

func TestTheBudgetIsHalfTheDeadlineAndLittlesLawSizesTheFilesOpen(t *testing.T) {
	budget := openTimeBudget(3 * time.Second) // REQUEST_DEADLINE_MS=3000
	if budget != 1500*time.Millisecond {
		t.Fatalf("budget %v at a 3 s deadline", budget)
	}
	// 16.269 files/s x 1.5 s: 24 files open, not FUSE_MAX_OPEN_FILES' 128
	// (each of those done after about 128 / 16.269 = 7.9 s)
	if n := filesWithin(fuseCapacity, budget); n != 24 {
		t.Fatalf("%d files within %v at %g/s, want 24", n, budget, fuseCapacity)
	}
	// never none: one open goes through whatever the rate
	if n := filesWithin(0.01, budget); n != 1 {
		t.Fatalf("%d files at 0.01/s, want 1", n)
	}
	// make overload's large file: 100 MB at FerretDB's ~30 MB/s, LARGE_DEADLINE_MS=300000
	if n := filesWithin(0.3, openTimeBudget(300*time.Second)); n != 45 {
		t.Fatalf("%d files of 100 MB, want 45", n)
	}
}

// served simulates the store as it behaved in that run: every file open
// shares its rate, capacity files/s in all (each 1 MB file's reads
// interleave with the others' in nginx's aio threads), arrivals open loop
// at offered/s for seconds. It returns each admitted file's time from its
// open to its close, and how many opens were refused.
func served(b *openBudget, capacity, offered float64, seconds float64) (times []time.Duration, refused int) {
	const step = time.Millisecond
	start := time.Unix(1_000_000, 0)
	type file struct {
		opened time.Time
		left   float64 // of the file, still to read
	}
	var open []*file
	arrivals := 0.0
	for now := start; now.Before(start.Add(time.Duration(seconds * float64(time.Second)))); now = now.Add(step) {
		for arrivals += offered * step.Seconds(); arrivals >= 1; arrivals-- {
			if b.admit(now) {
				open = append(open, &file{opened: now, left: 1})
			} else {
				refused++
			}
		}
		if len(open) == 0 {
			continue
		}
		share := capacity * step.Seconds() / float64(len(open))
		kept := open[:0]
		for _, f := range open {
			if f.left -= share; f.left <= 0 {
				b.closed(now, true)
				times = append(times, now.Sub(f.opened))
			} else {
				kept = append(kept, f)
			}
		}
		open = kept
	}
	return times, refused
}

func longest(times []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range times {
		m = max(m, d)
	}
	return m
}

func TestAtThreeTimesCapacityAdmittedFilesCloseWithinTheDeadlineAndTheRestAreRefused(t *testing.T) {
	// FUSE_MAX_OPEN_FILES alone (no budget): every file admitted, each
	// later than the last, past the 3 s deadline within the window
	times, refused := served(&openBudget{}, fuseCapacity, offered3x, 10)
	if refused != 0 || longest(times) < 3*time.Second {
		t.Fatalf("without a budget: %d refused, longest %v", refused, longest(times))
	}
	// with it, the rate learnt as make overload's capacity steps teach it
	// (here one file at a time for a second), opens past 24 are refused;
	// every file admitted closes within the deadline, and the store is
	// kept busy (its capacity served, within 10%)
	b := &openBudget{budget: openTimeBudget(3 * time.Second)}
	served(b, fuseCapacity, fuseCapacity, 1)
	times, refused = served(b, fuseCapacity, offered3x, 10)
	if longest(times) > 3*time.Second {
		t.Fatalf("with the budget: longest %v", longest(times))
	}
	if rate := float64(len(times)) / 10; rate < 0.9*fuseCapacity {
		t.Fatalf("with the budget: %.1f files/s served of %g", rate, fuseCapacity)
	}
	if sent := int(math.Round(offered3x * 10)); refused < sent/2 {
		t.Fatalf("with the budget: %d of %d refused", refused, sent)
	}
	t.Logf("3x: %d served (longest %v), %d refused", len(times), longest(times), refused)
	if perSecond, known := b.rate.perSecond(); !known || math.Abs(perSecond-fuseCapacity) > 0.1*fuseCapacity {
		t.Fatalf("close rate %.2f/s (known %v), want about %g", perSecond, known, fuseCapacity)
	}
}

func TestTheCloseRateIgnoresIdleTimeAndFollowsTheLoad(t *testing.T) {
	b := &openBudget{budget: openTimeBudget(3 * time.Second)}
	now := time.Unix(1000, 0)
	// one file at a time, each closed after 62.5 ms: 16 files per busy second
	now = serveOneAtATime(b, now, 3, 62500*time.Microsecond)
	if _, known := b.rate.perSecond(); known {
		t.Fatal("three closes are too few to know the rate")
	}
	now = serveOneAtATime(b, now, 50, 62500*time.Microsecond)
	// within 1%: a close counts whole at once, its time spread over the memory
	if perSecond, _ := b.rate.perSecond(); math.Abs(perSecond-16) > 0.16 {
		t.Fatalf("rate %.3f/s, want 16", perSecond)
	}
	// an idle minute (between two cases) changes nothing
	now = now.Add(time.Minute)
	if perSecond, _ := b.rate.perSecond(); math.Abs(perSecond-16) > 0.16 {
		t.Fatalf("after idle time, rate %.3f/s", perSecond)
	}
	// an open that fails is no file served
	b.admit(now)
	b.closed(now.Add(time.Millisecond), false)
	// the store slows to 4 files/s: after a few memories' worth, the rate says so
	now = serveOneAtATime(b, now, 100, 250*time.Millisecond)
	if perSecond, _ := b.rate.perSecond(); math.Abs(perSecond-4) > 0.2 {
		t.Fatalf("rate %.3f/s after the store slowed, want about 4", perSecond)
	}
}

func TestTheBudgetRefusesPastLittlesCountAndAlwaysLetsOneThrough(t *testing.T) {
	b := &openBudget{budget: openTimeBudget(3 * time.Second)}
	now := time.Unix(1000, 0)
	now = serveOneAtATime(b, now, 80, 62500*time.Microsecond) // 16 files/s, one at a time
	admitted := 0
	for b.admit(now) {
		admitted++
		if admitted > 128 {
			break
		}
	}
	if admitted != 24 {
		t.Fatalf("%d opens admitted at 16/s within 1.5 s, want 24", admitted)
	}
	if n := b.refusalsToLog(now); n != 1 {
		t.Fatalf("refusals to log %d, want 1", n)
	}
	b.closed(now.Add(time.Millisecond), true)
	if !b.admit(now.Add(time.Millisecond)) {
		t.Fatal("a place freed by a close must be taken")
	}
	// the store stalls: nothing closes for 20 s, the rate falls towards
	// none and every new open is refused while any is under way...
	stalled := now.Add(20 * time.Second)
	if b.admit(stalled) {
		t.Fatal("an open while 24 files have waited 20 s")
	}
	for i := 0; i < 24; i++ {
		b.closed(stalled, false)
	}
	// ...but with none under way one goes through, to find whether it recovered
	if !b.admit(stalled) || b.admit(stalled) {
		t.Fatal("with nothing open, exactly one open must go through")
	}
	// no budget (REQUEST_DEADLINE_MS unset in a test root): nothing refused here
	unbounded := &openBudget{}
	for i := 0; i < 1000; i++ {
		if !unbounded.admit(now) {
			t.Fatalf("refused with no budget after %d", i)
		}
	}
}

// serveOneAtATime opens and closes n files in turn, each open for each, and
// returns the time after the last.
func serveOneAtATime(b *openBudget, now time.Time, n int, each time.Duration) time.Time {
	for i := 0; i < n; i++ {
		b.admit(now)
		now = now.Add(each)
		b.closed(now, true)
	}
	return now
}
