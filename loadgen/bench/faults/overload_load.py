"""`python -m bench overload-window URL RATE SECONDS WORKERS`: one window of
make overload's goodput check, run in the bench container while the host
(tools/lab/overload.py) reads every container's CPU. vegeta for SECONDS: at
RATE requests/s (open loop, up to WORKERS connections), or with RATE 0 as
WORKERS clients each asking again as soon as answered (closed loop: a
capacity step). Each request times out after SECONDS (an answer later
than the window is no goodput: its client has left), so no window drains
for longer than it loaded. Its answers are tallied as they stream out of
`vegeta encode` (faults.overload.tally: no file, however many), and one
JSON line printed: the tally, the attack's wall-clock edges and the CPU the load
side used (vegeta and this tally), with the threads it could use."""
import json
import os
import resource
import subprocess
import sys
import threading
import time

from ..clients.timing import children_cpu_seconds, vegeta_pace
from ..clients.vegeta_output import VegetaOutputError, parse_result
from .overload import request_timeout, tally

GRACE_S = 30  # past the duration and one request's timeout: vegeta's own exit, then it is killed


def own_cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def main(args: list[str]) -> int:
    try:
        url, rate, seconds, workers = args[0], float(args[1]), float(args[2]), int(args[3])
    except (IndexError, ValueError):
        print("usage: python -m bench overload-window URL RATE SECONDS WORKERS", file=sys.stderr)
        return 2
    vegeta = os.environ.get("VEGETA", "vegeta")
    cpu = children_cpu_seconds() + own_cpu_seconds()
    started = time.time_ns()
    # -max-body=0: each body read whole and dropped, not kept
    attack = subprocess.Popen([vegeta, "attack", *vegeta_pace(rate, workers), f"-duration={seconds:.3f}s",
                               f"-timeout={request_timeout(seconds):.3f}s", "-max-body=0"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    attack.stdin.write(f"GET {url}\n".encode())
    attack.stdin.close()
    encode = subprocess.Popen([vegeta, "encode", "-to=json"], stdin=attack.stdout, stdout=subprocess.PIPE, text=True)
    attack.stdout.close()  # encode holds it now
    limit = seconds + request_timeout(seconds) + GRACE_S
    deadline = threading.Timer(limit, lambda: [p.kill() for p in (attack, encode)])
    deadline.start()
    try:
        window = tally((parse_result(line) for line in encode.stdout if line.strip()), rate, workers, seconds)
    except VegetaOutputError as e:
        print(f"overload-window: {e}", file=sys.stderr)
        attack.kill()
        encode.kill()
        return 1
    finally:
        attack.wait()
        ended = time.time_ns()
        encode.wait()
        deadline.cancel()
    if attack.returncode or encode.returncode:
        print(f"overload-window: vegeta exited {attack.returncode}, encode {encode.returncode} "
              f"(killed past {limit:.0f} s if negative)", file=sys.stderr)
        return 1
    print(json.dumps({"window": window.to_dict(), "started_ns": started, "ended_ns": ended,
                      "load_cpu_seconds": round(children_cpu_seconds() + own_cpu_seconds() - cpu, 6),
                      "threads": len(os.sched_getaffinity(0))}))
    return 0
