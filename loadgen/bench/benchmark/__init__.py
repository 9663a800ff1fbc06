"""Timing the paths: the rounds of cases, the working set, the store
benchmark, and the schedule they share (order, warm-up, quiet wait)."""
