"""Each setting of the lab is declared once, in bench.settings.REGISTRY; what
cannot be derived from it (.env, compose.yaml's environment lists) is held
to it here, both ways: a variable added to .env or to a service's list
without its registry entry fails, and so does an entry whose services do
not list it. No Docker: compose.yaml read with PyYAML."""
import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from bench import check_settings
from bench.env_file import read_env_file
from bench.settings import BENCH, REGISTRY, SEED, SERVING_PATH, SETTINGS, Settings, effective, from_env

REPO = Path(__file__).resolve().parent.parent
DOTENV = read_env_file(REPO / ".env")
COMPOSE = yaml.safe_load((REPO / "compose.yaml").read_text())
# The environment reads of bench that are not lab settings: the vegeta binary
# (the native tests point it at theirs) and `bench index`'s .env on the host.
NOT_SETTINGS = {"VEGETA", "BENCH_ENV_FILE"}


def listed(environment: list | dict) -> list[str]:
    """The names a service's `environment:` passes: NAME or NAME=value items, or a map's keys."""
    if isinstance(environment, dict):
        return list(environment)
    return [item.split("=", 1)[0] for item in environment]


def compose_lists() -> dict[str, list[str]]:
    services = COMPOSE["services"]
    return {SETTINGS: listed(services["settings"]["environment"]), BENCH: listed(services["bench"]["environment"]),
            SEED: listed(services["seed"]["environment"]),
            SERVING_PATH: listed(COMPOSE["x-serving-path"]["environment"])}


def test_every_variable_of_env_is_in_the_registry_in_its_order():
    assert [s.name for s in REGISTRY if s.in_env_file] == list(DOTENV)


@pytest.mark.parametrize("service", [SETTINGS, BENCH, SEED, SERVING_PATH])
def test_each_service_gets_what_the_registry_says(service):
    wanted = {s.name for s in REGISTRY if service in s.compose_services}
    passed = compose_lists()[service]
    assert len(passed) == len(set(passed)), f"{service}: a variable listed twice"
    assert not wanted - set(passed), f"in the registry for {service}, missing from compose.yaml"
    assert not set(passed) - wanted, f"in compose.yaml's {service}, not in the registry for it"


def test_every_serving_path_shares_the_one_map():
    # a path's own `environment:` would replace x-serving-path's, not add to it
    for path in DOTENV["BENCH_TARGETS"].split():
        assert COMPOSE["services"][path]["environment"] == COMPOSE["x-serving-path"]["environment"], path


def test_the_settings_service_gets_them_in_env_order():
    assert compose_lists()[SETTINGS] == list(DOTENV)


def test_every_entry_is_read_or_checked_by_a_known_rule():
    fields = {f.name for f in dataclasses.fields(Settings)}
    for setting in REGISTRY:
        assert setting.check[:1] == () or setting.check[0] in check_settings.CHECK_KINDS, setting.name
        assert setting.field is None or (setting.field in fields and setting.read), setting.name
    assert len({s.name for s in REGISTRY}) == len(REGISTRY)
    assert check_settings.VARIABLES == tuple(DOTENV)


def test_bench_reads_its_settings_through_the_registry():
    """An os.environ or getenv read of a registered name in loadgen/bench,
    outside settings.py, bypasses its parsing and default."""
    registered = {s.name for s in REGISTRY}
    read = re.compile(r"""(?:os\.environ(?:\.get)?[\[(]|getenv\()\s*["']([A-Z][A-Z0-9_]*)["']""")
    found = {}
    for module in (REPO / "loadgen" / "bench").rglob("*.py"):
        if module.name != "settings.py":
            for name in read.findall(module.read_text()):
                found.setdefault(name, []).append(module.name)
    assert not {name: where for name, where in found.items() if name in registered}
    assert set(found) <= NOT_SETTINGS | registered, "a new environment read: a setting (REGISTRY) or NOT_SETTINGS?"


# bench's knobs that effective() does not report as applied, and why
NOT_APPLIED = {
    "targets": "recorded as BENCH_TARGETS; every run times what it names",
    "concurrency": "recorded as BENCH_CONCURRENCY; the report names the levels timed",
    "startup_timeout": "how long bench waits, not how it times",
    "allow_nonconforming": "recorded as BENCH_ALLOW_NONCONFORMING; rows say nonconforming",
    "cpu_design": "recorded as BENCH_CPU_DESIGN; no profile overrides it, and results.rounds says same-moment "
                  "(timing stays as it was for the rounds design)",
}


def test_effective_reports_every_timing_knob_as_applied():
    """A profile overrides bench's knobs: results.json's `timing` (effective())
    says what was applied, under the field's name or with its unit (duration_s)."""
    applied = effective(from_env({"BENCH_TARGETS": "nginx-static"}))
    for setting in REGISTRY:
        if setting.check == ("bench",) and setting.field and setting.field not in NOT_APPLIED:
            assert any(key == setting.field or key.startswith(f"{setting.field}_") for key in applied), setting.name
