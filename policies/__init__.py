"""torch policies and value functions (plain `nn.Module`s, no training logic)."""
