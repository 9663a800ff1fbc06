"""Every setting the docs name is one that something reads: a variable named
in README.md or docs/*.md is in .env (the lab's knobs) or passed by
compose.yaml, or it is a knob a tool reads from its environment (make ab,
resilience, overload, matrix, lab-hosts: tools/*/*.py), or it is declared in
bench.settings.REGISTRY (a setting only make ab's twin gets, through B_ENV,
is in neither file). A variable named nowhere else would be set by a reader
to no effect. No Docker: text only."""
import re
from pathlib import Path

from bench.settings import REGISTRY

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# A setting's spelling: upper case with an underscore (MONGO_TIMEOUT), so
# HTTP's GET and HEAD, or PATH, are not taken for one.
NAME = re.compile(r"(?<![A-Za-z0-9_./-])([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)(?![A-Za-z0-9_])")
# Named in the docs, spelled like a setting, and not a knob of the lab or of a tool.
NOT_SETTINGS = {
    "DOCKER_HOST": "Docker's own variable, for an engine named by URL",
    "NET_ADMIN": "a Linux capability",
    "FUSE_RUN_AS": "set by gridfs-fuse's image (nobody), not a knob of a run",
    "SEND_TIMEOUT_MS": "the tests shorten it; a run keeps the services' 60 s",
    "POOL_RSS_READS": "a test's parameter (tests/test_nginx_gridfs_hardening.py)",
    "FLOOR_SECONDS": "a test's parameter (the module's floor benchmark)",
    "FLOOR_ROUNDS": "a test's parameter (the module's floor benchmark)",
    "MALLOC_ARENA_MAX": "glibc's own variable, set through B_ENV in docs/ab.md's runs",
}


def doc_names() -> dict[str, list[str]]:
    named = {}
    for doc in DOCS:
        for m in NAME.finditer(doc.read_text()):
            named.setdefault(m.group(1), []).append(doc.name)
    return named


def lab_settings() -> set[str]:
    dotenv = set(re.findall(r"^([A-Z][A-Z0-9_]*)=", (REPO / ".env").read_text(), re.M))
    # compose.yaml less its comments: what it interpolates or passes
    compose = "\n".join(line.split("#", 1)[0] for line in (REPO / "compose.yaml").read_text().splitlines())
    return dotenv | set(NAME.findall(compose))


def tool_knobs() -> set[str]:
    """What the tools read from their environment: the names tools/*/*.py
    spell as string literals, PREFIX_ENV_FILE and PREFIX_PROJECT of each
    lab_compose.open_lab(env, "PREFIX", ...), and the CI workflow's env keys
    (the A/B gate's AB_GATE_INCONCLUSIVE is read by its step)."""
    knobs = set()
    for tool in (REPO / "tools").glob("*/*.py"):
        text = tool.read_text()
        knobs |= set(re.findall(r"""["']([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)["']""", text))
        for prefix in re.findall(r'open_lab\(env, "([A-Z]+)"', text):
            knobs |= {f"{prefix}_ENV_FILE", f"{prefix}_PROJECT"}
    for workflow in (REPO / ".github" / "workflows").glob("*.yml"):
        knobs |= set(re.findall(r"^ +([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+):", workflow.read_text(), re.M))
    return knobs


def test_every_setting_the_docs_name_is_read():
    known = lab_settings() | tool_knobs() | {setting.name for setting in REGISTRY}
    unread = {name: docs for name, docs in doc_names().items() if name not in known and name not in NOT_SETTINGS}
    assert not unread, f"named in the docs, but neither in .env, compose.yaml nor read by a tool: {unread}"


def test_the_knobs_of_issue_40_are_wired():
    # named in docs/serving-paths.md, once set to no effect
    for name in ("FLASK_MAX_OPEN_STREAMS", "NODE_MAX_OPEN_STREAMS", "FUSE_MAX_OPEN_FILES", "MONGO_TIMEOUT"):
        assert name in doc_names() and name in lab_settings(), name


def test_the_exceptions_are_still_named():
    # an exception no doc names any more goes from the list
    assert NOT_SETTINGS.keys() <= doc_names().keys()
    assert not NOT_SETTINGS.keys() & lab_settings()
