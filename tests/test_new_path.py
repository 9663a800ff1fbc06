"""A serving path added from one page (docs/adding-a-path.md): the scaffold
`make new-path NAME=... FROM=...` (tools/lab/new_path.py) writes the folder, the
compose entry with bench's depends_on and the BENCH_TARGETS word; its copy
of flask passes bench's verification and conformance in a quick run; and
the README's steps are the page's."""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from new_path import NewPathError, new_path

REPO = Path(__file__).resolve().parent.parent

PROJECT = "gridfs-lab-newpath-e2e"


def checkout(into: Path, *paths: str) -> Path:
    """A copy of the lab's files as the working tree has them, less what git
    ignores (those under paths, or all)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *paths],
                            cwd=REPO, capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, listed):
        if not name.startswith("results/") and (REPO / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, into / name)
    return into


def test_new_path_writes_the_folder_the_service_with_depends_on_and_the_target(tmp_path):
    root = checkout(tmp_path, "compose.yaml", ".env", "services/.dockerignore", "services/flask", "services/node")
    (root / "local.env").write_text((root / ".env").read_text())
    new_path(root, "flask-copy", "flask")
    compose = (root / "compose.yaml").read_text()
    entry = re.search(r"^  flask-copy:\n((?:    .*\n)*)", compose, re.M).group(0)
    # FROM's labels: the database it reads, and its store (the report's grouping)
    assert "<<: *serving-path" in entry and "labels: {lab.database: mongo, lab.store: GridFS}" in entry
    # built from the shared base alone: a swap of FLASK_IMAGE leaves the copy as it was
    assert "dockerfile: flask-copy/Dockerfile" in entry and "PYTHON_IMAGE: ${PYTHON_IMAGE}\n" in entry
    depends = compose[compose.index("  bench:"):compose.index("    # Everything bench needs")]
    assert "      flask-copy: {condition: service_started}\n" in depends
    dockerfile = (root / "services" / "flask-copy" / "Dockerfile").read_text()
    assert "COPY flask-copy/app.py" in dockerfile and "COPY flask/" not in dockerfile
    assert (root / "services" / "flask-copy" / "app.py").read_bytes() == (REPO / "services/flask/app.py").read_bytes()
    assert "!flask\n!flask-copy\n" in (root / "services" / ".dockerignore").read_text()  # the context sends it
    for env_file in (".env", "local.env"):
        targets = re.search(r"^BENCH_TARGETS=(.*)$", (root / env_file).read_text(), re.M).group(1).split()
        assert targets[-1] == "flask-copy" and targets.count("flask-copy") == 1, env_file
    # a path built from its own folder: the context renamed, the Dockerfile as it was
    new_path(root, "node-copy", "node")
    assert "      context: services/node-copy\n" in (root / "compose.yaml").read_text()
    assert (root / "services/node-copy/Dockerfile").read_text() == (REPO / "services/node/Dockerfile").read_text()


@pytest.mark.parametrize("name, source, named", [
    ("flask-copy", "flask", "has one already"),
    ("Flask2", "flask", "NAME='Flask2'"),
    ("flask-3", "", "FROM is unset"),
    ("flask-3", "no-such-path", "compose.yaml has no service no-such-path"),
    ("flask-3", "cadvisor", "not a serving path"),
])
def test_new_path_refuses_what_it_cannot_write_and_names_it(tmp_path, name, source, named):
    root = checkout(tmp_path, "compose.yaml", ".env", "services/flask")
    new_path(root, "flask-copy", "flask")
    before = (root / "compose.yaml").read_text(), (root / ".env").read_text()
    with pytest.raises(NewPathError, match=re.escape(named)):
        new_path(root, name, source)
    assert ((root / "compose.yaml").read_text(), (root / ".env").read_text()) == before  # nothing half written


def steps(text: str) -> set[str]:
    """What a list of steps for adding a path names: the code spans that are
    its folder, compose.yaml, bench's depends_on, BENCH_TARGETS, the scaffold."""
    spans = re.findall(r"`(services/|compose\.yaml|depends_on|BENCH_TARGETS|make new-path)[^`]*`", text)
    return set(spans)


def test_the_readme_steps_are_the_pages():
    readme = (REPO / "README.md").read_text()
    sentence = next(p for p in readme.split("\n\n") if "Adding a path" in p)
    page = (REPO / "docs" / "adding-a-path.md").read_text()
    listed = page.split("## The steps", 1)[1].split("```", 1)[0]  # the numbered steps
    assert steps(sentence) == steps(listed) == {"services/", "compose.yaml", "depends_on", "BENCH_TARGETS",
                                                "make new-path"}
    assert "docs/adding-a-path.md" in sentence
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^new-path:\n\t.*tools/lab/new_path\.py \"\$\(NAME\)\" \"\$\(FROM\)\"", makefile, re.M)


def compose(root: Path, env: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "compose", "-p", PROJECT, "--env-file", "local.env", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout)


# bench's own verification (the checks it runs before timing), in its image
VERIFY = """
import json, time
from bench.checks.verify import verify_target, wait_until_healthy
files = json.load(open("/data/files/manifest.json"))["files"]
for url in ("http://nginx-static:8080", "http://flask-copy:8080"):
    wait_until_healthy(url, time.monotonic() + 120)
    verify_target(url, files)
    print("verified", url, len(files), "files")
"""


@pytest.mark.lab
def test_a_copy_of_flask_passes_verification_and_conformance(tmp_path):
    """make new-path's output as it is, in a copy of the lab: bench's checks
    verify it byte for byte, and the standalone checker, as
    docs/adding-a-path.md gives it, judges it against nginx-static."""
    if not (REPO / "local.env").exists():
        pytest.fail("local.env is missing: run `make local-images` (make test does)")
    root = checkout(tmp_path / "lab")
    shutil.copy2(REPO / "local.env", root / "local.env")
    made = subprocess.run(["make", "-s", "new-path", "NAME=flask-copy", "FROM=flask"], cwd=root,
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    env = {**os.environ, "FILE_SIZES": "1KB 300KB", "FILE_SET": "off", "BENCH_PROFILE": "quick"}
    owner = subprocess.run([str(root / "tools" / "lab" / "results-owner.sh"), "local.env"], cwd=root, env=env,
                           capture_output=True, text=True, timeout=60, check=True)
    env["RESULTS_OWNER"] = owner.stdout.strip()
    # bench lists it among what it depends on, as `up bench` needs; the checks start only what they ask
    config = json.loads(compose(root, env, "config", "--format", "json").stdout)["services"]
    assert "flask-copy" in config["bench"]["depends_on"]
    page = (REPO / "docs" / "adding-a-path.md").read_text()
    checker = re.search(r"run --rm --no-deps --entrypoint python bench \\\n\s+(-m bench\.checks\.conformance .*)\n",
                        page).group(1).replace("<name>", "flask-copy").replace("[--gridfs]", "--gridfs").split()
    try:
        for step in (["up", "-d", "--build", "nginx-static", "flask-copy"], ["run", "--rm", "--build", "seed"],
                     ["run", "--rm", "--no-deps", "--build", "--entrypoint", "python", "bench", "-c", VERIFY]):
            ran = compose(root, env, *step, timeout=600)
            assert ran.returncode == 0, (step, ran.stdout[-3000:], ran.stderr[-2000:])
        assert ran.stdout.count(" 2 files") == 2, ran.stdout  # each path, each of FILE_SIZES
        judged = compose(root, env, "run", "--rm", "--no-deps", "--entrypoint", "python", "bench", *checker, "--json",
                         timeout=600)
    finally:
        compose(root, env, "down", "-v", "--remove-orphans", "-t", "2", timeout=300)
    *cases, summary = judged.stdout.strip().splitlines()
    assert judged.returncode == 0 and summary.endswith(" passed, 0 failed"), judged.stdout[-3000:]
    cases = json.loads("\n".join(cases))
    assert all(c["passed"] for c in cases) and len(cases) == int(summary.split()[0])
    assert sum(c["case"].startswith("hostile:") for c in cases) >= 200
    assert any(c["case"].startswith("bad document:") for c in cases)  # a GridFS path's cases too
