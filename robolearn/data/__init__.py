"""Datasets: `Dataset` (flat, memory-mapped episodes for offline RL, `dataset.py`), robot episode files
(`episodes.py`, written from bags by real/'s bag2dataset) and converters to and from other formats
(`formats/`)."""

from robolearn.data.dataset import Dataset, EpisodeData, Transitions

__all__ = ["Dataset", "EpisodeData", "Transitions"]
