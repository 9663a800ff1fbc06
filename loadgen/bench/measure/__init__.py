"""What a run cost: cAdvisor's counters, CPU windows per container, flags
from them, the statistics of repetitions, a caching path's hit log."""
