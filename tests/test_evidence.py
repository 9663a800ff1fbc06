"""Every run a doc cites is kept: each run id in docs/*.md and README.md
(20261128T072754Z, or its short form 072754Z after a long one of the same
day) has its folder under results/evidence/ (tools/keep_evidence.py; a make
overload or make resilience run under its own name, overload-<id>), and
that folder holds what a reader checks the doc's figures against."""
import gzip
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EVIDENCE = REPO / "results" / "evidence"
LONG = re.compile(r"\b(\d{8})T(\d{6})Z\b")
SHORT = re.compile(r"(?<![T\d])(\d{6})Z\b")


def cited_runs(text: str) -> set[str]:
    """Pure: the run ids a text names, a short form read on the day of the
    long one before it."""
    found, day = set(), None
    for m in re.finditer(rf"{LONG.pattern}|{SHORT.pattern}", text):
        if m.group(1):
            day = m.group(1)
            found.add(f"{m.group(1)}T{m.group(2)}Z")
        elif day:
            found.add(f"{day}T{m.group(3)}Z")
        else:
            found.add(f"?T{m.group(3)}Z")  # a short form with no day: never kept, so named
    return found


def test_a_short_run_id_is_read_on_the_day_before_it():
    assert cited_runs("runs 20261127T104625Z, 111241Z and 20261128T004331Z") == {
        "20261127T104625Z", "20261127T111241Z", "20261128T004331Z"}
    assert cited_runs("run 012345Z") == {"?T012345Z"}


@pytest.mark.parametrize("doc", [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))],
                         ids=lambda p: p.name)
def test_every_run_a_doc_cites_is_kept(doc):
    # make overload's and make resilience's runs are kept under their own names
    missing = sorted(r for r in cited_runs(doc.read_text())
                     if not any((EVIDENCE / f"{kind}{r}").is_dir() for kind in ("", "overload-", "resilience-")))
    assert not missing, f"{doc.name} cites runs not in results/evidence/ (tools/keep_evidence.py): {missing}"


def test_kept_runs_hold_their_figures_and_no_raw_output():
    for run in sorted(EVIDENCE.iterdir()) if EVIDENCE.is_dir() else []:
        if run.is_file():  # a benchmark's printed table as it printed it (make floor's), not a bench run
            assert run.suffix == ".txt" and run.stat().st_size < 20_000, run.name
            continue
        names = {p.name for p in run.iterdir()}
        assert {"ab.json.gz", "ab.md"} <= names or {"results.json.gz", "report.md"} <= names, run.name
        for name in names & {"ab.json.gz", "results.json.gz"}:
            text = gzip.decompress((run / name).read_bytes()).decode()
            assert '"raw_output"' not in text and '"completions"' not in text, (run.name, name)
            assert json.loads(text)["run_id"] == run.name
        assert sum(p.stat().st_size for p in run.iterdir()) < 100_000, run.name


def test_keep_evidence_slims_a_real_run(tmp_path):
    """From a captured run folder: the kept copy reads the same rows."""
    import keep_evidence
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
