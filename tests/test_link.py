"""The link between two hosts as a measured resource (issue 27): iperf3's
JSON report read (captured on a veth pair into a network namespace, rate
limited to 100 Mbit/s with tbf), and a row that fills the link named
link-bound, the bottleneck decided in its one place."""
from pathlib import Path

import pytest

from bench.clients.iperf3_output import Iperf3OutputError, parse
from bench.measure.bottleneck import LINK, LOADGEN_CPU, bottleneck, link_bound
from bench.measure.usage import LINK_BOUND, LOADGEN_BOUND

CAPTURED = (Path(__file__).parent / "fixtures" / "iperf3" / "veth-tbf-100mbit.json").read_text()


def test_the_link_is_what_the_receiver_got():
    link = parse(CAPTURED)
    assert link.bits_per_second == pytest.approx(95_526_377.79)  # under the 100 Mbit/s the qdisc allows
    assert link.sent_bits_per_second == pytest.approx(99_287_788.05)
    assert link.rtt_ms == pytest.approx(6.004)  # tbf's queue under load, not the idle round trip
    assert link.retransmits == 0 and link.seconds == pytest.approx(2.0, abs=0.1)
    assert link.bytes_per_second == pytest.approx(95_526_377.79 / 8)


def test_a_broken_report_says_why():
    with pytest.raises(Iperf3OutputError, match="not JSON"):
        parse("iperf3: error - unable to connect to server")
    with pytest.raises(Iperf3OutputError, match="unable to connect"):
        parse('{"start": {}, "intervals": [], "end": {}, "error": "unable to connect to server: Connection refused"}')
    with pytest.raises(Iperf3OutputError, match="lacks"):
        parse('{"end": {}}')


def test_a_row_at_nine_tenths_of_the_link_is_link_bound_and_that_is_its_bottleneck():
    link = parse(CAPTURED).bits_per_second
    one_mb = 1024 * 1024
    assert link_bound(11.0 * one_mb, link)       # 11 MiB/s of 1 MB answers: 92 Mbit/s
    assert not link_bound(10.0 * one_mb, link)   # 84 Mbit/s
    assert not link_bound(11.0 * one_mb, None)   # one machine: no link measured
    assert bottleneck([LINK_BOUND, LOADGEN_BOUND], None, "nginx-static") == LINK
    assert bottleneck([LOADGEN_BOUND], None, "nginx-static") == LOADGEN_CPU


@pytest.mark.native  # iperf3
def test_bench_measures_the_link_against_a_real_iperf3_server():
    """iperf3's one-shot server on loopback, as compose's `link` service
    runs it on the paths' host: one reverse test, then it is gone, and a
    second measure is an error that says so (no figure invented)."""
    import subprocess
    import time

    from support.processes import free_port
    from bench.clients.link import LinkError, measure_link
    port = free_port()
    server = subprocess.Popen(["iperf3", "--server", "--one-off", "--bind", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        found = measure_link("127.0.0.1", port, seconds=1)
        assert found["bits_per_second"] > 100e6 and found["direction"] == "paths' host to bench's"
        assert found["seconds"] == pytest.approx(1.0, abs=0.2)
        assert found["rtt_ms"] is None  # reverse: the sender's RTT is the server's, not in the client's report
        server.wait(timeout=10)  # --one-off: it served its test and exited
        with pytest.raises(LinkError, match=f"127.0.0.1:{port} was not measured after 3 tries"):
            measure_link("127.0.0.1", port, seconds=1)
    finally:
        server.kill()
        server.wait()
