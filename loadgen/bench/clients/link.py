"""The link between bench's host and the paths' host (issue 27), measured
once before timing: iperf3 against the one-shot server tools/lab/hosts.py starts
on the paths' host (compose service `link`), in reverse, so it carries what
the answers do: from the paths' host to bench's. A row that moves 90% of
that is link-bound (bench.measure.bottleneck)."""
import subprocess
import time

from .iperf3_output import Iperf3OutputError, parse

SECONDS = 5            # iperf3's -t: long enough for TCP to reach the link's rate
ATTEMPTS = 3           # the server may still be starting
CONNECT_TIMEOUT_MS = 5000


class LinkError(Exception):
    pass


def measure_link(address: str, port: int, seconds: int = SECONDS) -> dict:
    """The link's rate (what the receiver got), the sender's retransmits
    and mean RTT where iperf3 gives them, as results.json keeps them."""
    command = ["iperf3", "-c", address, "-p", str(port), "-R", "-J", "-t", str(seconds),
               "--connect-timeout", str(CONNECT_TIMEOUT_MS)]
    error = "not run"
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(2)
        try:
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=seconds + CONNECT_TIMEOUT_MS / 1000 + 15)
            link = parse(done.stdout)
        except subprocess.TimeoutExpired:
            error = f"iperf3 gave no answer within {seconds + CONNECT_TIMEOUT_MS / 1000 + 15:.0f} s"
            continue
        except Iperf3OutputError as e:
            error = f"{e}{': ' + done.stderr.strip()[-200:] if done.stderr.strip() else ''}"
            continue
        except OSError as e:
            raise LinkError(f"iperf3 could not be run: {e}") from e
        return {"address": address, "port": port, "direction": "paths' host to bench's",
                "bits_per_second": round(link.bits_per_second),
                "sent_bits_per_second": round(link.sent_bits_per_second),
                "rtt_ms": round(link.rtt_ms, 3) if link.rtt_ms is not None else None,
                "retransmits": link.retransmits, "seconds": round(link.seconds, 3)}
    raise LinkError(f"the link to {address}:{port} was not measured after {ATTEMPTS} tries: {error}")
