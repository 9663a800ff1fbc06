"""The CI workflow (.github/workflows/lab.yml) cannot run here: actionlint
(with shellcheck for its run: scripts) checks it, and a broken copy shows the
check can fail. Its steps are tools/ci/ci-lab.sh's commands, which
tests/test_compose_e2e.py runs on local images."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / ".github" / "workflows" / "lab.yml"


@pytest.fixture(scope="module")
def actionlint() -> str:
    done = subprocess.run([str(REPO / "tools" / "install" / "install-actionlint.sh")], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr
    assert shutil.which("shellcheck"), "tools/install/setup.sh installs shellcheck, which actionlint runs on scripts"
    return done.stdout.strip()


def lint(actionlint: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([actionlint, "-no-color", str(path)], capture_output=True, text=True, timeout=120,
                          cwd=REPO)


def test_actionlint_passes_on_the_workflow(actionlint):
    done = lint(actionlint, WORKFLOW)
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_catches_a_broken_copy(actionlint, tmp_path):
    broken = tmp_path / ".github" / "workflows" / "lab.yml"
    broken.parent.mkdir(parents=True)
    text = WORKFLOW.read_text()
    # an unknown context and an unquoted word split in a script
    assert "${{ github.event.pull_request.base.sha }}" in text and '>> "$GITHUB_STEP_SUMMARY"' in text
    text = text.replace("${{ github.event.pull_request.base.sha }}", "${{ github.no_such_thing }}", 1)
    text = text.replace('>> "$GITHUB_STEP_SUMMARY"', ">> $GITHUB_STEP_SUMMARY", 1)
    broken.write_text(text)
    done = lint(actionlint, broken)
    assert done.returncode == 1
    assert "no_such_thing" in done.stdout
    assert re.search(r"SC2086", done.stdout), done.stdout


def test_every_run_step_is_a_command_the_tests_run():
    # the workflow's scripts call tools/ci/ci-lab.sh and tools/lab/matrix.py only
    # (plus shell plumbing), so what CI here runs is what the runner runs
    text = WORKFLOW.read_text()
    called = set(re.findall(r"tools/[\w./-]+", text))
    assert called == {"tools/ci/ci-lab.sh", "tools/lab/matrix.py"}, called
    for script in called:
        assert (REPO / script).exists(), script
