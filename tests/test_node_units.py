"""The Node path's unit tests, node's own runner over its pure modules
(services/node/test/*.test.js: loop-delay.js, the event loop's lag that
node's refusals pay), run as part of the suite."""
import subprocess

import pytest

from support.service_processes import SERVICES


@pytest.mark.native  # node, as the suite's node tests use it (no server, no database)
def test_node_unit_tests_pass():
    run = subprocess.run(["node", "--test", "test/"], cwd=SERVICES / "node", capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "# fail 0" in run.stdout and "# pass 0" not in run.stdout, run.stdout[-2000:]
