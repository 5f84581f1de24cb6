"""Datasets: robolearn's episode format (`episodes.py`), shared by offline RL, recording and real robots."""
