"""Docker for tests: a few calls, and how the lab runs cAdvisor (the flags and
mounts of its compose service; --privileged fails on this machine)."""
import os
import subprocess

LOCAL_IMAGE = "gridfs-lab-local/cadvisor:v0.49.1"
BURNER_BASE_IMAGE = os.environ.get("BURNER_IMAGE", "gridfs-lab-local/debian:bookworm")
BURNER_CPUS = 0.5

# The flags and mounts the compose service uses; --privileged fails here.
CADVISOR_RUN_ARGS = [
    "--cap-add", "SYS_ADMIN", "--cap-add", "SYS_PTRACE", "--cap-add", "DAC_READ_SEARCH",
    "--device", "/dev/kmsg",
    "-v", "/:/rootfs:ro", "-v", "/var/run:/var/run:ro", "-v", "/sys:/sys:ro",
    "-v", "/var/lib/docker/:/var/lib/docker:ro",
]
CADVISOR_FLAGS = [
    "--housekeeping_interval=1s", "--allow_dynamic_housekeeping=false", "--docker_only",
    # The official defaults minus "cpuset", so spec.cpu.mask is filled on cgroup v1 too.
    "--disable_metrics=advtcp,cpu_topology,hugetlb,memory_numa,process,referenced_memory,resctrl,sched,tcp,udp",
]


def docker_engine_answers() -> bool:
    try:
        return subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"],
                              capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def docker(*args: str, timeout: float = 120) -> str:
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True,
                          timeout=timeout).stdout.strip()


def remove_container(name: str) -> None:
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
