"""Faults and overload: make resilience's load and judgement, make overload's."""
