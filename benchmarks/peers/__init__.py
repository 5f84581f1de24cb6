"""Benchmarks that run robolearn beside other libraries (rsl_rl, stable-baselines3, d3rlpy, CORL)."""
