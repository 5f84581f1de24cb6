"""Benchmark scripts (peers/, speed/, studies/) and what they share (common.py); see benchmarks/README.md."""
