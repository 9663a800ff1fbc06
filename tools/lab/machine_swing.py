#!/usr/bin/env python3
"""How much this machine's own compute rate swings, window to window, with
nothing else running: a busy loop pinned to each core counts its iterations
per window. Run it with the lab stopped. A timed case can be no steadier
than the machine under it: where this prints a MAD/median over 0.05 (bench's
`noisy` threshold) at 4 s windows, repetitions will be called noisy whatever
the lab does (docs/methodology.md).

    .venv/bin/python tools/lab/machine_swing.py --window 4 --windows 30 --cores 1"""
import argparse
import os
import statistics
import time
from multiprocessing import Process, Queue

from bench.measure import stats  # the MAD bench's `noisy` is judged by


def summarize(rates: list[float]) -> dict:
    """Median, coefficient of variation, median absolute deviation over the
    median (bench's own, measure.stats), and the slowest and fastest window
    as shares of the median."""
    spread = stats.summarize(rates)
    return {"windows": len(rates), "median": spread.median,
            "cov": statistics.pstdev(rates) / statistics.fmean(rates), "mad": spread.mad,
            "low": spread.min / spread.median, "high": spread.max / spread.median}


def busy_loop(core: int, window: float, windows: int, out: Queue) -> None:
    os.sched_setaffinity(0, {core})
    rates = []
    for _ in range(windows):
        end, count = time.monotonic() + window, 0
        while time.monotonic() < end:
            for _ in range(1000):
                pass
            count += 1
        rates.append(count / window)
    out.put((core, rates))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=float, default=4.0, help="seconds per window (a repetition's length)")
    parser.add_argument("--windows", type=int, default=30)
    parser.add_argument("--cores", default=",".join(map(str, sorted(os.sched_getaffinity(0)))),
                        help="comma-separated cores, each loaded at once (default: every core)")
    args = parser.parse_args()
    cores = [int(c) for c in args.cores.split(",")]
    out: Queue = Queue()
    loops = [Process(target=busy_loop, args=(c, args.window, args.windows, out)) for c in cores]
    for p in loops:
        p.start()
    found = dict(out.get(timeout=args.window * args.windows + 60) for _ in loops)
    for p in loops:
        p.join()
    for core, rates in sorted(found.items()):
        s = summarize(rates)
        print(f"core {core}: {s['windows']} windows of {args.window:g} s: CoV {s['cov']:.3f}, MAD/median "
              f"{s['mad']:.3f}, slowest {s['low']:.2f} and fastest {s['high']:.2f} of the median")


if __name__ == "__main__":
    main()
