"""Admission under overload (issue 39): how many requests may do their
database work at once, and how long one may wait for its turn, so that what
a path admits it finishes inside REQUEST_DEADLINE_MS and the rest are
refused at once, before any database work.

A path that admits more than its database finishes within the deadline
does the work and then throws it away at the deadline (flask kept 61% of
its capacity at 1000 clients, node 6%). So:
- a concurrency limit adapted from measured latency, AIMD as in Netflix's
  concurrency-limits (AIMDLimit): +1 per request answered within half of
  TARGET_SHARE of the deadline while the limit is in use (+1/limit nearer
  the target), x0.9 to x0.5 (target over latency) once per round when one
  takes longer or the store fails, never below INITIAL_LIMIT (at 1, a
  path back from a database outage refused 20 clients at once; AIMDLimit's
  floor is 20). Not a fixed cap: what the database finishes in time depends on
  the file size, the database and the machine (1 KB: hundreds at once;
  1 MB on FerretDB: about ten).
  Latency rather than a gradient from the smallest latency seen: a path's
  latencies differ by file size, its deadline does not;
- a bounded wait for a place, in order (FIFO): QUEUE_SHARE of the deadline
  for a burst, and once the queue stands only SHORT_WAIT: CoDel for
  request queues ("Fail at Scale", ACM Queue 2015). It stands when it has
  not emptied within its budget, or refused a request less than a TARGET
  ago. A burst that drains in time waits and is served (40 clients at
  once on four places); in steady overload the refusals keep the queue in
  that state, so they stay fast. No request is refused without its wait
  (wait_allowed says why).
  A burst's newcomer gets the budget only when its expected wait fits in
  it (Little's law: its place in the queue over the rate admitted work is
  done at; 0 before any sample), else SHORT_WAIT: every overload starts
  as a burst, and its first arrivals, all given the budget, were refused
  after it (750 ms: the refusals' p99 at 1 MB in `make overload`, their
  median 52-66 ms; overload-20261129T124554Z). No margin on it: a burst
  that drains within the budget is served (doubled, the estimate refused
  17 of 40 stalled readers at once on a busy machine, test_slow_readers).
  Those already waiting keep their budget: cut at the onset, they were
  refused after most of it (a p99 of 800 ms). The budget is a quarter of
  the deadline, as the target: at half, requests admitted after it on a
  busy machine met the deadline (6 of 30), and waiters misjudged were
  refused after a second.

The policy is plain arithmetic on times given (AdmissionPolicy); the Python
paths wait with gevent (Admission), node has the same policy in JavaScript
(services/node/admission.js), its short wait half this one."""
import time
from collections import deque
from typing import NamedTuple

from gevent.event import AsyncResult

# The share of the deadline an admitted request's database work may take
# before the limit comes down, and the share a request may wait for its
# place: both fit in REQUEST_DEADLINE_MS with half of it to spare.
TARGET_SHARE = 0.25
QUEUE_SHARE = 0.25
SHORT_WAIT = 0.05  # seconds: a waiter's wait once the queue stands
INITIAL_LIMIT = 4
BACKOFF = 0.9
LATENCY_WEIGHT = 0.1  # of each new sample in the mean latency and the mean places in use


class Admitted(NamedTuple):
    """A request let in: when, and the places then in use, its own included
    (the concurrency its latency is measured at)."""
    at: float
    in_flight: int


class AdmissionPolicy:
    """The limit, the mean latency and the queue's length; times are
    time.monotonic()'s."""

    def __init__(self, maximum: int, deadline: float):
        self.maximum = maximum
        self.target = deadline * TARGET_SHARE
        self.queue_budget = deadline * QUEUE_SHARE
        self.minimum = float(min(INITIAL_LIMIT, maximum))
        self.limit = self.minimum
        self.mean_latency = 0.0
        self.mean_in_flight = 0.0  # of the requests in the mean latency, when each was admitted
        self.in_flight = 0
        self.waiting = 0
        self.decreased_at = float("-inf")
        self.queue_empty_at = 0.0  # when the queue was last empty
        self.overloaded_until = float("-inf")

    def has_room(self) -> bool:
        return self.in_flight < int(self.limit)

    def overloaded(self, now: float) -> bool:
        """The queue has not emptied within its budget (standing, not a
        burst), or was so, or refused a request, less than a TARGET ago: a
        queue that empties only as its waiters give up is no burst either."""
        if self.waiting > 0 and now - self.queue_empty_at > self.queue_budget:
            self.overloaded_until = now + self.target
        return now < self.overloaded_until

    def expected_wait(self) -> float:
        """A newcomer's wait for a place, by Little's law: its place in the
        queue (those waiting and itself) over the rate admitted work is
        done at, the places in use over its latency, both as measured
        (0 before any sample). Not the limit's places: at an overload's
        onset the mean latency is that of fewer at once than the limit
        lets in, and the wait was short of it by their ratio."""
        if not self.mean_in_flight:
            return 0.0
        return (self.waiting + 1) * self.mean_latency / self.mean_in_flight

    def wait_allowed(self, now: float) -> float:
        """How long a request that finds no room may wait: the queue's
        budget for a burst, when its expected wait fits in it, else
        SHORT_WAIT, as once the queue stands. Never none: a refusal held
        for SHORT_WAIT costs a waiting greenlet nothing, while one answered
        at once comes straight back from a closed-loop client, and on one
        core those refusals delay every admitted request's next step, its
        latency keeps the limit at its floor and the queue standing: flask
        served 1 KB at 100 clients at 1-7% of its rate for minutes (refused
        on an estimate, at once)."""
        if self.overloaded(now) or self.expected_wait() > self.queue_budget:
            return min(SHORT_WAIT, self.queue_budget)
        return self.queue_budget

    def refused(self, now: float) -> None:
        """A request refused, at the door or after its wait: newcomers wait
        SHORT_WAIT for a TARGET."""
        self.overloaded_until = now + self.target

    def queued(self, now: float) -> None:
        if self.waiting == 0:
            self.queue_empty_at = now
        self.waiting += 1

    def dequeued(self, now: float) -> None:
        self.waiting -= 1
        if self.waiting == 0:
            self.queue_empty_at = now

    def admit(self, now: float) -> Admitted:
        self.in_flight += 1
        return Admitted(now, self.in_flight)

    def finished(self, admitted: Admitted, now: float, failed: bool) -> None:
        """One admitted request's database work is over (failed: the store
        failed or the deadline passed): AIMD on its latency."""
        self.in_flight -= 1
        latency = now - admitted.at
        if not failed:  # a failure's latency is the deadline's or the driver's, not the work's
            self.mean_latency = moved_towards(self.mean_latency, latency)
            self.mean_in_flight = moved_towards(self.mean_in_flight, admitted.in_flight)
        if failed or latency > self.target:
            # Once per round: those admitted before the last cut were measured under the old limit.
            if admitted.at >= self.decreased_at:
                # In proportion to the overshoot (as Netflix's gradient
                # limit), halved at most: x0.9 once a round took ten rounds
                # to come down from a latency past the deadline.
                factor = max(0.5, min(BACKOFF, self.target / max(latency, 1e-9)))
                self.limit = max(self.minimum, self.limit * factor)
                self.decreased_at = now
        elif 2 * (self.in_flight + 1) >= self.limit:  # grow only a limit in use
            step = 1.0 if latency < self.target / 2 else 1 / self.limit
            self.limit = min(float(self.maximum), self.limit + step)


def moved_towards(mean: float, sample: float) -> float:
    """A mean moved by LATENCY_WEIGHT towards a new sample; the first sample itself."""
    return mean + LATENCY_WEIGHT * (sample - mean) if mean else sample


class Admission:
    """The policy for one gevent worker: enter() before a request's first
    database call, finished() when its database work before the head is
    over, whatever its outcome."""

    def __init__(self, maximum: int, deadline: float, clock=time.monotonic):
        self.policy = AdmissionPolicy(maximum, deadline)
        self.clock = clock
        self.waiters: deque[AsyncResult] = deque()

    def enter(self, deadline: float) -> Admitted | None:
        """The request admitted, or None: refused (no place within what it
        may wait, or before its deadline)."""
        policy, now = self.policy, self.clock()
        if policy.has_room() and not self.waiters:
            return policy.admit(now)
        wait = min(policy.wait_allowed(now), deadline - now)
        if wait <= 0:
            policy.refused(now)
            return None
        waiter = AsyncResult()  # set to its admission
        self.waiters.append(waiter)
        policy.queued(now)
        try:
            waiter.wait(wait)
        finally:
            if not waiter.ready():  # it waited in vain, or the greenlet was killed
                self.waiters.remove(waiter)
                policy.dequeued(self.clock())
                policy.refused(self.clock())
        return waiter.value._replace(at=self.clock()) if waiter.ready() else None  # its work begins now

    def finished(self, admitted: Admitted, failed: bool) -> None:
        policy = self.policy
        policy.finished(admitted, self.clock(), failed)
        while self.waiters and policy.has_room():
            policy.dequeued(self.clock())
            self.waiters.popleft().set(policy.admit(self.clock()))
