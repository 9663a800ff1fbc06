"""PNG charts made from a Results: per target, CPU cores over time of the
target, the database and the load generator on one chart, with each timed
ab window shaded and labelled."""
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display in the bench container
import matplotlib.pyplot as plt  # noqa: E402

from .cadvisor import Counters  # noqa: E402
from .results import Results  # noqa: E402
from .usage import cores_series  # noqa: E402

MARGIN_S = 2.0  # seconds of context either side of a target's windows
COLOURS = {"target": "tab:blue", "database": "tab:green", "loadgen": "tab:red"}


def _series(results: Results, role: str) -> list[Counters]:
    return [Counters(ts, cpu, 0, 0, 0, ws, 0) for ts, cpu, ws in results.cpu_samples.get(role, [])]


def cpu_chart(results: Results, target: str, database: str, loadgen: str, path: Path) -> bool:
    """Writes the chart; False (and no file) when there is nothing to draw."""
    windows = [(r, r.cpu_window) for r in results.runs
               if r.target == target and r.cpu_window and r.cpu_window.get("start_ns")]
    if not windows:
        return False
    t0 = min(w["start_ns"] for _, w in windows) / 1e9 - MARGIN_S
    t1 = max(w["end_ns"] for _, w in windows) / 1e9 + MARGIN_S

    fig, ax = plt.subplots(figsize=(11, 4.5), dpi=100)
    drew = False
    for role, kind, label in ((target, "target", f"{target} (target)"),
                              (database, "database", f"{database} (database)"),
                              (loadgen, "loadgen", f"{loadgen} (load generator, ab)")):
        points = [(t - t0, cores) for t, cores in cores_series(_series(results, role)) if t0 <= t <= t1]
        if points:
            xs, ys = zip(*points)
            ax.step(xs, ys, where="pre", color=COLOURS[kind], label=label, linewidth=1.5)
            drew = True
    if not drew:
        plt.close(fig)
        return False
    for i, (run, w) in enumerate(windows):
        start, end = w["start_ns"] / 1e9 - t0, w["end_ns"] / 1e9 - t0
        ax.axvspan(start, end, color="0.85" if i % 2 else "0.92", zorder=0)
        ax.text((start + end) / 2, 1.0, f"{run.file.removesuffix('.bin')}\nc{run.concurrency}",
                transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=7, color="0.3")
    ax.set_xlim(0, t1 - t0)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("seconds (cAdvisor timestamps); shaded: timed ab windows, file size and concurrency")
    ax.set_ylabel("CPU cores")
    ax.set_title(f"{target}: CPU cores over time, run {results.run_id}", fontsize=10, loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(0, -0.15), ncol=3, fontsize=8, frameon=False)
    ax.grid(axis="y", color="0.8", linewidth=0.5)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True
