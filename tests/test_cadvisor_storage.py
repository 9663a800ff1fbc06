"""cAdvisor keeps --storage_duration of stats; bench knows how long, and a
window that began before it is not measured from what is left of it."""
import re
from pathlib import Path

import pytest

from bench.measure.monitor import STORAGE_DURATION_S, MonitorError, check_stored

COMPOSE = Path(__file__).resolve().parent.parent / "compose.yaml"


def test_compose_keeps_the_stats_bench_counts_on():
    found = re.search(r"--storage_duration=(\d+)m\b", COMPOSE.read_text())
    assert found, "compose.yaml's cAdvisor has no --storage_duration (its default, 2m, loses long windows)"
    assert int(found.group(1)) * 60 == STORAGE_DURATION_S > 300  # a store pass of minutes fits


def test_a_window_older_than_the_stored_stats_is_an_error():
    now = 10**18
    check_stored(now - int(300e9), now)  # five minutes back: held
    with pytest.raises(MonitorError, match="cAdvisor keeps 600 s"):
        check_stored(now - int(STORAGE_DURATION_S * 1e9), now)
