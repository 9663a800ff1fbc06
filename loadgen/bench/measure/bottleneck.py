"""Which resource bound one timed row: the one place that decides it, from
the row's flags and its CPU by role (bench.measure.usage), so every table
names it alike."""
from .usage import BEHIND_SCHEDULE, CORE_SATURATED, LOADGEN, LOADGEN_BOUND, THROTTLED, active

# What a row's `bottleneck` can be, in the order they are decided: a tool at
# its limit (its CPU, or vegeta behind its schedule) makes every other figure a floor; two containers on one
# saturated core competed, whoever's core it is; then a container at its
# own allowance. None of these: the path waited (on I/O, the network, its
# database's answers) with CPU to spare.
LOADGEN_CPU, SHARED_CORE, TARGET_CORE, DATABASE_CORE, LATENCY, NOT_MEASURED = (
    "load generator", "shared core", "target's core", "database's core", "none (latency-bound)", "not measured")
SATURATED_SHARE = 0.9  # a container using this share of its allowance had no more to give


def saturated(used: dict) -> bool:
    """The container used SATURATED_SHARE of what it may (its CPU quota, or
    its cpuset's cores) over an inner window."""
    allowance = used.get("allowance_cores") or len(used.get("cpuset") or ()) or None
    return bool(allowance and used.get("inner_window") and active(used)
                and used["cores"] >= SATURATED_SHARE * allowance)


def bottleneck(flags: list[str], cpu: dict | None, target: str) -> str:
    """The resource that bound a row; NOT_MEASURED without cAdvisor's figures
    (unless the tool's own rusage says it was at its limit)."""
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
