"""Bad bench settings fail with an error naming the variable; the quick
profile overrides the timing knobs."""
import pytest

from bench.settings import QUICK, SettingsError, effective, from_env

GOOD = {"BENCH_TARGETS": "nginx-static flask", "BENCH_CONCURRENCY": "5 100", "BENCH_DURATION": "4"}


def test_good_settings():
    s = from_env(GOOD)
    assert s.targets == ["nginx-static", "flask"]
    assert s.url_of("flask") == "http://flask:8080"
    # the standard profile: the headline's level only, rounds until x/÷1.10 or 30 minutes, no store benchmark
    assert s.duration == 4 and s.profile == "standard" and s.concurrency == [100]
    assert (s.repetitions, s.target_width, s.budget_s, s.write, s.sweep) == (6, 1.10, 1800, False, ())
    full = from_env({**GOOD, "BENCH_PROFILE": "full", "BENCH_BUDGET": "45m", "BENCH_TARGET_WIDTH": "off"})
    assert full.concurrency == [5, 100] and full.write and full.budget_s == 2700 and full.target_width is None


def test_quick_profile_overrides_the_timing_knobs():
    s = from_env({**GOOD, "BENCH_PROFILE": "quick", "BENCH_REPETITIONS": "5", "BENCH_TOOLS": "ab wrk",
                  "BENCH_SWEEP": "1 5"})
    assert (s.duration, s.repetitions, s.tools, s.sweep) == (QUICK["duration"], 1, ("ab",), ())
    assert effective(s)["profile"] == "quick" and effective(s)["repetitions"] == 1


@pytest.mark.parametrize("change, named", [
    ({"BENCH_TARGETS": " "}, "BENCH_TARGETS"),
    ({"BENCH_CONCURRENCY": "five"}, "BENCH_CONCURRENCY"),
    ({"BENCH_CONCURRENCY": "0"}, "BENCH_CONCURRENCY"),
    ({"BENCH_DURATION": "0"}, "BENCH_DURATION"),
    ({"BENCH_DURATION": "4 5"}, "BENCH_DURATION"),
    ({"BENCH_WARMUP": "-1"}, "BENCH_WARMUP"),
    ({"BENCH_REPETITIONS": "0"}, "BENCH_REPETITIONS"),
    ({"BENCH_OPEN_LOOP": "1.5"}, "BENCH_OPEN_LOOP"),
    ({"BENCH_OPEN_LOOP": "0.25 0.5 0.99"}, "BENCH_OPEN_LOOP"),
    ({"BENCH_OPEN_LOOP": "0 0.5"}, "BENCH_OPEN_LOOP"),
    ({"BENCH_PROFILE": "fast"}, "BENCH_PROFILE"),
    ({"BENCH_CPU_DESIGN": "same moment"}, "BENCH_CPU_DESIGN"),
    ({"BENCH_CPU_DESIGN": "duet"}, "BENCH_CPU_DESIGN"),
    ({"BENCH_ALLOW_NONCONFORMING": "2"}, "BENCH_ALLOW_NONCONFORMING"),
    ({"BENCH_REQUESTS": "500"}, "BENCH_REQUESTS is no longer read.*BENCH_DURATION"),
])
def test_bad_settings_name_the_variable(change, named):
    with pytest.raises(SettingsError, match=named):
        from_env({**GOOD, **change})


# A setting read as one of a few words: one wording for all of them, naming
# the variable, the value as given and every word it takes, with what each
# means where the word alone does not say it.
@pytest.mark.parametrize("name, expected", [
    ("BENCH_PROFILE", "'standard' (the headline with its intervals in BENCH_BUDGET), 'full' (every phase, the knobs "
                      "as set) or 'quick' (1 s repetitions, one each, ab only, no sweep: a first look in minutes)"),
    ("BENCH_WRITE", "'on' or 'off'"),
    ("AB_KIND", "'A/B' or 'A/A' (B unchanged, to calibrate)"),
    ("AB_DESIGN", "'duet' (A and B loaded at the same moments) or 'blocks' (one window of A, then one of B)"),
    ("AB_RESTART_TWINS", "'every-block' (make ab's default: tools/lab/change.py restarts both twins before each block) "
                         "or 'off'"),
])
def test_a_bad_choice_names_the_variable_its_value_and_the_words_it_takes(name, expected):
    with pytest.raises(SettingsError) as error:
        from_env({**GOOD, name: " fast "})
    assert str(error.value) == f"{name}=' fast ': expected {expected}"


def test_a_choice_takes_its_words_as_they_are_written():
    # the profile goes to the seed too, which reads it as written; BENCH_WRITE always took capitals
    assert from_env({**GOOD, "BENCH_PROFILE": " full ", "BENCH_WRITE": "OFF"}).write is False
    with pytest.raises(SettingsError, match="BENCH_PROFILE='Full'"):
        from_env({**GOOD, "BENCH_PROFILE": "Full"})


@pytest.mark.lab  # docker compose config
def test_every_knob_of_env_is_recorded_and_reaches_bench_with_its_effective_value():
    # .env is the list of knobs: each is recorded in results.json (but the
    # three that only say where, as whom and how long to wait), and compose
    # hands each to bench
    import json
    import re
    import subprocess
    from pathlib import Path

    from bench.settings import RECORDED
    repo = Path(__file__).resolve().parent.parent
    names = [m.group(1) for m in re.finditer(r"^([A-Z][A-Z0-9_]*)=", (repo / ".env").read_text(), re.M)]
    assert set(names) - set(RECORDED) == {"BENCH_STARTUP_TIMEOUT", "RESULTS_DIR", "RESULTS_OWNER"}
    done = subprocess.run(["docker", "compose", "--env-file", ".env", "config", "--format", "json"], cwd=repo,
                          env={"PATH": "/usr/local/bin:/usr/bin:/bin", "FLASK_IMAGE": "python:3.13-slim"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)
    bench = config["services"]["bench"]["environment"]
    assert set(RECORDED) <= set(bench)
    # a service's own base: the swapped one where set, else the shared one
    assert bench["FLASK_IMAGE"] == "python:3.13-slim" == config["services"]["flask"]["build"]["args"]["PYTHON_IMAGE"]
    assert bench["SEED_IMAGE"] == bench["PYTHON_IMAGE"] == config["services"]["seed"]["build"]["args"]["PYTHON_IMAGE"]
    assert config["services"]["bench"]["build"]["args"]["PYTHON_IMAGE"] == bench["PYTHON_IMAGE"]


@pytest.mark.parametrize("text, headline, curve", [
    ("0.5", 0.5, ()), ("0", 0.0, ()), ("0.9 0.25 0.5 0.75", 0.5, (0.25, 0.5, 0.75, 0.9)),
    ("0.3 0.6", 0.3, (0.3, 0.6))])
def test_one_open_loop_share_or_a_curve(text, headline, curve):
    cfg = from_env({**GOOD, "BENCH_OPEN_LOOP": text})
    assert (cfg.open_loop, cfg.open_loop_curve) == (headline, curve)
    # the quick profile's first look runs the headline point alone
    assert from_env({**GOOD, "BENCH_OPEN_LOOP": text, "BENCH_PROFILE": "quick"}).open_loop_curve == ()
