import sys

# `python -m bench compare RUN_A RUN_B ...` compares two runs; otherwise a run.
if sys.argv[1:2] == ["compare"]:
    from .compare import main as compare_main
    sys.exit(compare_main(sys.argv[2:]))

from .run import main

sys.exit(main())
