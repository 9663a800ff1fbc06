"""What a run cost and what its figures say: cAdvisor's counters, CPU
windows per container, flags from them, the statistics of repetitions, a
row's verdicts and bottleneck, a caching path's hit log."""
