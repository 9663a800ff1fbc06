"""The schedule every timed phase follows (bench.benchmark.schedule): the
order of targets per repetition and the warm-up until the rate settles."""
from collections import Counter
from dataclasses import dataclass

import pytest

from bench.benchmark.schedule import Schedule, repetition_orders, warm_up, williams_rows


@pytest.mark.parametrize("n", range(1, 10))
def test_williams_rows_balance_positions_and_predecessors(n):
    rows = williams_rows(n)
    assert len(rows) == (2 * n if n % 2 else n)
    assert all(sorted(row) == list(range(n)) for row in rows)
    # every target holds every position equally often
    for position in range(n):
        assert Counter(row[position] for row in rows) == {t: len(rows) // n for t in range(n)}
    # every ordered pair of neighbours equally often: carry-over falls on all alike
    pairs = Counter((row[i], row[i + 1]) for row in rows for i in range(n - 1))
    if n > 1:
        assert set(pairs.values()) == {len(rows) // n}
        assert len(pairs) == n * (n - 1)


def test_nginx_static_follows_a_different_path_each_repetition():
    """The old rotation put the denominator of every ratio after the same
    path every time; eight targets over three repetitions now differ."""
    names = ["nginx-static", "httpd-static", "nginx-gridfs", "flask", "node", "gridfs-fuse", "nginx-cache",
             "flask-postgres"]
    orders = repetition_orders(names, 3, "20261125T141036Z:1KB.bin c=5")
    assert len({tuple(o) for o in orders}) == 3
    before = [o[o.index("nginx-static") - 1] if o.index("nginx-static") else None for o in orders]
    assert len(set(before)) == 3, orders


def test_two_targets_take_turns_in_abba_blocks():
    orders = repetition_orders(["a", "b"], 6, "seed")
    assert {tuple(o) for o in orders[0::2]} == {tuple(orders[0])}
    assert orders[1] == orders[0][::-1]


def test_the_same_seed_gives_the_same_orders_and_another_seed_may_not():
    names = list("abcdefg")
    assert repetition_orders(names, 5, "x") == repetition_orders(names, 5, "x")
    assert len({tuple(map(tuple, repetition_orders(names, 3, f"run-{i}"))) for i in range(20)}) > 1


@dataclass
class Window:
    requests: int
    rps: float


def windows_of(rates: list[tuple[int, float]]):
    """The figures a tool would give, window after window, with the lengths asked."""
    asked: list[float] = []

    def window(seconds: float) -> Window:
        asked.append(seconds)
        return Window(*rates[len(asked) - 1])
    return window, asked


def test_warm_up_stops_when_two_windows_agree_within_two_percent():
    window, asked = windows_of([(300, 300.0), (500, 500.0), (505, 505.0), (1, 1.0)])
    warm = warm_up(window, concurrency=5, bound_s=10)
    assert warm.settled and asked == [1.0, 1.0, 1.0] and warm.seconds == 3.0
    assert warm.rps == 505.0 and warm.requests == 505


def test_warm_up_is_bounded_and_says_it_did_not_settle():
    window, asked = windows_of([(100 * (i + 1), 100.0 * (i + 1)) for i in range(20)])
    warm = warm_up(window, concurrency=5, bound_s=6)
    assert not warm.settled and warm.seconds == 6.0 and asked == [1.0] * 6
    assert [w["rps"] for w in warm.to_dict()["windows"]] == [100.0 * (i + 1) for i in range(6)]


def test_a_window_shorter_than_a_round_of_clients_is_doubled():
    """c=100 on a 1 MB GridFS file: a 1 s window holds no answer at all."""
    window, asked = windows_of([(0, 0.0), (30, 15.0), (60, 15.1), (120, 15.0)])
    warm = warm_up(window, concurrency=100, bound_s=20)
    # 1 + 2 + 4 + 8 = 15 s; a 16 s window would pass the bound
    assert asked == [1.0, 2.0, 4.0, 8.0] and warm.seconds == 15.0
    assert not warm.settled  # each window was of another length: no two to compare


def test_windows_of_different_lengths_never_count_as_agreeing():
    window, asked = windows_of([(3, 30.0), (60, 30.0), (120, 30.0)])
    warm = warm_up(window, concurrency=50, bound_s=8)
    assert asked == [1.0, 2.0, 2.0] and warm.settled


def test_schedule_passes_over_what_failed_and_records_the_orders():
    schedule = Schedule(seed="run", repetitions=4)
    ran = []
    failed = set()

    def one(name, repetition):
        ran.append((name, repetition))
        if name == "b" and repetition == 1:
            failed.add("b")
    schedule.repeat("1KB c=5", ["a", "b", "c"], one, skip=lambda name: name in failed)
    assert [r for r in ran if r[0] == "b"] == [("b", 1)]
    assert sum(1 for r in ran if r[0] == "a") == 4
    assert schedule.to_dict()["orders"]["1KB c=5"] == repetition_orders(["a", "b", "c"], 4, "run:1KB c=5")
