"""What a tool run and a warm-up cost beside their own seconds, for the plan
of a run (each phase's planned_seconds) and the pace its Progress counts:
here, beside the quiet wait and the warm-ups they follow from, so that
bench.progress (the lines and the pace) imports nothing of the benchmark."""
from .quiet import QUIET_SAMPLE_S
from .schedule import WINDOW_S as WARM_UP_WINDOW_S

# Per tool run, besides its own seconds: starting the tool, reading cAdvisor;
# a measured run first waits for a quiet machine (at least one reading).
OVERHEAD_S = 0.5
MEASURED_OVERHEAD_S = OVERHEAD_S + QUIET_SAMPLE_S


def warm_up_seconds(cfg) -> float:
    """What a warm-up is planned at: two windows, the fewest that can agree
    (a slow case takes longer, up to BENCH_WARMUP, and the pace shows it)."""
    return min(cfg.warmup, 2 * WARM_UP_WINDOW_S) + 2 * OVERHEAD_S if cfg.warmup else 0.0
