"""tools/lab/machine_swing.py: the figures it prints, on known rates and on a
real (tiny) run of its busy loops."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from machine_swing import summarize

REPO = Path(__file__).resolve().parent.parent


def test_the_swing_of_known_rates():
    # this machine's first ten 4 s windows on core 1, as shares of their median
    s = summarize([0.85, 0.84, 0.94, 1.10, 1.06, 0.92, 1.02, 1.03, 1.11, 1.16])
    assert s["median"] == pytest.approx(1.025)
    assert s["mad"] == pytest.approx(0.085 / 1.025)
    assert (s["low"], s["high"]) == (pytest.approx(0.84 / 1.025), pytest.approx(1.16 / 1.025))
    assert summarize([5.0, 5.0, 5.0])["cov"] == 0 and summarize([5.0, 5.0, 5.0])["mad"] == 0


def test_a_run_prints_a_line_per_core():
    done = subprocess.run([sys.executable, str(REPO / "tools" / "lab" / "machine_swing.py"), "--window", "0.2",
                           "--windows", "3", "--cores", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    line = re.fullmatch(r"core 0: 3 windows of 0.2 s: CoV ([\d.]+), MAD/median ([\d.]+), slowest ([\d.]+) and "
                        r"fastest ([\d.]+) of the median\n", done.stdout)
    assert line, done.stdout
    assert float(line[3]) <= 1.0 <= float(line[4])
