"""`python -m bench [COMMAND]`: a run by default (what `docker compose up
bench` starts); the commands below for the tools around it."""
import sys

USAGE = """usage: python -m bench [COMMAND] [ARGS]

Without a command: one bench run with the settings in the environment (.env
through compose): verify, check conformance, time, write results/<run-id>/.

commands:
  compare RUN_A RUN_B [...]    what changed between two runs (python -m bench compare --help)
  check-settings               every .env variable checked, one line per bad one
  index RESULTS_DIR [ENV_FILE] write RESULTS_DIR/index.html: every run, its settings, status, headline
  resilience-load URL FILE RATE SECONDS
                               make resilience's open-loop load (tools/resilience.py)
  fetch URL FILE CLIENTS       make overload's large-file clients (tools/overload.py)
  overload-window URL RATE SECONDS WORKERS
                               one window of make overload's goodput check (tools/overload.py)
  -h, --help                   this text
"""

command = sys.argv[1:2]
if command in (["-h"], ["--help"], ["help"]):
    print(USAGE, end="")
    sys.exit(0)
if command == ["compare"]:
    from .report.compare import main as compare_main
    sys.exit(compare_main(sys.argv[2:]))
if command == ["index"]:
    from .report.run_index import main as index_main
    sys.exit(index_main(sys.argv[2:]))
if command == ["resilience-load"]:
    from .faults.resilience_load import main as load_main
    sys.exit(load_main(sys.argv[2:]))
if command == ["fetch"]:
    from .clients.fetch import main as fetch_main
    sys.exit(fetch_main(sys.argv[2:]))
if command == ["overload-window"]:
    from .faults.overload_load import main as window_main
    sys.exit(window_main(sys.argv[2:]))
if command == ["check-settings"]:
    from .check_settings import main as check_settings_main
    sys.exit(check_settings_main())
if command:
    print(f"bench: error: unknown command {command[0]!r}\n\n{USAGE}", file=sys.stderr, end="")
    sys.exit(2)

from .run import main  # noqa: E402

sys.exit(main())
