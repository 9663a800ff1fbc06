"""PNG charts made from a Results, per target: CPU cores over time of the
target, the database and the load generator, with each timed ab window
shaded and labelled; and requests per second against concurrency (the
sweep), a line per file size and tool."""
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display in the bench container
import matplotlib.pyplot as plt  # noqa: E402

from ..measure.cadvisor import Counters  # noqa: E402
from ..results import Results  # noqa: E402
from ..measure.usage import cores_series  # noqa: E402

MARGIN_S = 2.0  # seconds of context either side of a target's windows
COLOURS = {"target": "tab:blue", "database": "tab:green", "loadgen": "tab:red"}


def _series(results: Results, role: str) -> list[Counters]:
    return [Counters(ts, cpu, 0, 0, 0, ws, 0) for ts, cpu, ws in results.cpu_samples.get(role, [])]


def cpu_chart(results: Results, target: str, database: str, loadgen: str, path: Path) -> bool:
    """Writes the chart; False (and no file) when there is nothing to draw."""
    # every counted repetition's window (each holds its own start and end)
    windows = [(r, rep["cpu_window"]) for r in results.runs if r.target == target for rep in r.repetitions
               if (rep.get("cpu_window") or {}).get("start_ns")]
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
    ax.set_xlabel("seconds (cAdvisor timestamps); shaded: timed ab repetitions, file size and concurrency")
    ax.set_ylabel("CPU cores")
    ax.set_title(f"{target}: CPU cores over time, run {results.run_id}", fontsize=10, loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(0, -0.15), ncol=3, fontsize=8, frameon=False)
    ax.grid(axis="y", color="0.8", linewidth=0.5)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


TOOL_STYLES = {"ab": "-", "wrk": "--"}


def sweep_chart(results: Results, target: str, path: Path) -> bool:
    """Writes the sweep chart; False (and no file) when the target has no
    sweep points. Hollow markers: loadgen-bound, the tool's speed, not the server's."""
    points = [p for p in results.sweep if p.target == target]
    if not points:
        return False
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    sizes = sorted({(p.size_bytes, p.file) for p in points})
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    bound_seen = False
    for i, (_, file) in enumerate(sizes):
        for tool, style in TOOL_STYLES.items():
            line = sorted((p for p in points if p.file == file and p.tool == tool), key=lambda p: p.concurrency)
            if not line:
                continue
            colour = colours[i % len(colours)]
            xs, ys = [p.concurrency for p in line], [p.rps for p in line]
            ax.plot(xs, ys, style, color=colour, label=f"{file.removesuffix('.bin')} ({tool})", linewidth=1.5)
            for p in line:
                bound = "loadgen-bound" in p.flags
                bound_seen |= bound
                ax.plot(p.concurrency, p.rps, "o", color=colour, markersize=6,
                        markerfacecolor="white" if bound else colour)
    ax.set_xscale("log")
    levels = sorted({p.concurrency for p in points})
    ax.set_xticks(levels, [str(c) for c in levels])
    ax.set_yscale("log")
    ax.set_xlabel("concurrency (connections)")
    ax.set_ylabel("requests per second")
    note = "\nhollow markers: the load generator at its CPU limit" if bound_seen else ""
    ax.set_title(f"{target}: requests/s against concurrency, run {results.run_id}{note}", fontsize=9, loc="left")
    ax.legend(fontsize=8, frameon=False)
    ax.grid(which="both", color="0.85", linewidth=0.5)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True
