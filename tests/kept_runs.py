"""The run whose own figures tests assert: results/example moves with every
fresh default run, so tests that check figures taken from a run (a round's
rates, a window's CPU) read this pinned copy of the example of run
20261128T211205Z (the rounds design, before same-moment was the default)."""
import gzip
import json
from pathlib import Path

EXAMPLE_ROUNDS = Path(__file__).parent / "fixtures" / "example-rounds" / "results.json.gz"


def example_rounds() -> dict:
    return json.loads(gzip.decompress(EXAMPLE_ROUNDS.read_bytes()))
