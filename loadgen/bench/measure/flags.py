"""Every flag a row can carry, in one place: its name (the string results.json
stores), its mark (the symbol tables show), what it means (the legend every
report, bench compare and the A/B page print) and how a row takes it from its
repetitions. The thresholds the legends quote are declared here too, so the
words and the rule that sets a flag cannot drift apart."""
from dataclasses import dataclass

from .stats import NOISY_LEVEL, NOISY_WIDTH
from ..settings import OPEN_LOOP_MAX_S, OPEN_LOOP_REQUESTS

LOADGEN_BOUND_SHARE = 0.9
CORE_SATURATED_SHARE = 0.9
# Every client starts at once, so no answer comes before the first round
# ends: a run of n rounds can read up to 1/n low. Slow cases stretch for this.
ROUNDS_WANTED = 5
# The machine's cores less every container's, over a window: dockerd, the
# kernel's own threads and cAdvisor's reads leave under 0.15 here; a test
# suite or a build beside the lab takes a core's share, and the figure with it.
# The quiet check before a run cannot see what starts during it: this can.
DISTURBED_CORES = 0.25
SENT_RATE_KEPT = 0.95  # an open loop sending below this share of its asked rate fell behind its schedule
IDLE_CORES = 0.05   # an A/B twin not being timed used less than this of a core in the window: idle

# How a row takes a flag from its repetitions.
ANY = "any"        # from any repetition: a doubt on the case's spread, whichever repetition is the median
MEDIAN = "median"  # the shown (median) repetition's own
ROW = "row"        # judged on the row as a whole (its spread, its requests, its conformance)


@dataclass(frozen=True)
class Flag:
    name: str
    mark: str  # in DejaVu Sans (Debian's default font), so a page without emoji fonts shows it
    legend: str
    combine: str


# In the order marks and legends are shown.
FLAGS = {f.name: f for f in [
    Flag("loadgen-bound", "⚑", f"the load generator used at least {LOADGEN_BOUND_SHARE:.0%} of its CPU allowance "
         f"(its own CPU time over the run, or its container's), or its cores were at least {LOADGEN_BOUND_SHARE:.0%} "
         "busy with it and work outside the case's containers (the kernel's network processing, another program): "
         "it could get no more CPU, so the figure is partly the tool's speed, a floor for the server's, and a client "
         "timeout there is the tool reading late, not the path failing", ANY),
    Flag("core-saturated", "▲", f"a CPU core shared by two of this case's containers (by their cpusets) was over "
         f"{CORE_SATURATED_SHARE:.0%} busy: they competed for it", ANY),
    Flag("noisy", "~", f"the repetitions do not pin its requests per second to within x/÷{NOISY_WIDTH:.2f}: the "
         f"{NOISY_LEVEL:.0%} t interval of their geometric mean is wider (it narrows as repetitions grow)", ROW),
    Flag("throttled", "⊘", "the target's CFS quota throttled it", ANY),
    Flag("short-window", "◌", "the run held fewer than two of cAdvisor's readings of the target or a container "
         "working beside it: cores and CPU per request are rough", MEDIAN),
    Flag("few-rounds", "◔", f"each client completed fewer than {ROUNDS_WANTED} requests on average, even with the "
         "slow case's longest stretch: the clients all start at once and the first answers wait a whole round, so "
         "the figure can read low by up to one round in that many", ROW),
    Flag("cache-missed", "◇", "a caching path answered fewer than 99% of the case's counted requests from its "
         "cache: the row measures its upstream too", ROW),
    Flag("nonconforming", "✗", "the target failed the conformance suite and was timed anyway "
         "(BENCH_ALLOW_NONCONFORMING=1)", ROW),
    Flag("behind-schedule", "⇣", f"vegeta sent below {SENT_RATE_KEPT:.0%} of the rate asked (out of workers or "
         "CPU): requests waited to be sent and the wait is not in their latency (coordinated omission)", MEDIAN),
    Flag("few-samples", "ⁿ", f"the open-loop run held fewer than {OPEN_LOOP_REQUESTS:,} requests (it stops at "
         f"{OPEN_LOOP_MAX_S:g} s): its p99.9 rests on few answers, see its count", ROW),
    Flag("disturbed", "⚠", f"work outside the lab's containers (another program on the machine) used more than "
         f"{DISTURBED_CORES:g} of a core while the run was timed: the figure shares the machine with it", MEDIAN),
    Flag("link-bound", "⇄", "the answers crossed the link between the load generator's host and the paths' at 90% "
         "or more of the rate iperf3 measured on it before timing: the link, not the path, set the figure", ANY),
    Flag("refused", "↯", "some answers were not 2xx (their count and share are in Every case). Every lab path "
         "answers 503 with Retry-After when a request's deadline (REQUEST_DEADLINE_MS) passes before its answer "
         "starts, so past its capacity a path sheds load this way. Requests per second count the 2xx answers only; "
         "latency and CPU per request take in the refused ones too. ab and wrk do not say which status; vegeta's "
         "report counts them by status", ROW),
    Flag("twin-busy", "◐", f"in an A/B block, the twin not being timed used more than {IDLE_CORES:g} of a core in "
         "the window: the timed side did not have the machine to itself", MEDIAN),
]}
LOADGEN_BOUND, CORE_SATURATED, NOISY, THROTTLED, SHORT_WINDOW, FEW_ROUNDS, CACHE_MISSED, NONCONFORMING, \
    BEHIND_SCHEDULE, FEW_SAMPLES, DISTURBED, LINK_BOUND, REFUSED, TWIN_BUSY = FLAGS
BASELINE_MARK = "†"
BASELINE_NOTE = "a ratio taken against a flagged nginx-static figure"


def marks(flags) -> str:
    """The marks of a row's flags, in the legend's order."""
    return "".join(f.mark for name, f in FLAGS.items() if name in flags)


def shown(flags) -> list[Flag]:
    """The flags among these, in the legend's order (an unknown name last, without a mark)."""
    unknown = [Flag(name, "", "", ROW) for name in sorted(set(flags) - FLAGS.keys())]
    return [f for name, f in FLAGS.items() if name in flags] + unknown
