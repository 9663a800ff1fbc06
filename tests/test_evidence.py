"""Every run a doc cites is kept: each run id in docs/*.md and README.md
(20261128T072754Z, or its short form 072754Z after a long one of the same
day) has its folder under results/evidence/ (tools/lab/keep_evidence.py; a make
overload or make resilience run under its own name, overload-<id>; a make
ab-calibrate calibration as cited, calibration-<path>-<id>), and that
folder holds what a reader checks the doc's figures against."""
import gzip
import json
import re
from pathlib import Path

import pytest

import keep_evidence
from bench.faults.overload import Measured, Window
from bench.report.overload import render as render_overload

REPO = Path(__file__).resolve().parent.parent
EVIDENCE = REPO / "results" / "evidence"
LONG = re.compile(r"\b(\d{8})T(\d{6})Z\b")
SHORT = re.compile(r"(?<![T\d])(\d{6})Z\b")
# make ab-calibrate's folder: calibration-<path>-<id> (tools/lab/change_calibrate.py), cited whole
CALIBRATION = re.compile(r"\b(calibration-[a-z0-9][a-z0-9-]*?-)(\d{8})T(\d{6})Z\b")


def cited_runs(text: str) -> set[str]:
    """Pure: the run ids a text names, a calibration's whole, a short form
    read on the day of the long one before it."""
    found, day = set(), None
    for m in re.finditer(rf"{CALIBRATION.pattern}|{LONG.pattern}|{SHORT.pattern}", text):
        calibration, calibration_day, calibration_time, long_day, long_time, short = m.groups()
        if calibration:
            day = calibration_day
            found.add(f"{calibration}{calibration_day}T{calibration_time}Z")
        elif long_day:
            day = long_day
            found.add(f"{long_day}T{long_time}Z")
        elif day:
            found.add(f"{day}T{short}Z")
        else:
            found.add(f"?T{short}Z")  # a short form with no day: never kept, so named
    return found


def not_kept(text: str, evidence: Path) -> list[str]:
    """The runs a text cites that `evidence` does not hold: a bench run's id
    under its own name or make overload's and make resilience's kinds
    (overload-<id>); a calibration id (make ab-calibrate's
    calibration-<path>-<id>) as cited, a bare id of one under any path."""
    def kept(run: str) -> bool:
        if run.startswith("calibration-"):
            return (evidence / run).is_dir()
        return (any((evidence / f"{kind}{run}").is_dir() for kind in ("", "overload-", "resilience-"))
                or any(p.is_dir() for p in evidence.glob(f"calibration-*-{run}")))
    return sorted(r for r in cited_runs(text) if not kept(r))


def test_a_short_run_id_is_read_on_the_day_before_it():
    assert cited_runs("runs 20261127T104625Z, 111241Z and 20261128T004331Z") == {
        "20261127T104625Z", "20261127T111241Z", "20261128T004331Z"}
    assert cited_runs("run 012345Z") == {"?T012345Z"}


def test_a_calibration_is_cited_by_its_whole_id_and_must_be_kept_so(tmp_path):
    text = ("the calibration calibration-nginx-gridfs-20261129T010203Z of 20 A/As, its runs 20261129T011000Z "
            "and 013000Z")
    assert cited_runs(text) == {"calibration-nginx-gridfs-20261129T010203Z", "20261129T011000Z",
                                "20261129T013000Z"}
    for run in ("20261129T011000Z", "overload-20261129T013000Z"):
        (tmp_path / run).mkdir()
    assert not_kept(text, tmp_path) == ["calibration-nginx-gridfs-20261129T010203Z"]
    (tmp_path / "calibration-flask-20261129T010203Z").mkdir()  # another path's: not the one cited
    assert not_kept(text, tmp_path) == ["calibration-nginx-gridfs-20261129T010203Z"]
    (tmp_path / "calibration-nginx-gridfs-20261129T010203Z").mkdir()
    assert not_kept(text, tmp_path) == []
    assert not_kept("calibration 20261129T010203Z", tmp_path) == []  # a bare id: any path's calibration


@pytest.mark.parametrize("doc", [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))],
                         ids=lambda p: p.name)
def test_every_run_a_doc_cites_is_kept(doc):
    missing = not_kept(doc.read_text(), EVIDENCE)
    assert not missing, f"{doc.name} cites runs not in results/evidence/ (tools/lab/keep_evidence.py): {missing}"


def kept_problems(run: Path) -> list[str]:
    """What is wrong with one kept folder: it holds an A/B run's ab.json.gz
    and ab.md, another run's results.json.gz and report.md, or a
    calibration's calibration.json and .md, each naming the folder's own
    id, none with raw output, under 100 KB."""
    names = {p.name for p in run.iterdir()}
    problems = [] if any(kind <= names for kind in keep_evidence.KEPT) else [f"holds {sorted(names)}"]
    for name in names & {"ab.json.gz", "results.json.gz", "calibration.json"}:
        raw = (run / name).read_bytes()
        text = gzip.decompress(raw).decode() if name.endswith(".gz") else raw.decode()
        if '"raw_output"' in text or '"completions"' in text:
            problems.append(f"{name}: raw output")
        data = json.loads(text)
        if data.get("run_id", data.get("id")) != run.name:
            problems.append(f"{name}: the id of {data.get('run_id', data.get('id'))}")
    if sum(p.stat().st_size for p in run.iterdir()) >= 100_000:
        problems.append("100 KB or more")
    return problems


def test_kept_runs_hold_their_figures_and_no_raw_output():
    for run in sorted(EVIDENCE.iterdir()) if EVIDENCE.is_dir() else []:
        if run.is_file():  # a benchmark's printed table as it printed it (make floor's), not a bench run
            assert run.suffix == ".txt" and run.stat().st_size < 20_000, run.name
            continue
        assert not kept_problems(run), (run.name, kept_problems(run))


# a capacity step by name in make overload's report: "nginx-static c=16 #1"
CAPACITY_STEP = re.compile(r"[a-z][a-z-]* c=\S+ #\d+")


def test_kept_overload_runs_render_again_naming_their_capacity_steps_as_they_did():
    """make overload's kept runs through its report's own path (results.json
    to report.md). keep_evidence slimmed away their windows' `workers`: a
    capacity step's comes back from its path's row, as the kept report.md
    named it."""
    runs = sorted(run for run in EVIDENCE.glob("overload-*") if (run / "results.json.gz").is_file())
    assert {"overload-20261128T205415Z", "overload-20261128T234415Z"} <= {run.name for run in runs}
    steps = 0
    for run in runs:
        doc = json.loads(gzip.decompress((run / "results.json.gz").read_bytes()))
        text = render_overload(doc)
        assert text.startswith("# Overload") and f"Run `{run.name}`" in text, run.name
        assert CAPACITY_STEP.findall(text) == CAPACITY_STEP.findall((run / "report.md").read_text()), run.name
        assert "not recorded" not in text, run.name
        steps += len(CAPACITY_STEP.findall(text))
    assert steps  # the check above compared names, not only empty lists (a run without the goodput check has none)


def test_keep_evidence_keeps_an_overload_windows_workers_and_drops_a_timed_rows_list():
    window = Window(rate=0, workers=32, seconds=10.0, sent=12000, sent_rate=1200.0, whole=12000, whole_rate=1200.0,
                    refused=0, failures={}, refused_p50_ms=None, refused_p99_ms=None, admitted_p99_ms=30.0,
                    first_sent=0.0, last_done=10.0)
    kept = Measured("nginx-static", 0, 1, window, ["loadgen-bound"], "load generator").to_dict()
    assert keep_evidence.slimmed({"goodput_windows": [kept]}) == {"goodput_windows": [kept]}
    repetition = {"rps": 100.0, "workers": [{"concurrency": 50, "requests": 500, "rps": 50.0}]}
    assert keep_evidence.slimmed({"repetitions": [repetition, {"rps": 90.0, "workers": None}]}) == {
        "repetitions": [{"rps": 100.0}, {"rps": 90.0}]}


def test_keep_evidence_keeps_a_calibration_as_make_ab_calibrate_wrote_it(tmp_path):
    """tools/lab/change_calibrate.py's own writer, then keep_evidence: the kept
    folder passes the same check as every kept run."""
    import change_calibrate
    name = "calibration-nginx-gridfs-20261129T010203Z"
    run = tmp_path / "results" / name
    run.mkdir(parents=True)
    attempts = [{"attempt": 1, "exit": 2, "seconds": 60.0, "run_id": None,
                 "why": "no ab.json (tools/lab/change.py exited 2)"}]
    change_calibrate.write(run, change_calibrate.document(name, "nginx-gridfs", change_calibrate.change_settings(
        {}, {}), 20, attempts, [], "20261129T010203Z", False))
    kept = keep_evidence.keep(run, tmp_path / "evidence")
    assert kept.name == name and sorted(p.name for p in kept.iterdir()) == ["calibration.json", "calibration.md"]
    assert kept_problems(kept) == []
    assert not_kept(f"see {name}", tmp_path / "evidence") == []
    # a folder that holds none of what is kept is refused, not kept empty
    (tmp_path / "results" / "20261129T020000Z").mkdir()
    with pytest.raises(ValueError, match="no ab.json, results.json or calibration.json"):
        keep_evidence.keep(tmp_path / "results" / "20261129T020000Z", tmp_path / "evidence")
    assert not (tmp_path / "evidence" / "20261129T020000Z").exists()


def test_keep_evidence_slims_a_real_run(tmp_path):
    """From a captured run folder: the kept copy reads the same rows."""
    run = tmp_path / "20261128T000000Z"
    run.mkdir()
    rep = {"rps": 100.0, "raw_output": "x" * 1000, "completions": [[1.0, 2.0]], "cpu": {"flask": {"cores": 0.5}}}
    (run / "ab.json").write_text(json.dumps({"run_id": run.name, "rows": [{"metric": "rps", "ratio": 1.01}],
                                             "runs": [{"repetitions": [rep]}]}))
    (run / "ab.md").write_text("# A/A\n")
    (run / "report.md").write_text("# A/A\n")
    kept = keep_evidence.keep(run, tmp_path / "evidence")
    assert sorted(p.name for p in kept.iterdir()) == ["ab.json.gz", "ab.md"]
    data = json.loads(gzip.decompress((kept / "ab.json.gz").read_bytes()))
    assert data["rows"] == [{"metric": "rps", "ratio": 1.01}]
    assert data["runs"][0]["repetitions"][0] == {"rps": 100.0, "cpu": {"flask": {"cores": 0.5}}}
