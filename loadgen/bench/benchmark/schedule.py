"""The one schedule every timed phase follows (the rounds of cases, ab -k
against wrk, the working set, the store benchmark): which target runs when
in each repetition, and how long a target warms up before it is counted.

Order. Running the targets in the same order every repetition puts the
denominator of every ratio (nginx-static) always right after the same path,
and a path's first run after another's turn was measured 20-25% slower than
its second. Each repetition therefore takes a row of a Williams design
(a balanced Latin square): over a full cycle of rows every target holds
every position once and follows every other target once (twice over the
2n rows used when n is odd), so carry-over from one path to the next falls
on all alike. With two targets that is A B, B A, ...: the A B B A blocks a
paired comparison wants. Which row a phase starts on comes from a seed
(the run's), and the orders used are recorded in results.json.

Warm-up. A fixed few seconds warms a fast path well and a slow one not at
all. A target is loaded in windows of WINDOW_S until two consecutive
windows' rates agree within AGREE (2%), up to the bound BENCH_WARMUP; a
window that completes fewer requests than the concurrency (every client
starts at once, so the first answers come after a round) is too short to
give a rate, and the next is twice as long. The windows are recorded, and
whether the rate settled."""
import hashlib
import random
from dataclasses import asdict, dataclass, field
from typing import Callable, Protocol

WINDOW_S = 1.0   # one warm-up window, doubled while a window holds less than a round
# The phases outside the rounds (ab -k against wrk, the working set, the
# store benchmark) repeat this often, or BENCH_REPETITIONS if fewer.
PHASE_REPETITIONS = 3
WINDOW_WARM_UP_S = 1  # a round's counted window follows this much load on the same path, not counted
AGREE = 0.02     # two consecutive windows within this share of each other: settled


class Rate(Protocol):
    """What a warm-up window gives back (a clients.timing.Measurement does)."""
    requests: int
    rps: float


def williams_rows(n: int) -> list[list[int]]:
    """A Williams design for n treatments: n rows when n is even, 2n when
    odd (the rows and their mirrors), each a permutation of range(n); over
    all rows each treatment immediately follows each other one equally often."""
    if n <= 0:
        return []
    first, low, high = [0], 1, n - 1
    while len(first) < n:  # 0, 1, n-1, 2, n-2, ...
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    rows = [[(x + shift) % n for x in first] for shift in range(n)]
    return rows + [row[::-1] for row in rows] if n % 2 else rows


def seeded_start(seed: str, rows: int) -> int:
    """Where in the design a phase starts: the same seed, the same orders."""
    return int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big") % rows if rows else 0


def repetition_orders(names: list[str], repetitions: int, seed: str) -> list[list[str]]:
    """The order of `names` in each of `repetitions` repetitions: consecutive
    rows of the Williams design from a seeded start, cycling if there are
    more repetitions than rows."""
    rows = williams_rows(len(names))
    if not rows:
        return [[] for _ in range(repetitions)]
    start = seeded_start(seed, len(rows))
    return [[names[i] for i in rows[(start + r) % len(rows)]] for r in range(repetitions)]


def round_order(names: list[str], seed: str, round_: int) -> list[str]:
    """A round's order: a fresh permutation of `names`, drawn from the seed
    and the round's number alone, so anyone can draw it again."""
    return random.Random(f"{seed}:{round_}").sample(names, len(names))


@dataclass
class WarmUp:
    """How a target was warmed before one case: every window (seconds,
    requests, rate), whether the last two agreed within AGREE, the seconds
    spent in all."""
    windows: list[dict] = field(default_factory=list)
    settled: bool = False
    seconds: float = 0.0

    @property
    def requests(self) -> int:
        return self.windows[-1]["requests"] if self.windows else 0

    @property
    def rps(self) -> float:
        """The last window's rate: what the case's duration is planned from."""
        return self.windows[-1]["rps"] if self.windows else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "agree_within": AGREE}


def rates_agree(a: float, b: float, within: float = AGREE) -> bool:
    """Two windows' rates within `within` of their mean (both nonzero)."""
    if a <= 0 or b <= 0:
        return False
    return abs(a - b) / ((a + b) / 2) <= within


def warm_up(window: Callable[[float], "Rate"], concurrency: int, bound_s: float) -> WarmUp:
    """window(seconds) loads the target that long and returns its figures
    (a Measurement: completed requests and requests per second). Windows run until two consecutive ones
    of the same length agree, or the next would pass bound_s."""
    result = WarmUp()
    length = WINDOW_S
    while result.seconds + length <= bound_s + 1e-9:
        measured = window(length)
        requests, rps = measured.requests, measured.rps
        result.windows.append({"seconds": length, "requests": requests, "rps": round(rps, 3)})
        result.seconds = round(result.seconds + length, 3)
        last = result.windows[-2:]
        if (len(last) == 2 and last[0]["seconds"] == last[1]["seconds"]
                and rates_agree(last[0]["rps"], last[1]["rps"])):
            result.settled = True
            break
        if requests < concurrency:
            length *= 2  # too short to hold a round of the clients: no rate to compare yet
    return result


@dataclass
class Schedule:
    """The run's orders, recorded: `orders` maps each phase (e.g. "1KB c=5")
    to the order of every repetition; `warm_ups` each (phase, target) to
    its WarmUp."""
    seed: str
    repetitions: int
    orders: dict[str, list[list[str]]] = field(default_factory=dict)
    warm_ups: dict[str, dict] = field(default_factory=dict)

    def repeat(self, phase: str, names: list[str], one: Callable[[str, int], None],
               skip: Callable[[str], bool] = lambda name: False, repetitions: int | None = None,
               before: Callable[[int], None] = lambda repetition: None) -> None:
        """one(name, repetition) for every name in every repetition (the
        run's count, or `repetitions`: an A/B's blocks), in the phase's
        recorded order, after before(repetition); a name for which
        skip(name) holds (down, failed) is passed over from then on."""
        orders = repetition_orders(names, repetitions or self.repetitions, f"{self.seed}:{phase}")
        self.orders[phase] = orders
        for repetition, order in enumerate(orders, 1):
            if all(skip(name) for name in order):
                continue
            before(repetition)
            for name in order:
                if not skip(name):
                    one(name, repetition)

    def record_warm_up(self, phase: str, name: str, warm: WarmUp) -> None:
        self.warm_ups[f"{name} {phase}"] = warm.to_dict()

    def to_dict(self) -> dict:
        return {"design": "rounds: shuffled; other phases: williams", "seed": self.seed,
                "warm_up_window_s": WINDOW_S, "warm_up_agree": AGREE,
                "orders": self.orders, "warm_ups": self.warm_ups}
