import sys

# `python -m bench compare RUN_A RUN_B ...` compares two runs; otherwise a run.
if sys.argv[1:2] == ["compare"]:
    from .report.compare import main as compare_main
    sys.exit(compare_main(sys.argv[2:]))
# `python -m bench resilience-load ...`: make resilience's load (tools/resilience.py)
if sys.argv[1:2] == ["resilience-load"]:
    from .faults.resilience_load import main as load_main
    sys.exit(load_main(sys.argv[2:]))
# `python -m bench fetch URL FILE CLIENTS`: make overload's large file (tools/overload.py)
if sys.argv[1:2] == ["fetch"]:
    from .clients.fetch import main as fetch_main
    sys.exit(fetch_main(sys.argv[2:]))
# `python -m bench check-settings`: every .env variable, before anything starts (compose service settings)
if sys.argv[1:2] == ["check-settings"]:
    from .check_settings import main as check_settings_main
    sys.exit(check_settings_main())

from .run import main

sys.exit(main())
