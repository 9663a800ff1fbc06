"""How the host tools find bench: from .venv, where it is installed editable
(make ab, make overload...: .venv/bin/python), or from loadgen/ on
PYTHONPATH, set by the caller where the host's python3 runs them
(tools/ci-lab.sh in CI, local-images/build.sh): never by a path edit of
their own (issue 41). python -S stands for a python3 with no packages:
no site-packages, the editable bench included."""
import ast
import os
import subprocess
import sys
from pathlib import Path

from bench.env_file import parse_env_text, read_env_file

REPO = Path(__file__).resolve().parent.parent


def path_edits(path: Path) -> list[int]:
    """The lines of `path` that change sys.path (insert, append, extend, or a new list)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        target = node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        if isinstance(target, ast.Attribute) and target.attr == "path" and getattr(target.value, "id", "") == "sys":
            lines.append(node.lineno)
    return sorted(lines)


def test_no_module_but_the_tests_conftest_edits_sys_path():
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, timeout=60,
                             check=True).stdout.split()
    edits = {name: lines for name in tracked if name != "tests/conftest.py" and (lines := path_edits(REPO / name))}
    assert edits == {}


def test_path_edits_finds_each_form(tmp_path):
    """The check above can fail: each way of changing sys.path is found."""
    module = tmp_path / "m.py"
    # built from parts: the literal here would be a hit for `grep -rn` of it (issue 41's check)
    edit = "sys.path" + "."
    module.write_text(f"import sys\n{edit}insert(0, 'a')\n{edit}append('b')\nsys.path = ['c']\n"
                      "sys.path += ['d']\nprint(sys.path[0])\n")
    assert path_edits(module) == [2, 3, 4, 5]


def no_packages(*args: str, pythonpath: str, **kwargs) -> subprocess.CompletedProcess:
    """A python with the standard library only, and `pythonpath` as its PYTHONPATH."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-S", *args], cwd=REPO, env={**env, "PYTHONPATH": pythonpath},
                          capture_output=True, text=True, timeout=60)


def test_write_env_runs_on_the_hosts_python3_as_local_images_build_sh_runs_it(tmp_path):
    """local.env: .env with the later files' variables over it, the same
    values as Compose's layered --env-file (bench.env_file reads both)."""
    layers = [REPO / ".env", REPO / "local-images" / "images.env", REPO / "cpus-2.env"]
    done = no_packages("tools/write-env.py", *map(str, layers), pythonpath=str(REPO / "loadgen"))
    assert done.returncode == 0, done.stderr
    assert parse_env_text(done.stdout) == read_env_file(*layers)


def test_the_tools_ci_runs_on_the_runners_python3_import_with_loadgen_on_pythonpath():
    """tools/ci-lab.sh runs change_gate.py (and through it change.py),
    change.py and the workflow matrix.py with the runner's python3 and
    PYTHONPATH=loadgen: standard library and bench only."""
    done = no_packages("-c", "import change_gate, change, change_calibrate, gate_rule, matrix",
                       pythonpath=os.pathsep.join([str(REPO / "loadgen"), str(REPO / "tools")]))
    assert done.returncode == 0, done.stderr
    gate = no_packages("tools/change_gate.py", pythonpath=str(REPO / "loadgen"))
    assert (gate.returncode, gate.stderr.startswith("usage: tools/change_gate.py BASE_REF")) == (2, True), gate.stderr
    unfound = no_packages("tools/change_gate.py", pythonpath="")
    assert unfound.returncode == 1 and "No module named 'bench'" in unfound.stderr


def test_the_shell_tools_read_env_files_with_bench_s_parser(tmp_path):
    """tools/lib.sh's env_file_value (results-owner.sh, ci-lab.sh) runs
    bench/env_file.py on the host's python3: a quoted value comes out
    unquoted and a later file wins, as read_env_file and Compose read them."""
    first, second = tmp_path / "a.env", tmp_path / "b.env"
    first.write_text('RESULTS_OWNER="1000:1000"\nRESULTS_DIR=./one\n')
    second.write_text("RESULTS_DIR = ./two \n")
    script = '. tools/lib.sh; cd /; printf "%s|" "$(env_file_value RESULTS_OWNER "$1" "$2")" ' \
             '"$(env_file_value RESULTS_DIR "$1" "$2")" "$(env_file_value UNSET "$1")"'
    done = subprocess.run(["bash", "-c", script, "bash", str(first), str(second)], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    layered = read_env_file(first, second)
    assert done.stdout == f"{layered['RESULTS_OWNER']}|{layered['RESULTS_DIR']}||" == "1000:1000|./two||", done.stderr
    missing = subprocess.run(["bash", "-c", '. tools/lib.sh; env_file_value X "$1"', "bash", str(tmp_path / "none")],
                             cwd=REPO, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "no such env file" in missing.stderr
