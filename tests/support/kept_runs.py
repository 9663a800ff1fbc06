"""The run whose own figures tests assert: results/example moves with every
fresh default run, so tests that check figures taken from a run (a round's
rates, a window's CPU) read this pinned copy of the example of run
20261128T211205Z (the rounds design, before same-moment was the default)."""
import gzip
import json
from pathlib import Path

EXAMPLE_ROUNDS = Path(__file__).resolve().parents[1] / "fixtures" / "example-rounds" / "results.json.gz"


def example_rounds() -> dict:
    return json.loads(gzip.decompress(EXAMPLE_ROUNDS.read_bytes()))

# Two A/B runs as kept (results/evidence: an A/B and the A/A after it, flask-postgres
# against its twin, 1 KB at c=100 in both): ab.json keeps the rows results.json
# held (`runs`), each repetition one window of a twin's own wrk.
EVIDENCE = Path(__file__).resolve().parents[2] / "results" / "evidence"
A_B_RUN, A_A_RUN = EVIDENCE / "20261129T150037Z" / "ab.json.gz", EVIDENCE / "20261129T182700Z" / "ab.json.gz"


def change_run(path: Path) -> dict:
    """An A/B run's rows as a results.json (the keys Results needs, and its runs)."""
    data = json.loads(gzip.decompress(path.read_bytes()))
    return {"run_id": data["run_id"], "started_at": "", "status": data["status"], "runs": data["runs"]}

# A make ab-calibrate calibration as kept (docs/ab.md cites it), and its five A/A runs beside it: flask-postgres
# against its twin, 1 KB and 1 MB at c=100, AB_BLOCKS=12, the duet
KEPT_CALIBRATION = EVIDENCE / "calibration-flask-postgres-20261129T192031Z"


def kept_ab(run_id: str) -> dict:
    """A kept run's ab.json (results/evidence/<run>/ab.json.gz)."""
    return json.loads(gzip.decompress((EVIDENCE / run_id / "ab.json.gz").read_bytes()))
