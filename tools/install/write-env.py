#!/usr/bin/env python3
"""Prints BASE env file with the variables of each OVERRIDES file replaced
(later files win; new ones appended), so local.env keeps every knob of .env
with one source of truth:
    PYTHONPATH=loadgen python3 tools/install/write-env.py .env local-images/images.env [cpus-2.env] > local.env
(bench from loadgen/ on the path, standard library only: local-images/build.sh
runs it with the host's python3, as it may run before tools/install/setup.sh made .venv)"""
import sys

from bench.env_file import ASSIGNMENT  # NAME=value as every reader of the env files takes it


def overrides_of(path):
    values = {}
    with open(path) as f:
        for line in f:
            m = ASSIGNMENT.match(line)
            if m:
                values[m.group(1)] = line.rstrip("\n")
    return values


def main(base, *overrides_paths):
    overrides = {}
    for path in overrides_paths:
        overrides.update(overrides_of(path))
    print(f"# Generated from {base} and {', '.join(overrides_paths)}; edit those, not this file.")
    with open(base) as f:
        for line in f:
            m = ASSIGNMENT.match(line)
            if m and m.group(1) in overrides:
                print(overrides.pop(m.group(1)))
            else:
                print(line, end="")
    for line in overrides.values():
        print(line)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
