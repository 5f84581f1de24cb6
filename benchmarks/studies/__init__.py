"""Learning studies and probes: recipes compared, ablations, and what limits the chunk policies and the VLA."""
