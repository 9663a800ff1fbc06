"""The lab's env files (.env, cpus-2.env, local.env, a run's logins) read
as Compose's --env-file reads them, in one place: the host tools
(tools/lab/lab_compose.py, tools/lab/matrix.py...), `bench index` and the tests
all take NAME=value lines the same way. Standard library only: the tools
import it from the host's Python."""
import re
import sys
from pathlib import Path

# NAME=value, the value the rest of the line (tools/install/write-env.py rewrites by it too).
ASSIGNMENT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)$")


def parse_env_text(text: str) -> dict[str, str]:
    """NAME=value lines; comments, blanks and other lines skipped. The value
    is stripped, and a value quoted whole is unquoted, as Compose does."""
    values = {}
    for line in text.splitlines():
        if m := ASSIGNMENT.match(line):
            value = m.group(2).strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            values[m.group(1)] = value
    return values


def read_env_file(*paths: Path | str) -> dict[str, str]:
    """The env files layered as Compose's repeated --env-file: later files win."""
    values = {}
    for path in paths:
        values.update(parse_env_text(Path(path).read_text()))
    return values


def main(argv: list[str]) -> int:
    """NAME FILE...: NAME's value in the layered files (empty when unset), for
    the shell tools (tools/lib.sh's env_file_value): one parser for all."""
    if len(argv) < 2:
        print("usage: env_file.py NAME FILE...", file=sys.stderr)
        return 2
    try:
        print(read_env_file(*argv[1:]).get(argv[0], ""))
    except OSError as e:
        print(f"error: {e.filename}: no such env file ({e.strerror})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
