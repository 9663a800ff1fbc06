"""Pure parser of `iperf3 -c ADDRESS -J`: the link between the load
generator's host and the paths' host, measured before timing (issue 27):
what the receiver got per second, the sender's mean round-trip time and its
retransmits. No I/O, so it is tested on a captured output."""
import json
from dataclasses import dataclass


class Iperf3OutputError(ValueError):
    pass


@dataclass(frozen=True)
class Link:
    bits_per_second: float   # received: what crossed the link, not what was queued
    sent_bits_per_second: float
    # the sender's mean smoothed RTT under that load (queueing included);
    # None in reverse (-R): the sender is the server, whose RTT the client's report lacks
    rtt_ms: float | None
    retransmits: int | None
    seconds: float

    @property
    def bytes_per_second(self) -> float:
        return self.bits_per_second / 8


def parse(text: str) -> Link:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise Iperf3OutputError(f"iperf3 -J output is not JSON: {e}") from None
    if doc.get("error"):
        raise Iperf3OutputError(f"iperf3: {doc['error']}")
    try:
        end = doc["end"]
        received, sent = end["sum_received"], end["sum_sent"]
        reverse = bool(doc.get("start", {}).get("test_start", {}).get("reverse"))
        rtts = [] if reverse else [s["sender"]["mean_rtt"] for s in end.get("streams", [])
                                   if s.get("sender", {}).get("mean_rtt", 0) > 0]
        return Link(bits_per_second=float(received["bits_per_second"]),
                    sent_bits_per_second=float(sent["bits_per_second"]),
                    rtt_ms=sum(rtts) / len(rtts) / 1000 if rtts else None,  # iperf3 gives microseconds
                    retransmits=sent.get("retransmits"), seconds=float(received["seconds"]))
    except (KeyError, TypeError, ValueError) as e:
        raise Iperf3OutputError(f"iperf3 -J output lacks {e}") from None
