"""The nginx GridFS module's pure arithmetic (ngx_http_gridfs_window.c:
Range parsing, the windows a response is read in, a chunk checked against
its files document and window) under libFuzzer with ASan and UBSan, for a
bounded time (FUZZ_SECONDS, 25 by default). The harness,
tests/fuzz/gridfs_fuzz.c, checks properties on every input: a window never
leaves the range or the file and fits its buffer, offsets are never
negative, a chunk of the wrong size, non-binary data or a bad n is refused,
nothing is read or written out of bounds. Inputs that found a bug once
(tests/fuzz/regressions/) start the corpus, so each is run every time."""
import base64
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from support.nginx_gridfs_build import build_fuzzer

pytestmark = pytest.mark.native  # clang's libFuzzer

SECONDS = int(os.environ.get("FUZZ_SECONDS", "25"))
REGRESSIONS = Path(__file__).parent / "fuzz" / "regressions"


def test_fuzz_the_window_arithmetic_and_chunk_checks(tmp_path):
    fuzzer = build_fuzzer()
    corpus = tmp_path / "corpus"
    shutil.copytree(REGRESSIONS, corpus)
    result = subprocess.run([str(fuzzer), f"-max_total_time={SECONDS}", "-rss_limit_mb=2048",
                             "-print_final_stats=1", f"-artifact_prefix={tmp_path}/", str(corpus)],
                            capture_output=True, text=True, timeout=SECONDS + 120)
    log = result.stderr
    findings = sorted(tmp_path.glob("crash-*")) + sorted(tmp_path.glob("timeout-*")) + \
        sorted(tmp_path.glob("oom-*")) + sorted(tmp_path.glob("leak-*"))
    inputs = "\n".join(f"{p.name}: {base64.b64encode(p.read_bytes()).decode()}" for p in findings)
    assert result.returncode == 0 and not findings, f"finding:\n{log[-6000:]}\ninputs (base64):\n{inputs}"
    runs = re.search(r"Done (\d+) runs in (\d+) second", log)
    assert runs, log[-3000:]
    print(f"\nfuzz: {runs.group(1)} inputs in {runs.group(2)} s")
    # it ran: not an instant exit on a broken build
    assert int(runs.group(1)) >= 1000, log[-3000:]
