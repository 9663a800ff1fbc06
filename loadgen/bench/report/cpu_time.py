"""CPU cores over time, a chart per timed target: the target's, its
database's and the load generator's cores between cAdvisor's once-a-second
samples (results.cpu_samples), each counted repetition's window shaded, so
what ran beside a case and what the run did between cases can be seen."""
import math

from .headline import size_label, timed_targets
from .model import Figure
from .svg import _nice, line_chart
from ..measure.cadvisor import Counters
from ..measure.usage import LOADGEN, cores_series
from ..results import Results

MARGIN_S = 2.0    # seconds of context either side of a target's windows
MAX_POINTS = 600  # a line's points, about one per pixel of its width: the page stays small


def _cores(results: Results, role: str, t0: float, t1: float) -> list[tuple[float, float]]:
    """(seconds since t0, cores) of a role; consecutive points averaged down to MAX_POINTS."""
    samples = [Counters(ts, cpu, 0, 0, 0, ws, 0) for ts, cpu, ws in results.cpu_samples.get(role, [])]
    points = [(t - t0, cores) for t, cores in cores_series(samples) if t0 <= t <= t1]
    k = max(math.ceil(len(points) / MAX_POINTS), 1)
    return [(group[-1][0], sum(c for _, c in group) / len(group))
            for group in (points[i:i + k] for i in range(0, len(points), k))]


def cpu_over_time(results: Results) -> list[Figure]:
    figures = []
    for target in timed_targets(results):
        runs = [r for r in results.runs if r.target == target]
        windows = [(r, w) for r in runs for rep in r.repetitions if (w := rep.get("cpu_window") or {}).get("start_ns")]
        if not windows:
            continue
        t0 = min(w["start_ns"] for _, w in windows) / 1e9 - MARGIN_S
        t1 = max(w["end_ns"] for _, w in windows) / 1e9 + MARGIN_S
        database = next((db for r in runs if (db := r.database_role)), None)
        series = {f"{role} ({what})": pts for role, what in ((target, "target"), (database, "database"),
                                                             (LOADGEN, "load generator"))
                  if role and (pts := _cores(results, role, t0, t1))}
        if not series:
            continue
        step = _nice((t1 - t0) / 6)
        ticks = [(i * step, f"{i * step:g}") for i in range(int((t1 - t0) // step) + 1)]
        bands = [(w["start_ns"] / 1e9 - t0, w["end_ns"] / 1e9 - t0, f"{size_label(r.file)} c={r.concurrency}")
                 for r, w in windows]
        figures.append(Figure(f"{target}: CPU cores over time; shaded, each timed repetition (hover: its case).",
                              line_chart(f"CPU cores over time, {target}", series, "seconds", "CPU cores",
                                         x_log=False, x_ticks=ticks, dots=False, bands=bands)))
    return figures
