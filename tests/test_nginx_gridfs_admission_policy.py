"""The nginx GridFS module's admission policy (issue 39,
ngx_http_gridfs_admission.c: plain arithmetic on the times given), stepped
through tests/module_policy/gridfs_admission_driver.c, built with ASan and
UBSan against the module's header: the same rules as lab_http/admission.py
(tests/test_admission.py), in ms, and the module's own (a line stands only
while the database answers). tests/test_admission.py times the module
under overload, tests/test_nginx_gridfs_recovery.py through a restart."""
import subprocess
from collections import deque

import pytest

from support.nginx_gridfs_build import build_admission_driver

pytestmark = pytest.mark.native  # built against the nginx-dev tree and libmongoc's headers

SHORT_WAIT_MS = 50  # NGX_HTTP_GRIDFS_SHORT_WAIT_MS


class ModulePolicy:
    """One ngx_http_gridfs_admission_t, as a worker starts it, in the
    driver's process."""

    def __init__(self, binary, maximum: int, deadline_ms: int):
        self.proc = subprocess.Popen([str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ask(f"init {maximum} {deadline_ms}")

    def ask(self, line: str) -> str:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        assert answer and not answer.startswith("error"), (line, answer, self.proc.poll())
        return answer

    def set(self, **fields: float) -> None:
        for field, value in fields.items():
            self.ask(f"set {field} {value}")

    def state(self) -> dict[str, float]:
        words = self.ask("state").split()
        return {name: float(value) for name, value in zip(words[::2], words[1::2])}

    def wait(self, now: int) -> int:
        return int(self.ask(f"wait {now}"))

    def overloaded(self, now: int) -> bool:
        return self.ask(f"overloaded {now}") == "1"

    def expected_wait(self) -> float:
        return float(self.ask("expected_wait"))

    def has_room(self) -> bool:
        return self.ask("has_room") == "1"

    def admit(self) -> int:
        """One more in flight: the places then in use, its own included."""
        return int(self.ask("admit"))

    def finished(self, admitted_at: int, now: int, outcome: str = "sample", places: int | None = None) -> None:
        """places: in use when it was admitted, its own included; by
        default those in use now (1 at least)."""
        self.ask(f"finished {admitted_at} {now} {outcome}" + (f" {places}" if places is not None else ""))

    def step(self, what: str, now: int) -> None:
        """refused, queued or dequeued at now."""
        self.ask(f"{what} {now}")

    def close(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(10) == 0


@pytest.fixture
def policy():
    """policy(maximum, deadline_ms): a new one."""
    binary, made = build_admission_driver(), []

    def make(maximum: int = 100, deadline_ms: int = 2000) -> ModulePolicy:
        made.append(ModulePolicy(binary, maximum, deadline_ms))
        return made[-1]

    yield make
    for p in made:
        p.close()


def test_the_limit_comes_down_once_per_round_by_the_overshoot_and_halved_at_most(policy):
    p = policy(deadline_ms=2000)  # target 500 ms
    p.set(limit=20, in_flight=20)
    for _ in range(10):  # ten slow answers of one round: one cut, by the overshoot
        p.finished(admitted_at=0, now=625)
    assert p.state()["limit"] == pytest.approx(16.0)
    p.set(in_flight=10)
    p.finished(admitted_at=1200, now=1740)  # admitted after the cut: x0.9 at least
    assert p.state()["limit"] == pytest.approx(14.4)
    p.finished(admitted_at=2000, now=6000)  # far past the target: halved at most
    assert p.state()["limit"] == pytest.approx(7.2)


def test_the_limit_comes_down_no_lower_than_where_it_starts_and_back_by_a_place_an_answer(policy):
    p = policy(maximum=10, deadline_ms=1000)
    for round_start in range(0, 20000, 1000):
        p.set(in_flight=1)
        p.finished(admitted_at=round_start, now=round_start + 900, outcome="failed")
    assert p.state()["limit"] == 4.0
    for _ in range(5):  # answers far under the target, each with the limit in use
        p.set(in_flight=int(p.state()["limit"]))
        p.finished(admitted_at=30000, now=30010)
    assert p.state()["limit"] == 9.0


def test_a_burst_waits_the_budget_only_while_its_turn_is_expected_within_it(policy):
    p = policy(deadline_ms=2000)  # queue budget 500 ms
    assert p.wait(now=0) == 500  # no sample yet: nothing expected
    p.set(in_flight=4)
    p.finished(admitted_at=0, now=10, places=4)  # a mean latency of 10 ms at 4 places
    p.set(waiting=150)  # (150 + 1) x 10 / 4 = 377.5 ms: fits
    assert p.expected_wait() == pytest.approx(377.5)
    assert p.wait(now=20) == 500
    p.set(waiting=199)  # (199 + 1) x 10 / 4 = 500 ms: fits, just
    assert p.wait(now=20) == 500
    p.set(waiting=200)  # 502.5 ms: the short wait, as in a standing queue, never none
    assert p.wait(now=20) == SHORT_WAIT_MS
    p.set(mean_in_flight=8)  # twice as many done in that time: fits again
    assert p.wait(now=20) == 500


def closed_loop_of_four(p: ModulePolicy) -> int:
    """4 clients asked in a closed loop, each answered in 88 ms (staggered
    by 22 ms), and the time it ended: the limit grew to 9 meanwhile, on
    answers far under the target."""
    running = deque((now, p.admit()) for now in range(0, 88, 22))
    for now in range(88, 100 * 22, 22):
        admitted_at, places = running.popleft()
        p.finished(admitted_at, now, places=places)
        running.append((now, p.admit()))
    return now


def test_the_expected_wait_is_at_the_places_in_use_its_latency_was_measured_at_not_the_limit(policy):
    """An overload's onset (tests/test_admission.py's, in ms): the mean
    latency is 4 clients' at once, the limit lets 9 in; the work is done at
    4 / 88 ms, 45 a second, not 102."""
    p = policy(maximum=50, deadline_ms=2000)  # queue budget 500 ms
    now = closed_loop_of_four(p)
    state = p.state()
    assert (state["limit"], state["mean_latency"], state["mean_in_flight"]) == pytest.approx((9, 88, 4), rel=1e-3)
    while p.has_room():  # the burst takes the places
        p.admit()
    for _ in range(21):
        p.step("queued", now)
    assert p.wait(now) == 500  # the 22nd: 22 x 88 / 4, 484 ms
    p.step("queued", now)
    assert p.wait(now) == SHORT_WAIT_MS  # the 23rd: 506 ms (over the limit's places, 225 ms: the budget, in vain)


def test_a_line_stands_when_it_has_not_emptied_within_its_budget_or_refused_less_than_a_target_ago(policy):
    p = policy(deadline_ms=2000)  # queue budget 500 ms, target 500 ms
    p.set(in_flight=1)
    p.finished(admitted_at=9990, now=10000)  # the database answers
    p.step("queued", now=10000)
    assert p.wait(now=10450) == 500  # a burst: the whole budget
    p.finished(admitted_at=10500, now=10520)
    assert p.wait(now=10550) == SHORT_WAIT_MS  # not emptied within its budget: it stands
    p.step("dequeued", now=10600)
    assert p.wait(now=11000) == SHORT_WAIT_MS  # emptied, but less than a target ago
    p.finished(admitted_at=11080, now=11090)
    assert p.wait(now=11100) == 500
    p.step("refused", now=11100)
    p.finished(admitted_at=11540, now=11550)
    assert p.overloaded(now=11300) and not p.overloaded(now=11600)


def test_a_line_does_not_stand_while_the_database_answers_nothing(policy):
    p = policy(deadline_ms=2000)
    p.set(in_flight=1)
    p.finished(admitted_at=9990, now=10000)
    p.step("queued", now=10000)
    assert p.wait(now=10600) == 500  # away, not busy: nothing answered for more than the budget
    p.finished(admitted_at=10000, now=10700)
    assert p.wait(now=10700) == SHORT_WAIT_MS


def test_work_that_found_the_database_away_neither_cuts_the_limit_nor_counts_its_latency(policy):
    p = policy(deadline_ms=2000)  # target 500 ms
    p.set(limit=10, in_flight=10)
    p.finished(admitted_at=0, now=10)  # a mean latency of 10 ms, the limit 11
    p.finished(admitted_at=0, now=1500, outcome="away")  # waited out a restart, then answered
    p.finished(admitted_at=0, now=3000, outcome="away")  # failed for want of a server
    p.step("back", now=1500)
    p.finished(admitted_at=100, now=1520)  # admitted before it came back: it waited for a thread behind those
    p.finished(admitted_at=200, now=3100, outcome="failed")
    state = p.state()
    assert (state["limit"], state["mean_latency"], state["mean_in_flight"], state["in_flight"]) == (11.0, 10.0, 10.0, 5)
    p.finished(admitted_at=3000, now=5000, outcome="failed")  # the database answering: a cut
    assert p.state()["limit"] == 5.5


def test_the_line_that_built_while_the_database_was_away_does_not_stand_once_it_is_back(policy):
    p = policy(maximum=1000, deadline_ms=2000)  # queue budget 500 ms, target 500 ms
    p.set(in_flight=4)
    p.finished(admitted_at=9990, now=10000)
    for now in range(10000, 11500, 10):  # the line through a restart
        p.step("queued", now=now)
    for now in range(10500, 11500, 10):  # each its budget out, the line never drained
        p.step("refused", now=now)
    p.finished(admitted_at=10000, now=11500, outcome="away")
    p.step("back", now=11500)
    state = p.state()  # the backlog goes in at once
    assert state["limit"] == state["in_flight"] + state["waiting"] == 2 + 150
    p.step("refused", now=11550)  # another that waited out the outage
    assert p.wait(now=11600) == 500  # a burst, not a line that stands
    p.finished(admitted_at=11500, now=11510)
    assert not p.overloaded(now=11990)
    p.finished(admitted_at=11980, now=11990)
    assert p.wait(now=12010) == SHORT_WAIT_MS  # still there a budget after the return: it stands
    p.step("refused", now=12020)  # and refusals mark it again
    assert p.overloaded(now=12400)


def test_unreachable_work_while_the_database_answers_is_no_outage(policy):
    p = policy(deadline_ms=2000)  # queue budget 500 ms
    p.set(limit=10, in_flight=10)
    for now in range(10000, 11000, 20):  # a standing line, the database answering
        p.finished(admitted_at=now - 100, now=now)
        p.set(in_flight=10)
        p.step("queued", now=now)
    p.step("refused", now=10990)
    before = p.state()
    p.finished(admitted_at=10500, now=11000, outcome="away")  # a check of the driver's failed under load
    p.step("back", now=11000)
    after = p.state()
    assert after["limit"] == before["limit"] and p.overloaded(now=11010)
