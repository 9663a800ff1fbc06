"""Before each timed run, wait until the machine is quiet. The work a run
leaves behind (a database still answering queries whose clients have gone,
a FUSE daemon finishing reads) would otherwise fall on the next run: after
gridfs-fuse's 1 MB c=100 case, FerretDB kept half a core busy through
nginx-cache's, on the core it shares with the load generator, and
nginx-cache read at half its rate."""
import time

from ..measure.monitor import read_proc_stat
from ..measure.usage import ProcStat, busy_shares, parse_proc_stat

QUIET_SHARE = 0.10     # every core the case runs on must be less busy than this
QUIET_SAMPLE_S = 0.3   # one reading of /proc/stat over this long
QUIET_MAX_S = 30.0     # then the run goes ahead, and says it did not settle


def is_quiet(before: ProcStat, after: ProcStat, cpus: set[int] | None = None, share: float = QUIET_SHARE) -> bool:
    """Pure: was each of `cpus` (None or empty: every core of the host)
    less than `share` busy? Per core, not the host's average: leftover work
    on the one core a case runs on is hidden by idle others (one busy core
    of eight is a 12.5% average)."""
    shares = busy_shares(before, after)
    cores = {name: v for name, v in shares.items() if name != "cpu"}
    if cpus:
        cores = {name: v for name, v in cores.items() if int(name.removeprefix("cpu")) in cpus}
    return all(v < share for v in cores.values())


def wait_until_quiet(cpus: set[int] | None = None, max_s: float = QUIET_MAX_S, read=read_proc_stat,
                     sleep=time.sleep, clock=time.monotonic) -> tuple[float, bool]:
    """(seconds waited, whether every core of `cpus` became quiet). Without
    /proc/stat there is nothing to wait on."""
    start = clock()
    while True:
        before = read()
        sleep(QUIET_SAMPLE_S)
        after = read()
        if before is None or after is None:
            return clock() - start, True
        if is_quiet(parse_proc_stat(before), parse_proc_stat(after), cpus):
            return clock() - start, True
        if clock() - start >= max_s:
            return clock() - start, False
