"""The README a newcomer finishes, and the docs it sends them to: short,
every relative link resolving, and the quick commands shown running as
written (those that need no lab: --help and config forms)."""
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"```sh\n(.*?)```", re.S)
QUICK = re.compile(r"(--help\b|\bconfig\b)")


def test_the_readme_is_short():
    assert len((REPO / "README.md").read_text().splitlines()) <= 150


def test_the_readme_gives_the_two_commands_and_the_plain_compose_one():
    text = (REPO / "README.md").read_text()
    assert "make lab-local" in text and "make test" in text and "docker compose up bench" in text


def test_every_doc_page_is_linked_from_the_readme():
    linked = set(LINK.findall((REPO / "README.md").read_text()))
    assert {f"docs/{p.name}" for p in PAGES[1:]} <= linked


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"{page.relative_to(REPO)}: {target} does not exist"


def quick_commands() -> list[str]:
    found = []
    for page in PAGES:
        for block in FENCE.findall(page.read_text()):
            for line in block.splitlines():
                command = line.split("  #")[0].strip()
                if command and QUICK.search(command) and not command.startswith(("make ", "docker compose run")):
                    found.append(command)
    return found


def test_there_are_quick_commands_to_run():
    assert len(quick_commands()) >= 3


@pytest.mark.parametrize("command", [pytest.param(c, marks=pytest.mark.lab) if c.startswith("docker ") else c
                                     for c in quick_commands()])
def test_a_quick_command_runs_as_written(command):
    words = shlex.split(command)
    env = dict(os.environ)
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):  # leading VAR=value, as a shell reads it
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    done = subprocess.run(words, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{command}: {done.stderr[-1500:]}"
