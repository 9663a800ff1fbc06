"""Each serving path's store (disk, GridFS...) is declared beside the path,
its compose label lab.store; bench reads it from cAdvisor's container spec,
records it per target in results.json, and the report, the exports and the
headline group and name the paths by what the run recorded. So adding a
path touches no bench code; a results.json from before the label reads
"not recorded". No Docker: compose.yaml read with PyYAML, cAdvisor a capture."""
import copy
import json
import time
from pathlib import Path
from types import SimpleNamespace

import yaml

from bench.benchmark import cpu_windows
from bench.env_file import read_env_file
from bench.measure.cadvisor import STORE_LABEL, own_container_id, parse_docker_list
from bench.measure.monitor import CadvisorHosts
from bench.report.exports import rows
from bench.report.headline import grouped, headline_rows, sentences
from bench.results import STORE_NOT_RECORDED, Results, TargetResult, repeated_run
from support.kept_runs import example_rounds

REPO = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((REPO / "compose.yaml").read_text())
CADVISOR = Path(__file__).parent / "fixtures" / "cadvisor"


def serving_paths() -> set[str]:
    """Every path bench times by default, and every service built on the
    x-serving-path anchor (merged by YAML: it has the anchor's environment)."""
    shared = COMPOSE["x-serving-path"]["environment"]
    anchored = {name for name, s in COMPOSE["services"].items() if s.get("environment") == shared}
    return anchored | set(read_env_file(REPO / ".env")["BENCH_TARGETS"].split())


def test_every_serving_path_declares_its_store():
    paths = serving_paths()
    assert len(paths) >= 8
    unlabelled = sorted(p for p in paths if not str((COMPOSE["services"][p].get("labels") or {}).get(STORE_LABEL)
                                                     or "").strip())
    assert not unlabelled, f"compose.yaml: no label {STORE_LABEL} (the store the report groups it under): {unlabelled}"


class CapturedCadvisor:
    """A cAdvisor answering with a real capture of the lab (project
    gridfs-lab-cpu; tests/test_cadvisor_parse.py), its nginx-static labelled
    as compose.yaml labels it now (the capture predates the label)."""
    url = "http://cadvisor:8080"

    def __init__(self):
        data = json.loads((CADVISOR / "v1.3-docker-compose-ab.json").read_text())
        static = copy.deepcopy(next(c for c in data.values() if "gridfs-lab-cpu-nginx-static-1" in c["aliases"]))
        static["spec"]["labels"][STORE_LABEL] = COMPOSE["services"]["nginx-static"]["labels"][STORE_LABEL]
        self.answer = [c if c.name != static["name"] else parse_docker_list({"": static})[0]
                       for c in parse_docker_list(data)]

    def containers(self, num_stats: int = 1):
        return self.answer


def test_the_run_records_each_timed_paths_store_from_its_container(monkeypatch):
    monkeypatch.setattr(cpu_windows, "cadvisor_hosts", lambda url: CadvisorHosts({"": CapturedCadvisor()}))
    monkeypatch.setattr(cpu_windows, "own_id", lambda: own_container_id((CADVISOR / "bench-mountinfo.txt").read_text()))
    results = Results("r", "s", targets=[TargetResult("nginx-static", "http://nginx-static:8080", True),
                                         TargetResult("flask", "http://flask:8080", False, "never answered")])
    cfg = SimpleNamespace(cadvisor_url=CapturedCadvisor.url, mongo_uri="mongodb://mongo:27017", postgres_url="")
    monitor = cpu_windows.connect_monitor(cfg, time.monotonic(), results)
    monitor.stop_sampling()
    assert [(t.name, t.store) for t in results.targets] == [("nginx-static", "disk"), ("flask", None)]
    loaded = Results.from_dict(json.loads(json.dumps(results.to_dict())))
    assert loaded.targets[0].store == "disk" and loaded.store_of("nginx-static") == "disk"
    assert loaded.store_of("flask") == STORE_NOT_RECORDED  # never watched: not verified


def rep(rps: float) -> dict:
    return {"tool": "ab", "requests": int(rps * 4), "failed": 0, "seconds": 4.0, "rps": rps,
            "time_per_request_ms": 1000 / rps, "transfer_kbps": rps, "p50_ms": 1.0, "p90_ms": 2.0, "p99_ms": 3.0,
            "raw_output": "ab.txt", "flags": []}


def test_the_report_groups_and_names_paths_by_the_recorded_store():
    # a new path with a store no bench code names, one with none recorded
    stores = {"s3-path": "S3", "flask": "GridFS", "mystery": None, "nginx-static": "disk", "pg": "SQL"}
    rps = {"s3-path": 100.0, "flask": 101.0, "mystery": 500.0, "nginx-static": 600.0, "pg": 102.0}
    results = Results("r", "s", targets=[TargetResult(t, f"http://{t}", True, store=s) for t, s in stores.items()],
                      runs=[repeated_run(t, "1KB.bin", 1024, 5, [rep(rps[t])] * 3) for t in stores])
    assert grouped(results, list(stores)) == ["nginx-static", "flask", "pg", "s3-path", "mystery"]
    assert [(h.target, h.store) for h in headline_rows(results)] == [
        ("nginx-static", "disk"), ("flask", "GridFS"), ("pg", "SQL"), ("s3-path", "S3"), ("mystery", "not recorded")]
    assert {r["target"]: r["store"] for r in rows(results)}["s3-path"] == "S3"
    assert "**mystery** (not recorded)" in " ".join(sentences(results))  # the fastest after nginx-static


def test_a_results_json_from_before_the_label_reads_not_recorded():
    example = Results.from_dict(example_rounds())  # a kept run, left as it was written
    assert all(t.store is None for t in example.targets)
    assert {r["store"] for r in rows(example)} == {STORE_NOT_RECORDED}
    # grouping falls back to the order the run timed them in
    assert grouped(example, [t.name for t in example.targets]) == [t.name for t in example.targets]
