"""A second host on this machine for the lab's several-hosts tests (issue
27): a network namespace joined to this one by a veth pair, with its own
Docker engine (own data-root, exec-root, pidfile and socket, started with
`nsenter --net`: `ip netns exec` would remount /sys and hide the cgroups).
Its containers publish on the namespace's address, which this namespace
reaches over the veth (and this engine's containers through it, as Docker
masquerades their traffic); nothing else is reachable there. Images move by
`docker save | docker load`, as between two hosts without a registry. The
link can be shaped (a rate, with tbf: this kernel has no netem).

Only addresses of the namespace this module makes are ever targeted."""
import shutil
import signal
import subprocess
import time
from pathlib import Path

SUBNET = "10.99.0"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


class NamespaceHost:
    """Host "b": namespace lab-b at 10.99.0.2, this namespace at 10.99.0.1."""

    def __init__(self, name: str = "lab-b"):
        self.name = name
        self.address, self.peer_address = f"{SUBNET}.2", f"{SUBNET}.1"
        self.outer, self.inner = f"{name}-out", f"{name}-in"  # the veth's two ends
        self.data_root = Path(f"/var/lib/docker-{name}")
        self.exec_root = Path(f"/run/docker-{name}")
        self.socket = Path(f"/run/docker-{name}.sock")
        self.pidfile = Path(f"/run/docker-{name}.pid")
        self.log = Path(f"/tmp/dockerd-{name}.log")
        self.dockerd: subprocess.Popen | None = None

    @property
    def engine(self) -> str:
        return f"unix://{self.socket}"

    def docker(self, *args: str, timeout: float = 300, input_bytes: bytes | None = None,
               check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "-H", self.engine, *args], capture_output=True, timeout=timeout,
                              input=input_bytes, check=check)

    def start(self) -> "NamespaceHost":
        self.stop()  # what an interrupted run left
        _ip("netns", "add", self.name)
        _ip("link", "add", self.outer, "type", "veth", "peer", "name", self.inner)
        _ip("link", "set", self.inner, "netns", self.name)
        _ip("addr", "add", f"{self.peer_address}/24", "dev", self.outer)
        _ip("link", "set", self.outer, "up")
        for args in (("addr", "add", f"{self.address}/24", "dev", self.inner), ("link", "set", self.inner, "up"),
                     ("link", "set", "lo", "up"), ("route", "add", "default", "via", self.peer_address)):
            _ip("-n", self.name, *args)
        for path in (self.data_root, self.exec_root):
            path.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as log:
            self.dockerd = subprocess.Popen(
                ["nsenter", f"--net=/var/run/netns/{self.name}", "dockerd", "--data-root", str(self.data_root),
                 "--exec-root", str(self.exec_root), "--pidfile", str(self.pidfile), "-H", self.engine,
                 f"--cgroup-parent=/{self.name}"], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while self.docker("info", check=False, timeout=10).returncode != 0:
            if self.dockerd.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dockerd in {self.name} did not start: {self.log.read_text()[-1500:]}")
            time.sleep(0.5)
        return self

    def ship(self, *images: str) -> None:
        """docker save here | docker load there, for images the host lacks."""
        missing = [i for i in images if self.docker("image", "inspect", i, check=False).returncode != 0]
        if missing:
            saved = subprocess.run(["docker", "save", *missing], capture_output=True, timeout=600, check=True).stdout
            self.docker("load", input_bytes=saved, timeout=600)

    def shape(self, rate: str | None) -> None:
        """The link's rate both ways (e.g. "100mbit"), or none: a tbf on each
        end's egress, as a link of that rate between two hosts would carry."""
        for side in (["tc"], ["tc", "-n", self.name]):
            device = self.outer if len(side) == 1 else self.inner
            subprocess.run([*side, "qdisc", "del", "dev", device, "root"], capture_output=True, timeout=30)
            if rate:
                subprocess.run([*side, "qdisc", "add", "dev", device, "root", "tbf", "rate", rate, "burst", "64kb",
                                "latency", "50ms"], capture_output=True, text=True, timeout=30, check=True)

    def firewall(self, tcp_ports: list[tuple[int, int]]) -> None:
        """Inbound over the link, only these TCP port ranges (first, last)
        are let in, to the namespace itself (INPUT) and to its engine's
        published ports (DOCKER-USER, by the port the client asked for,
        before Docker's DNAT): a host firewalled as docs/hosts.md says.
        Anything else from the link is dropped, not refused, as a firewall
        does. The namespace goes with stop()."""
        def rule(chain: str, *args: str) -> None:  # inserted first: the last one inserted is checked first
            subprocess.run(["nsenter", f"--net=/var/run/netns/{self.name}", "iptables", "-w", "5", "-I", chain, "1",
                            "-i", self.inner, *args], capture_output=True, text=True, timeout=30, check=True)

        for chain, port, let_in in (("INPUT", ["--dport"], "ACCEPT"),
                                    ("DOCKER-USER", ["-m", "conntrack", "--ctorigdstport"], "RETURN")):
            rule(chain, "-j", "DROP")
            for first, last in tcp_ports:
                rule(chain, "-p", "tcp", *port, f"{first}:{last}", "-j", let_in)
            rule(chain, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", let_in)

    def firewall_counts(self) -> dict[tuple[str, str], int]:
        """Packets from the link each firewall rule took so far, by (chain,
        what it matched): a port range "first:last", "established" or "DROP"."""
        counts = {}
        for chain in ("INPUT", "DOCKER-USER"):
            shown = subprocess.run(["nsenter", f"--net=/var/run/netns/{self.name}", "iptables", "-w", "5", "-L",
                                    chain, "-v", "-x", "-n"], capture_output=True, text=True, timeout=30,
                                   check=True).stdout
            for line in shown.splitlines()[2:]:
                fields = line.split()
                if self.inner not in fields:
                    continue
                # "tcp dpts:18080:18082" (INPUT), "ctorigdstport 18080:18082" (DOCKER-USER)
                ports = [f.split(":", 1)[1] for f in fields if f.startswith(("dpts:", "dpt:"))] + \
                    [fields[i + 1] for i, f in enumerate(fields[:-1]) if f == "ctorigdstport"]
                what = "established" if "ESTABLISHED" in line else ports[0] if ports else fields[2]
                counts[(chain, what)] = int(fields[0])
        return counts

    def stop(self) -> None:
        if self.socket.exists():
            ids = self.docker("ps", "-aq", check=False, timeout=30).stdout.split()
            if ids:
                self.docker("rm", "-f", *[i.decode() for i in ids], check=False, timeout=120)
        pid = None
        if self.dockerd is not None:
            pid = self.dockerd.pid
        elif self.pidfile.exists():
            pid = int(self.pidfile.read_text().strip() or 0) or None
        if pid:
            try:
                subprocess.run(["kill", "-TERM", str(pid)], capture_output=True, timeout=10)
                for _ in range(100):
                    # our own child stays in /proc as a zombie until waited for: poll() reaps it
                    if (self.dockerd.poll() is not None if self.dockerd is not None
                            else not Path(f"/proc/{pid}").exists()):
                        break
                    time.sleep(0.2)
                else:
                    subprocess.run(["kill", f"-{signal.SIGKILL.value}", str(pid)], capture_output=True, timeout=10)
            finally:
                if self.dockerd is not None:
                    self.dockerd.wait(timeout=30)
                self.dockerd = None
        _ip("netns", "del", self.name, check=False)
        _ip("link", "del", self.outer, check=False)
        for path in (self.exec_root, self.socket, self.pidfile):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            elif path.exists():
                path.unlink()
