"""Datasets: `Dataset` (flat, memory-mapped episodes for offline RL, `dataset.py`), robot episode files
(`episodes.py`, written from bags by real/'s bag2dataset), converters to and from other formats (`formats/`),
where a named dataset is found (`sources.py`: paths, data/ names, Minari and D4RL ids) and which task a standard
dataset maps to (`standard.py`)."""

from robolearn.data.dataset import Dataset, EpisodeData, Transitions

__all__ = ["Dataset", "EpisodeData", "Transitions"]
