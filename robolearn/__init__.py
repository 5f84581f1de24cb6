"""robolearn's learning core: advantages, losses, buffers, algorithms, runners, data, benchmarks, CLI."""

__version__ = "0.1.0"
