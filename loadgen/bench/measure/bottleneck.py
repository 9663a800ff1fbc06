"""Which resource bound one timed row: the one place that decides it, from
the row's flags and its CPU by role (bench.measure.usage), so every table
names it alike."""
from .usage import BEHIND_SCHEDULE, CORE_SATURATED, LINK_BOUND, LOADGEN, LOADGEN_BOUND, THROTTLED, active

# What a row's `bottleneck` can be, in the order they are decided: the link
# between two hosts carrying all it can (nothing behind it can do better); a tool at
# its limit (its CPU, or vegeta behind its schedule) makes every other figure a floor; two containers on one
# saturated core competed, whoever's core it is; then a container at its
# own allowance. None of these: the path waited (on I/O, the network, its
# database's answers) with CPU to spare.
LINK, LOADGEN_CPU, SHARED_CORE, TARGET_CORE, DATABASE_CORE, LATENCY, NOT_MEASURED = (
    "link", "load generator", "shared core", "target's core", "database's core", "none (latency-bound)",
    "not measured")
SATURATED_SHARE = 0.9  # a container using this share of its allowance had no more to give
LINK_SHARE = 0.9       # a row moving this share of the link's measured rate filled it


def link_bound(bytes_per_second: float, link_bits_per_second: float | None) -> bool:
    """The row's answers crossed the link at LINK_SHARE of what iperf3
    measured it carrying, or more."""
    return bool(link_bits_per_second) and bytes_per_second * 8 >= LINK_SHARE * link_bits_per_second


def saturated(used: dict) -> bool:
    """The container used SATURATED_SHARE of what it may (its CPU quota, or
    its cpuset's cores) over an inner window."""
    allowance = used.get("allowance_cores") or len(used.get("cpuset") or ()) or None
    return bool(allowance and used.get("inner_window") and active(used)
                and used["cores"] >= SATURATED_SHARE * allowance)


def bottleneck(flags: list[str], cpu: dict | None, target: str) -> str:
    """The resource that bound a row; NOT_MEASURED without cAdvisor's figures
    (unless the tool's own rusage says it was at its limit)."""
    if LINK_BOUND in flags:
        return LINK
    if LOADGEN_BOUND in flags or BEHIND_SCHEDULE in flags:
        return LOADGEN_CPU
    if CORE_SATURATED in flags:
        return SHARED_CORE
    if not cpu:
        return NOT_MEASURED
    if THROTTLED in flags or saturated(cpu.get(target) or {}):
        return TARGET_CORE
    if any(saturated(used) for role, used in cpu.items() if role not in (target, LOADGEN)):
        return DATABASE_CORE
    return LATENCY
