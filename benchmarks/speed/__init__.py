"""Throughput and latency benchmarks: the simulator, datasets, off-policy updates, the ROS 2 loop, the GPU suite."""
