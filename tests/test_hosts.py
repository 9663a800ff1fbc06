"""The lab split over several Docker engines (tools/lab/hosts.py, issue 27): the
roles named in LAB_HOSTS, the services each engine runs, and its compose
override as compose itself reads it (docker compose config), publishing on
the link address only. The whole split runs across network namespaces in
its own end-to-end test."""
import json
import subprocess
from pathlib import Path

import pytest

from bench.settings import SettingsError, from_env

import hosts
from lab_compose import LabError, settings_in

REPO = Path(__file__).resolve().parent.parent

SPLIT = "loadgen=default@10.99.0.1 paths=unix:///run/docker-lab-b.sock@10.99.0.2 " \
        "db=unix:///run/docker-lab-b.sock@10.99.0.2"


@pytest.fixture(scope="module")
def config() -> dict:
    out = subprocess.run(["docker", "compose", "--env-file", "local.env", "--profile", "hosts", "config", "--format",
                          "json"], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return json.loads(out)


def test_each_role_on_its_engine_and_address():
    found = hosts.parse_hosts(SPLIT)
    assert found["loadgen"] == hosts.Host("default", "10.99.0.1")
    assert found["paths"] == found["db"] == hosts.Host("unix:///run/docker-lab-b.sock", "10.99.0.2")
    assert found["loadgen"].docker_args == ["--context", "default"]
    assert found["db"].docker_args == ["-H", "unix:///run/docker-lab-b.sock"]
    assert hosts.parse_hosts("  ") == {}


@pytest.mark.parametrize("text, named", [
    ("loadgen=a@10.0.0.1 paths=b@10.0.0.2", "no engine for db"),
    ("loadgen=a@10.0.0.1 paths=b@10.0.0.2 db=b@10.0.0.2 db=c@10.0.0.3", "db is named twice"),
    ("loadgen=a@10.0.0.1 paths=b@10.0.0.2 database=b@10.0.0.2", "'database' is not a role"),
    ("loadgen=a paths=b@10.0.0.2 db=b@10.0.0.2", "expected loadgen=ENGINE@ADDRESS"),
    ("loadgen=a@10.0.0.1 paths=b@10.0.0.2 db=b@10.0.0.3", "two addresses"),
    ("loadgen=http://a@10.0.0.1 paths=b@10.0.0.2 db=b@10.0.0.2", "expected loadgen=ENGINE@ADDRESS"),
])
def test_a_bad_lab_hosts_is_named_with_what_is_wrong(text, named):
    with pytest.raises(LabError, match=named):
        hosts.parse_hosts(text)


@pytest.mark.lab  # docker compose config (the config fixture)
def test_the_load_generator_alone_reaches_paths_and_databases_over_the_link(config):
    targets = ["nginx-static", "nginx-gridfs", "nginx-cache"]
    plans = hosts.override(hosts.parse_hosts(SPLIT), config["services"], targets)
    assert set(plans) == {"default", "unix:///run/docker-lab-b.sock"}
    a, b = plans["default"], plans["unix:///run/docker-lab-b.sock"]
    assert set(a["services"]) == {"settings", "seed", "bench", "cadvisor"}  # the seed: the files bench reads
    assert set(b["services"]) == {"mongo", "postgres", "seed", "cadvisor", "link", *targets}
    assert b["services"]["link"]["ports"] == ["10.99.0.2:5201:5201"]  # iperf3's server, for the link's measure
    bench = a["services"]["bench"]
    assert bench["environment"]["BENCH_TARGET_URLS"] == (
        "nginx-static=http://10.99.0.2:18080 nginx-gridfs=http://10.99.0.2:18081 nginx-cache=http://10.99.0.2:18082")
    assert bench["extra_hosts"] == ["mongo:10.99.0.2", "postgres:10.99.0.2"]
    assert bench["environment"]["BENCH_LINK"] == "10.99.0.2:5201"
    # published on the link address only, never on every address
    published = [p for plan in plans.values() for s in plan["services"].values() for p in s.get("ports", [])]
    assert published and all(p.startswith(("10.99.0.1:", "10.99.0.2:")) for p in published)
    assert b["services"]["mongo"]["ports"] == ["10.99.0.2:27017:27017"]  # the seed and bench reach it from A
    assert b["services"]["postgres"]["ports"] == ["10.99.0.2:5432:5432"]
    assert "ports" not in a["services"]["cadvisor"]  # bench reads its own host's by name
    assert "extra_hosts" not in b["services"]["nginx-gridfs"]  # the databases are on its own engine


@pytest.mark.lab  # docker compose config (the config fixture)
def test_the_databases_take_logins_and_are_published_only_for_another_engine(config, tmp_path):
    one = hosts.override(hosts.parse_hosts("loadgen=default@10.0.0.1 paths=default@10.0.0.1 db=default@10.0.0.1"),
                         config["services"], ["flask"])["default"]["services"]
    assert "ports" not in one["mongo"] and "ports" not in one["postgres"]  # every client beside them
    # the databases beside the load generator, the paths on another engine: they reach them over the link
    apart = hosts.override(hosts.parse_hosts("loadgen=default@10.0.0.1 paths=b@10.0.0.2 db=default@10.0.0.1"),
                           config["services"], ["flask"])
    assert apart["default"]["services"]["postgres"]["ports"] == ["10.0.0.1:5432:5432"]
    assert apart["b"]["services"]["flask"]["extra_hosts"] == ["mongo:10.0.0.1", "postgres:10.0.0.1"]
    # every client logs in; the overrides name the run's passwords, never hold them
    plans = hosts.override(hosts.parse_hosts(SPLIT), config["services"], ["flask"], "authMechanism=PLAIN")
    b = plans["unix:///run/docker-lab-b.sock"]["services"]
    assert b["postgres"]["environment"]["POSTGRES_HOST_AUTH_METHOD"] == "scram-sha-256"
    logins = tmp_path / "run.logins.env"
    hosts.write_logins(logins)
    assert logins.stat().st_mode & 0o777 == 0o600
    passwords = settings_in(logins)
    assert set(passwords) == set(hosts.PASSWORDS.values()) and len(set(passwords.values())) == 2
    assert all(v not in json.dumps(plans) for v in passwords.values())
    override = tmp_path / "override.json"
    override.write_text(json.dumps({"services": b}))
    merged = json.loads(subprocess.run(
        ["docker", "compose", "--env-file", "local.env", "--env-file", str(logins), "--profile", "hosts",
         "-f", "compose.yaml", "-f", str(override), "config", "--format", "json"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True).stdout)["services"]
    mongo_password, postgres_password = passwords["LAB_MONGO_PASSWORD"], passwords["LAB_POSTGRES_PASSWORD"]
    assert merged["mongo"]["environment"]["MONGO_INITDB_ROOT_PASSWORD"] == mongo_password
    for client in ("seed", "flask"):
        env = merged[client]["environment"]
        assert env["MONGO_URI"] == f"mongodb://lab:{mongo_password}@mongo:27017/?authMechanism=PLAIN", client
        assert env["POSTGRES_URL"] == f"postgresql://lab:{postgres_password}@postgres:5432/lab", client
        assert env["GRIDFS_DB"], client  # compose.yaml's own settings kept beside the logins
    hosts.write_logins(logins)
    assert settings_in(logins).keys() == passwords.keys() and \
        not set(settings_in(logins).values()) & set(passwords.values())  # new each run


@pytest.mark.lab  # the local images (make local-images)
def test_a_login_to_the_mongo_image_uses_what_its_label_says(config):
    # the FerretDB stand-in takes PLAIN alone; an image without the label: MongoDB's SCRAM in admin
    assert hosts.mongo_auth_options(config["services"]["mongo"]["image"]) == "authMechanism=PLAIN"
    assert hosts.mongo_auth_options(config["services"]["postgres"]["image"]) == "authSource=admin"


@pytest.mark.lab  # docker compose config (the config fixture)
def test_each_override_is_one_compose_reads(config, tmp_path):
    plans = hosts.override(hosts.parse_hosts(SPLIT), config["services"], ["nginx-static", "flask"])
    for engine, plan in plans.items():
        path = tmp_path / "override.json"
        path.write_text(json.dumps({"services": plan["services"]}))
        out = subprocess.run(["docker", "compose", "--env-file", "local.env", "--profile", "hosts",
                              "-f", "compose.yaml", "-f", str(path),
                              "config", "--format", "json"], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        merged = json.loads(out.stdout)["services"]
        for service, spec in plan["services"].items():
            for port in spec.get("ports", []):
                address, published, target = port.split(":")
                assert {"host_ip": address, "published": published, "target": int(target)}.items() <= \
                    next(p for p in merged[service]["ports"] if p["published"] == published).items(), (engine, port)


def test_bench_takes_a_paths_url_from_bench_target_urls():
    env = {"BENCH_TARGETS": "nginx-static flask"}
    assert from_env(env).url_of("flask") == "http://flask:8080"
    cfg = from_env({**env, "BENCH_TARGET_URLS": "flask=http://10.99.0.2:18081"})
    assert cfg.url_of("flask") == "http://10.99.0.2:18081" and cfg.url_of("nginx-static") == "http://nginx-static:8080"
    for bad in ("node=http://10.99.0.2:18081", "flask=10.99.0.2:18081", "flask=http://10.99.0.2"):
        with pytest.raises(SettingsError, match="BENCH_TARGET_URLS"):
            from_env({**env, "BENCH_TARGET_URLS": bad})


@pytest.mark.lab  # docker compose config (the config fixture)
def test_bench_reads_every_hosts_cadvisor_its_own_first(config):
    plans = hosts.override(hosts.parse_hosts(SPLIT), config["services"], ["nginx-static"])
    bench = plans["default"]["services"]["bench"]
    assert bench["environment"]["CADVISOR_URL"] == "10.99.0.1=http://cadvisor:8080 10.99.0.2=http://10.99.0.2:18088"
    from bench.measure.monitor import cadvisor_hosts
    read = cadvisor_hosts(bench["environment"]["CADVISOR_URL"])
    assert read.local == "10.99.0.1" and {h: c.url for h, c in read.clients.items()} == {
        "10.99.0.1": "http://cadvisor:8080", "10.99.0.2": "http://10.99.0.2:18088"}
    assert cadvisor_hosts("http://cadvisor:8080").local == ""  # one machine, as compose.yaml runs it
    # one engine for every role: bench's own cAdvisor alone
    one = hosts.override(hosts.parse_hosts("loadgen=default@10.0.0.1 paths=default@10.0.0.1 db=default@10.0.0.1"),
                         config["services"], ["nginx-static"])
    assert one["default"]["services"]["bench"]["environment"]["CADVISOR_URL"] == "10.0.0.1=http://cadvisor:8080"


def test_a_cadvisor_watches_the_engine_on_its_own_host():
    assert hosts.cadvisor_docker("unix:///run/docker-lab-b.sock") == "unix:///var/run/docker-lab-b.sock"
    assert hosts.cadvisor_docker("unix:///var/run/docker.sock") == "unix:///var/run/docker.sock"
    assert hosts.cadvisor_docker("ssh://lab@10.0.0.2") is None and hosts.cadvisor_docker("ctx-b") is None
    with pytest.raises(LabError, match="under /var/run"):
        hosts.cadvisor_docker("unix:///tmp/docker.sock")


def test_bench_link_names_the_iperf3_server_across_the_link():
    env = {"BENCH_TARGETS": "nginx-static"}
    assert from_env(env).link is None  # one machine: nothing to measure
    assert from_env({**env, "BENCH_LINK": "10.99.0.2:5201"}).link == ("10.99.0.2", 5201)
    for bad in ("10.99.0.2", "10.99.0.2:0", "10.99.0.2:70000", "http://10.99.0.2:5201"):
        with pytest.raises(SettingsError, match="BENCH_LINK"):
            from_env({**env, "BENCH_LINK": bad})


def test_link_rate_delay_and_loss_become_tc_qdiscs_or_a_named_error():
    shaping = hosts.shaping_of({"LINK_RATE": "1gbit"})
    # the rate on both ends' egress, its bucket a tick's worth of the rate at HZ=250
    assert shaping.qdisc(True) == shaping.qdisc(False) == ["tbf", "rate", "1gbit", "burst", "500000", "latency",
                                                           "50ms"]
    assert hosts.shaping_of({"LINK_RATE": "40mbit"}).qdisc(False)[4] == str(64 * 1024)  # never under 64 KiB
    wan = hosts.shaping_of({"LINK_RATE": "100mbit", "LINK_DELAY": "20ms", "LINK_LOSS": "0.1%"})
    assert wan.qdisc(True) == ["netem", "delay", "20ms", "loss", "0.1%", "rate", "100mbit"]
    assert wan.qdisc(False)[:3] == ["tbf", "rate", "100mbit"] and wan.words() == "rate=100mbit delay=20ms loss=0.1%"
    assert hosts.shaping_of({"LINK_DELAY": "5ms"}).qdisc(False) is None  # delay: the load generator's side only
    assert not hosts.shaping_of({})
    for name, bad in (("LINK_RATE", "1G"), ("LINK_RATE", "fast"), ("LINK_DELAY", "20"), ("LINK_LOSS", "1")):
        with pytest.raises(LabError, match=name):
            hosts.shaping_of({name: bad})
