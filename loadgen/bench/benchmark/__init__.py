"""Timing the paths: a timed run's phases (phases.py lists them, one module
each: the rounds of cases, ab -k against wrk, open loop, the sweep, the
working set, the store benchmark), the Timer they share, the schedule
(order, warm-up, quiet wait), and an A/B run's blocks."""
