'use strict';
// Admission under overload (issue 39): how many requests may do their
// MongoDB work at once, and how long one may wait for its turn, so that what
// the path admits it finishes inside REQUEST_DEADLINE_MS and the rest are
// refused at once, before any database work. The policy of the Python
// paths (services/python-common/lab_http/admission.py, where the reasons
// are), chosen here for the same reason: node's bottleneck is the same
// database, whose latency grows with the reads under way, and a fixed cap
// (the 32 slots of NODE_MAX_STREAMS) admitted at 1 MB about three times
// what FerretDB finishes in time: node kept 6% of its capacity at 1000
// clients. An event loop waits as cheaply as gevent, so the same queue.
// - a concurrency limit, AIMD on measured latency (Netflix's
//   concurrency-limits): +1 per request whose lookup and first batch took
//   at most half of TARGET_SHARE of the deadline while the limit is in use
//   (+1/limit nearer the target), x0.9 to x0.5 (target over latency) once
//   per round when one took longer or MongoDB failed, never below
//   INITIAL_LIMIT;
// - a bounded wait for a place, in order: QUEUE_SHARE of the deadline for
//   a burst, and once the queue stands (not emptied within that budget, or
//   a request refused less than a target ago: CoDel for request queues)
//   SHORT_WAIT_MS; a burst's newcomer whose expected wait (Little's law:
//   its place in the queue over the rate admitted work is done at) passes
//   the budget gets SHORT_WAIT_MS too, as the refusals at each overload's
//   onset were held the whole budget (their p99 750-790 ms); those already
//   waiting keep their budget.

const TARGET_SHARE = 0.25;
const QUEUE_SHARE = 0.25;
// Half the Python paths' SHORT_WAIT (admission.py): a refusal here pays the
// event loop's lag twice, as its request is read and as this timer fires.
// At 50 ms node held its refusals 63 ms at p99 a second at the median second
// and 97 at the 90th, and its clients read 76-132 ms at p99 in make overload
// at 1 MB where flask's read 57 (issue 39, docs/faults.md). Still a wait: a
// closed-loop client refused at once asks again at once.
const SHORT_WAIT_MS = 25;
const INITIAL_LIMIT = 4;
const BACKOFF = 0.9;
const LATENCY_WEIGHT = 0.1;

class Admission {
  // Resolvers of the requests waiting, oldest first.
  #waiters = [];

  // maximum: the most admitted at once; deadlineMs: REQUEST_DEADLINE_MS.
  constructor(maximum, deadlineMs, clock = Date.now) {
    this.maximum = maximum;
    this.targetMs = deadlineMs * TARGET_SHARE;
    this.queueBudgetMs = deadlineMs * QUEUE_SHARE;
    this.minimum = Math.min(INITIAL_LIMIT, maximum);
    this.limit = this.minimum;
    this.meanLatencyMs = 0;
    this.meanInFlight = 0; // of the requests in the mean latency, when each was admitted
    this.inFlight = 0;
    this.decreasedAt = -Infinity;
    this.queueEmptyAt = 0; // when the queue was last empty
    this.overloadedUntil = -Infinity;
    this.clock = clock;
  }

  hasRoom() {
    return this.inFlight < Math.floor(this.limit);
  }

  // The queue has not emptied within its budget (standing, not a burst), or
  // was so, or refused a request, less than a target ago: a queue that
  // empties only as its waiters give up is no burst either.
  overloaded(now) {
    if (this.#waiters.length > 0 && now - this.queueEmptyAt > this.queueBudgetMs) {
      this.overloadedUntil = now + this.targetMs;
    }
    return now < this.overloadedUntil;
  }

  // A newcomer's wait for a place, by Little's law: its place in the queue
  // (those waiting and itself) over the rate admitted work is done at, the
  // places in use over its latency, both as measured (0 before any sample).
  // Not the limit's places: at an overload's onset the mean latency is that
  // of fewer at once than the limit lets in.
  expectedWait() {
    if (!this.meanInFlight) return 0;
    return (this.#waiters.length + 1) * this.meanLatencyMs / this.meanInFlight;
  }

  // A request let in: when, and the places then in use, its own included
  // (the concurrency its latency is measured at).
  #admit(now) {
    this.inFlight++;
    return { at: now, inFlight: this.inFlight };
  }

  // How long a request that finds no room may wait: the queue's budget for
  // a burst, when its expected wait fits in it, else SHORT_WAIT_MS, as once
  // the queue stands. Never none: a refusal answered at once comes straight
  // back from a closed-loop client (admission.py says how that kept flask
  // refused).
  waitAllowed(now) {
    if (this.overloaded(now) || this.expectedWait() > this.queueBudgetMs) {
      return Math.min(SHORT_WAIT_MS, this.queueBudgetMs);
    }
    return this.queueBudgetMs;
  }

  // Resolves to the request admitted, or to null: refused (no place
  // within what it may wait or before `deadline`, Date.now()'s scale), or
  // `signal` aborted while it waited (the client left).
  enter(deadline, signal) {
    const now = this.clock();
    if (this.hasRoom() && this.#waiters.length === 0) {
      return Promise.resolve(this.#admit(now));
    }
    const until = now + Math.min(this.waitAllowed(now), deadline - now);
    if (until <= now || signal.aborted) {
      if (!signal.aborted) this.overloadedUntil = now + this.targetMs; // refused: newcomers wait briefly
      return Promise.resolve(null);
    }
    if (this.#waiters.length === 0) this.queueEmptyAt = now;
    return new Promise((resolve) => {
      let timer;
      const settle = (admitted) => {
        clearTimeout(timer);
        signal.removeEventListener('abort', leave);
        resolve(admitted);
      };
      const leave = () => {
        const index = this.#waiters.indexOf(settle);
        if (index >= 0) this.#waiters.splice(index, 1);
        if (this.#waiters.length === 0) this.queueEmptyAt = this.clock();
        settle(null);
      };
      timer = setTimeout(() => {
        this.overloadedUntil = this.clock() + this.targetMs; // refused after its wait
        leave();
      }, until - now);
      signal.addEventListener('abort', leave, { once: true });
      this.#waiters.push(settle);
    });
  }

  // One admitted request's database work before its head is over (failed:
  // MongoDB failed or the deadline passed): AIMD on its latency.
  finished(admitted, failed) {
    const now = this.clock();
    this.inFlight--;
    const latency = now - admitted.at;
    if (!failed) { // a failure's latency is the deadline's or the driver's, not the work's
      this.meanLatencyMs = movedTowards(this.meanLatencyMs, latency);
      this.meanInFlight = movedTowards(this.meanInFlight, admitted.inFlight);
    }
    if (failed || latency > this.targetMs) {
      // Once per round: those admitted before the last cut were measured under the old limit.
      if (admitted.at >= this.decreasedAt) {
        // In proportion to the overshoot (Netflix's gradient limit), halved at most.
        const factor = Math.max(0.5, Math.min(BACKOFF, this.targetMs / Math.max(latency, 1e-9)));
        this.limit = Math.max(this.minimum, this.limit * factor);
        this.decreasedAt = now;
      }
    } else if (2 * (this.inFlight + 1) >= this.limit) { // grow only a limit in use
      const step = latency < this.targetMs / 2 ? 1 : 1 / this.limit;
      this.limit = Math.min(this.maximum, this.limit + step);
    }
    while (this.#waiters.length > 0 && this.hasRoom()) {
      const grant = this.#waiters.shift();
      if (this.#waiters.length === 0) this.queueEmptyAt = now;
      grant(this.#admit(now));
    }
  }
}

// A mean moved by LATENCY_WEIGHT towards a new sample; the first sample itself.
function movedTowards(mean, sample) {
  return mean ? mean + LATENCY_WEIGHT * (sample - mean) : sample;
}

module.exports = { Admission, SHORT_WAIT_MS };
