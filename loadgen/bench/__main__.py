"""`python -m bench [COMMAND]` (or `bench [COMMAND]` where loadgen is
installed): a run by default (what `docker compose up bench` starts); the
commands below for the tools around it."""
import sys

USAGE = """usage: python -m bench [COMMAND] [ARGS]

Without a command: one bench run with the settings in the environment (.env
through compose): verify, check conformance, time, write results/<run-id>/.

commands:
  compare RUN_A RUN_B [...]    what changed between two runs (python -m bench compare --help)
  check-settings               every .env variable checked, one line per bad one
  index RESULTS_DIR [ENV_FILE] write RESULTS_DIR/index.html: every run, its settings, status, headline
  resilience-load URL FILE RATE SECONDS
                               make resilience's open-loop load (tools/lab/resilience.py)
  fetch URL FILE CLIENTS       make overload's large-file clients (tools/lab/overload.py)
  overload-window URL RATE SECONDS WORKERS
                               one window of make overload's goodput check (tools/lab/overload.py)
  -h, --help                   this text
"""


def main() -> int:
    """The command in sys.argv, its exit status; the console script `bench` calls this."""
    command = sys.argv[1:2]
    if command in (["-h"], ["--help"], ["help"]):
        print(USAGE, end="")
        return 0
    if command == ["compare"]:
        from .report.compare import main as compare_main
        return compare_main(sys.argv[2:])
    if command == ["index"]:
        from .report.run_index import main as index_main
        return index_main(sys.argv[2:])
    if command == ["resilience-load"]:
        from .faults.resilience_load import main as load_main
        return load_main(sys.argv[2:])
    if command == ["fetch"]:
        from .clients.fetch import main as fetch_main
        return fetch_main(sys.argv[2:])
    if command == ["overload-window"]:
        from .faults.overload_load import main as window_main
        return window_main(sys.argv[2:])
    if command == ["check-settings"]:
        from .check_settings import main as check_settings_main
        return check_settings_main()
    if command:
        print(f"bench: error: unknown command {command[0]!r}\n\n{USAGE}", file=sys.stderr, end="")
        return 2
    from .run import main as run_main
    return run_main()


if __name__ == "__main__":
    sys.exit(main())
