"""The second host the several-hosts tests stand on (tests/support/netns_hosts.py):
a Docker engine in its own network namespace, an image shipped to it as
between two hosts without a registry, a path published on the link address
only and reached from a container of this engine across the link, and the
link's rate shaped and measured."""
import socket
import subprocess
import time

import pytest

from support.netns_hosts import NamespaceHost

IMAGE = "gridfs-lab-local/python:3.11"  # made by make local-images; has python3 to serve and to fetch
SERVE = ["python3", "-c", "import http.server, os; os.chdir('/tmp'); "
         "open('big.bin', 'wb').write(os.urandom(8 << 20)); "
         "http.server.ThreadingHTTPServer(('', 8080), http.server.SimpleHTTPRequestHandler).serve_forever()"]
FETCH = ("import sys, time, urllib.request; t = time.monotonic(); "
         "n = len(urllib.request.urlopen(sys.argv[1], timeout=60).read()); "
         "print(n, time.monotonic() - t)")


@pytest.fixture(scope="module")
def host_b():
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode != 0:
        pytest.fail(f"{IMAGE} is missing: run `make local-images` (make test does)")
    host = NamespaceHost().start()
    try:
        host.ship(IMAGE)
        host.docker("run", "-d", "--name", "served", "-p", f"{host.address}:18080:8080", IMAGE, *SERVE)
        deadline = time.monotonic() + 30
        while fetch(host, "/big.bin").returncode != 0:
            assert time.monotonic() < deadline, "the path on host b never answered across the link"
            time.sleep(0.5)
        yield host
    finally:
        host.stop()


def fetch(host: NamespaceHost, path: str, address: str | None = None) -> subprocess.CompletedProcess:
    """From a container of this machine's engine: bytes and seconds."""
    return subprocess.run(["docker", "run", "--rm", IMAGE, "python3", "-c", FETCH,
                           f"http://{address or host.address}:18080{path}"],
                          capture_output=True, text=True, timeout=120)


def test_a_container_here_reaches_a_path_there_over_the_link_only(host_b):
    got = fetch(host_b, "/big.bin")
    assert got.returncode == 0 and got.stdout.split()[0] == str(8 << 20), got.stderr
    # published on the namespace's address alone: not on this side's loopback
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", 18080), timeout=3).close()
    # and host b's engine is its own: none of this engine's containers or images but what was shipped
    assert host_b.docker("ps", "--format", "{{.Names}}").stdout.split() == [b"served"]


def test_the_link_is_shaped_to_a_rate(host_b):
    host_b.shape("40mbit")
    try:
        got = fetch(host_b, "/big.bin")
        size, seconds = got.stdout.split()
        mbit = int(size) * 8 / float(seconds) / 1e6
        # 8 MiB at 40 Mbit/s: about 1.7 s; the connection's setup is inside the timing
        assert 30 < mbit <= 41, f"{mbit:.1f} Mbit/s through a 40 Mbit/s link"
    finally:
        host_b.shape(None)
    fast = fetch(host_b, "/big.bin").stdout.split()
    assert int(fast[0]) * 8 / float(fast[1]) / 1e6 > 100  # unshaped again
