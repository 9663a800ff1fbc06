#!/usr/bin/env python3
"""A new serving path from a copy of an existing one (docs/adding-a-path.md):

  make new-path NAME=my-path FROM=flask

writes the three things a path is: its folder, services/NAME/ (a copy of
FROM's, its Dockerfile's paths renamed when the build context is services/);
its service in compose.yaml (FROM's entry under the new name, built FROM
the shared base image only, so that a swap of FROM's own image variable
leaves it alone; FROM's labels kept: lab.store, the store the report
groups it under, and lab.database), listed under bench's depends_on (else
`docker compose up bench` never starts it); and its word at the end of
BENCH_TARGETS in .env (and in local.env, generated from .env, where there
is one). The copy then passes verification and conformance as FROM does;
make it yours from there.

Text edits only, comments kept: no Docker, no YAML library."""
import argparse
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"^[a-z][a-z0-9-]{0,40}$")  # a compose service, a folder and a BENCH_TARGETS word
# compose.yaml's marks: the serving paths end where monitoring starts, and
# bench's depends_on lists the paths before cadvisor
PATHS_END = "  # --- monitoring"
BENCH_DEPENDS_LAST = "      cadvisor: {condition: service_started}\n"
# FROM's own image variable with the shared base as its default: the copy takes the base
OWN_IMAGE = re.compile(r"\$\{[A-Z0-9_]+_IMAGE:-(\$\{[A-Z0-9_]+\})\}")


class NewPathError(Exception):
    pass


def service_block(compose: str, service: str) -> str:
    """The lines of one service's entry, from `  NAME:` to the line before
    the next entry, comment or section (blank lines at its end dropped)."""
    found = re.search(rf"^  {re.escape(service)}:\n((?:    .*\n|\n)*)", compose, re.M)
    if not found:
        raise NewPathError(f"FROM={service}: compose.yaml has no service {service}")
    return found.group(0).rstrip("\n") + "\n"


def copied_block(block: str, source: str, name: str) -> str:
    """FROM's entry as NAME's: its context or Dockerfile renamed, its own
    image variable replaced by the shared base."""
    if "<<: *serving-path" not in block:
        raise NewPathError(f"FROM={source}: not a serving path (its compose entry has no `<<: *serving-path`)")
    lines = [f"  {name}:\n"]
    for line in block.splitlines(keepends=True)[1:]:
        line = line.replace(f"context: services/{source}\n", f"context: services/{name}\n")
        line = line.replace(f"dockerfile: {source}/Dockerfile\n", f"dockerfile: {name}/Dockerfile\n")
        lines.append(OWN_IMAGE.sub(r"\1", line))
    return "".join(lines)


def copy_folder(services: Path, source: str, name: str, shared_context: bool) -> None:
    """services/FROM to services/NAME; with services/ as the build context
    the Dockerfile names its own folder (COPY flask/app.py): renamed too, and
    the context's .dockerignore, which sends only what is named, names it."""
    shutil.copytree(services / source, services / name,
                    ignore=shutil.ignore_patterns("__pycache__", "node_modules", "*.pyc"))
    if shared_context:
        dockerfile = services / name / "Dockerfile"
        dockerfile.write_text(re.sub(rf"(?<![\w/.-]){re.escape(source)}/", f"{name}/", dockerfile.read_text()))
        ignore = services / ".dockerignore"
        if ignore.exists() and f"!{source}\n" in ignore.read_text():
            ignore.write_text(ignore.read_text().replace(f"!{source}\n", f"!{source}\n!{name}\n", 1))


def add_target(env_file: Path, name: str) -> None:
    text = env_file.read_text()
    line = re.search(r"^BENCH_TARGETS=(.*)$", text, re.M)
    if not line:
        raise NewPathError(f"{env_file.name}: no BENCH_TARGETS line")
    words = line.group(1).split()
    if name not in words:
        env_file.write_text(text[:line.start()] + "BENCH_TARGETS=" + " ".join(words + [name]) + text[line.end():])


def new_path(root: Path, name: str, source: str) -> list[str]:
    """Writes NAME as a copy of FROM under root; what it wrote, in words."""
    if not NAME.match(name or ""):
        raise NewPathError(f"NAME={name!r}: expected a lower-case name of letters, digits and '-' "
                           "(a compose service, a folder and a BENCH_TARGETS word), e.g. NAME=flask-gevent2")
    compose_file, services = root / "compose.yaml", root / "services"
    compose = compose_file.read_text()
    if re.search(rf"^  {re.escape(name)}:$", compose, re.M) or (services / name).exists():
        raise NewPathError(f"NAME={name}: compose.yaml or services/ has one already")
    if not source:
        raise NewPathError("FROM is unset: name the path to copy, e.g. FROM=flask")
    block = service_block(compose, source)
    entry = copied_block(block, source, name)
    shared_context = f"dockerfile: {source}/Dockerfile" in block
    if not shared_context and f"context: services/{source}\n" not in block:
        raise NewPathError(f"FROM={source}: its build context is neither services/{source} nor services/ "
                           f"with {source}/Dockerfile; copy it by hand (docs/adding-a-path.md)")
    if PATHS_END not in compose or compose.count(BENCH_DEPENDS_LAST) != 1:
        raise NewPathError("compose.yaml: the monitoring section or bench's depends_on on cadvisor has moved; "
                           "add the service by hand (docs/adding-a-path.md)")
    copy_folder(services, source, name, shared_context)
    compose = compose.replace(PATHS_END, f"  # a copy of {source} (make new-path): its code is services/{name}/\n"
                                         f"{entry}\n{PATHS_END}", 1)
    compose = compose.replace(BENCH_DEPENDS_LAST, f"      {name}: {{condition: service_started}}\n"
                                                  f"{BENCH_DEPENDS_LAST}")
    compose_file.write_text(compose)
    wrote = [f"services/{name}/ (a copy of services/{source}/)" +
             (f", and !{name} in services/.dockerignore" if shared_context else ""),
             f"compose.yaml: the service {name}, and {name} in bench's depends_on; its labels are {source}'s "
             f"(lab.store, the store the report groups it under, and lab.database): change them if it reads "
             "another store"]
    for env_file in (root / ".env", root / "local.env"):
        if env_file.exists():
            add_target(env_file, name)
            wrote.append(f"{env_file.name}: {name} at the end of BENCH_TARGETS")
    return wrote


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help="the new path's name (make new-path NAME=...)")
    parser.add_argument("source", help="the path it starts as a copy of (FROM=...)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the lab's checkout (default: this one)")
    args = parser.parse_args(argv)
    try:
        wrote = new_path(args.root, args.name, args.source)
    except (NewPathError, OSError) as error:
        print(f"new-path: error: {error}", file=sys.stderr)
        return 2
    for line in wrote:
        print(f"[new-path] {line}")
    print(f"[new-path] next: make it yours in services/{args.name}/, then check it against the contract "
          "(docs/adding-a-path.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
