"""Bad bench settings fail with an error naming the variable."""
import pytest

from bench.settings import SettingsError, from_env

GOOD = {"BENCH_TARGETS": "nginx-static flask", "BENCH_CONCURRENCY": "5 100", "BENCH_REQUESTS": "500"}


def test_good_settings():
    s = from_env(GOOD)
    assert s.targets == ["nginx-static", "flask"]
    assert s.concurrency == [5, 100]
    assert s.url_of("flask") == "http://flask:8080"
    assert s.warmup_requests >= 100


@pytest.mark.parametrize("change, named", [
    ({"BENCH_TARGETS": " "}, "BENCH_TARGETS"),
    ({"BENCH_CONCURRENCY": "five"}, "BENCH_CONCURRENCY"),
    ({"BENCH_CONCURRENCY": "0"}, "BENCH_CONCURRENCY"),
    ({"BENCH_REQUESTS": "50"}, "BENCH_REQUESTS"),
    ({"BENCH_WARMUP_REQUESTS": "-1"}, "BENCH_WARMUP_REQUESTS"),
])
def test_bad_settings_name_the_variable(change, named):
    with pytest.raises(SettingsError, match=named):
        from_env({**GOOD, **change})
