"""How the host tools find bench: from .venv, where it is installed editable
(make ab, make overload...: .venv/bin/python), or from loadgen/ on
PYTHONPATH, set by the caller where the host's python3 runs them
(tools/ci/ci-lab.sh in CI, local-images/build.sh): never by a path edit of
their own (issue 41). python -S stands for a python3 with no packages:
no site-packages, the editable bench included. And every tools/ path the
repository names is there (tools/ split into install/, lab/ and ci/)."""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from bench.env_file import parse_env_text, read_env_file

REPO = Path(__file__).resolve().parent.parent


def is_sys_path(node) -> bool:
    """sys.path itself, or a slice or item of it (sys.path[:0] = ... inserts too)."""
    if isinstance(node, ast.Subscript):
        node = node.value
    return isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys"


def path_edits(path: Path) -> list[int]:
    """The lines of `path` that change sys.path (insert, append, extend, a
    new list, a slice or item assigned or deleted)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = [node.func.value] if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, ast.AugAssign):
            targets = [node.target]
        if any(is_sys_path(target) for target in targets):
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
                      "sys.path += ['d']\nsys.path[:0] = ['e']\ndel sys.path[:1]\nprint(sys.path[0])\n")
    assert path_edits(module) == [2, 3, 4, 5, 6, 7]


def no_packages(*args: str, pythonpath: str, **kwargs) -> subprocess.CompletedProcess:
    """A python with the standard library only, and `pythonpath` as its PYTHONPATH."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-S", *args], cwd=REPO, env={**env, "PYTHONPATH": pythonpath},
                          capture_output=True, text=True, timeout=60)


def test_write_env_runs_on_the_hosts_python3_as_local_images_build_sh_runs_it(tmp_path):
    """local.env: .env with the later files' variables over it, the same
    values as Compose's layered --env-file (bench.env_file reads both)."""
    layers = [REPO / ".env", REPO / "local-images" / "images.env", REPO / "cpus-2.env"]
    done = no_packages("tools/install/write-env.py", *map(str, layers), pythonpath=str(REPO / "loadgen"))
    assert done.returncode == 0, done.stderr
    assert parse_env_text(done.stdout) == read_env_file(*layers)


def test_the_tools_ci_runs_on_the_runners_python3_import_with_loadgen_on_pythonpath():
    """tools/ci/ci-lab.sh runs change_gate.py (and through it change.py),
    change_calibrate.py and the workflow matrix.py with the runner's python3
    and PYTHONPATH=loadgen, tools/lab added for the gate, which imports the
    lab's A/B tools: standard library and bench only."""
    lab, ci = REPO / "tools" / "lab", REPO / "tools" / "ci"
    done = no_packages("-c", "import change_gate, change, change_calibrate, gate_rule, matrix",
                       pythonpath=os.pathsep.join(map(str, [REPO / "loadgen", lab, ci])))
    assert done.returncode == 0, done.stderr
    gate = no_packages("tools/ci/change_gate.py", pythonpath=os.pathsep.join(map(str, [REPO / "loadgen", lab])))
    assert gate.returncode == 2 and gate.stderr.startswith("usage: tools/ci/change_gate.py BASE_REF"), gate.stderr
    unfound = no_packages("tools/ci/change_gate.py", pythonpath=str(lab))
    assert unfound.returncode == 1 and "No module named 'bench'" in unfound.stderr
    apart = no_packages("tools/ci/change_gate.py", pythonpath=str(REPO / "loadgen"))
    assert apart.returncode == 1 and "No module named 'change_calibrate'" in apart.stderr


def test_ci_lab_sh_gives_the_gate_the_lab_tools(tmp_path):
    """tools/ci/ci-lab.sh ab-gate finds the lab tools the gate imports: a
    base that git cannot diff against is the gate's own error (exit 2, no
    Docker), not an import error. PYTHONPATH as pytest's children get it:
    pyproject.toml's pythonpath is this process's sys.path only."""
    env = {**os.environ, "LAB_CACHE": str(tmp_path), "AB_GATE_CALIBRATION_RUNS": "0"}
    env.pop("GITHUB_STEP_SUMMARY", None)
    done = subprocess.run([str(REPO / "tools" / "ci" / "ci-lab.sh"), "ab-gate", "no-such-ref-anywhere"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "ab-gate: error: BASE_REF=no-such-ref-anywhere: git diff failed" in done.stderr, \
        done.stderr


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


# a tools/ path as text names it (not a Go module's: gotest.tools/v3), and as Python joins it: "tools" / "lab"
TOOL_PATH = re.compile(r"(?<![\w.-])tools/[\w.-]+(?:/[\w.-]+)*")
JOINED = re.compile(r'"tools"((?:\s*/\s*"[\w.-]+")+)')


def tool_paths(text: str) -> set[str]:
    """The tools/ paths `text` names, written out or joined (\\. is a regex's dot)."""
    written = {m.group().rstrip(".") for m in TOOL_PATH.finditer(text.replace("\\.", "."))}
    return written | {"/".join(["tools", *re.findall(r'"([\w.-]+)"', m[1])]) for m in JOINED.finditer(text)}


def stale_tool_paths(root: Path, names: list[str]) -> dict[str, list[str]]:
    """The tools/ paths each text file of `names` names that are not in `root`."""
    stale = {}
    for name in names:
        try:
            text = (root / name).read_text()
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):  # binary, a submodule, deleted
            continue
        missing = sorted(path for path in tool_paths(text) if not (root / path).exists())
        if missing:
            stale[name] = missing
    return stale


def test_every_tools_path_the_repository_names_is_there():
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, timeout=60,
                             check=True).stdout.split()
    assert stale_tool_paths(REPO, tracked) == {}


def test_stale_tool_paths_finds_a_moved_tool(tmp_path):
    """The check above can fail: a path the tools' split left behind is found,
    in prose, a command, a Python path and a regex; a Go module's is not."""
    (tmp_path / "tools" / "lab").mkdir(parents=True)
    (tmp_path / "tools" / "lab" / "change.py").write_text("")
    old = "tools/" + "change.py"  # built from parts: the literal would be a stale path of this file
    (tmp_path / "doc.md").write_text(f"`{old}` and tools/lab/change.py.\ngotest.tools/v3 v3.0.2\n")
    (tmp_path / "Makefile").write_text(f"ab:\n\t.venv/bin/python {old}\n")
    joined = '"tools" / ' + '"change.py"'
    (tmp_path / "t.py").write_text(f'REPO / {joined}\nREPO / "tools" / "lab" / "change.py"\n')
    (tmp_path / "t2.py").write_text(f're.search(r"{old.replace(".", chr(92) + ".")} ")\n')
    assert stale_tool_paths(tmp_path, ["doc.md", "Makefile", "t.py", "t2.py", "gone.txt"]) == {
        "doc.md": [old], "Makefile": [old], "t.py": [old], "t2.py": [old]}
