"""CPU per request with every path loaded at the same moments
(BENCH_CPU_DESIGN=same-moment): once a round, per size of the headline,
one window in which every taking-part path, nginx-static with them, gets
the same fixed request rate, open loop. The closed-loop windows of a round
are seconds apart for a path and its baseline, and this machine's speed
swings ~9% over seconds; a path bound by its database then costs whatever
rate the shared core allowed. In one window at one rate the swing befalls
every path alike and cancels in the ratio (measured: x/÷1.05-1.16 after 6
rounds against 1.26-1.43 from the closed loop). Here: the rate and length
rules and a window's CPU log ratios, pure; bench.benchmark.same_moment runs
the window and records each target's figures."""
import math

# The window's rate: this share of the slowest path's whole-answer rate at
# that size in the first round, so every path, that one too, answers with
# capacity to spare (its CPU per request is then its cost, not queueing)
RATE_SHARE = 0.25
MIN_RATE = 1  # vegeta's whole requests a second; no window runs slower
# cAdvisor reads every second: 3 s would hold two readings inside the window
# (a CPU rate over an inner stretch, not over its edges); 6 s holds five, so
# that a path's idle work (httpd's threads) and one slow reading weigh less
# (at 3 s gridfs-fuse's 100 KB ratio was x/÷1.61 after 6 rounds)
MIN_WINDOW_S = 6.0
# Requests per path a window's CPU per request is divided over, at least:
# fewer make one slow answer's CPU a visible share (1 MB at 2/s: 10 s)
MIN_WINDOW_REQUESTS = 20

# Why a target has no figure in a window (the record says which)
NOT_RUN, NO_CPU, NO_WHOLE, BEHIND = ("the window did not run", "no CPU reading", "no whole answer",
                                     "behind schedule")


def window_rate(whole_rates: list[float]) -> int | None:
    """The fixed rate (requests/s, whole) every path gets: RATE_SHARE of the
    slowest rate given (each path's whole answers a second in round 1),
    rounded down, at least MIN_RATE; None without a rate."""
    rates = [r for r in whole_rates if r > 0]
    return max(MIN_RATE, math.floor(RATE_SHARE * min(rates))) if rates else None


def window_seconds(rate: float) -> float:
    """At least MIN_WINDOW_S, and long enough for MIN_WINDOW_REQUESTS at
    `rate` (vegeta sends its k-th request at k / rate)."""
    return max(MIN_WINDOW_S, float(math.ceil(MIN_WINDOW_REQUESTS / rate)))


def window_cpu(window: dict, target: str) -> float | None:
    """A target's CPU ms per request in one window, None when it has no
    figure (not in the window, or excluded)."""
    found = (window.get("targets") or {}).get(target)
    if not found or found.get("excluded"):
        return None
    return found.get("cpu_ms_per_request") or None


def window_log_ratio(window: dict, target: str, baseline: str) -> float | None:
    """log(path / baseline) of CPU per request in one window: both from the
    same moments."""
    a, b = window_cpu(window, target), window_cpu(window, baseline)
    return math.log(a / b) if a and b and a > 0 and b > 0 else None


def window_logs(windows: list[dict], target: str, baseline: str) -> list[float]:
    """Every round's log ratio where both had a figure, in round order."""
    found = (window_log_ratio(w, target, baseline) for w in sorted(windows, key=lambda w: w.get("round") or 0))
    return [log for log in found if log is not None]
