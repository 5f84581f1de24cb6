"""Dataset formats: each module converts between `robolearn.data.Dataset` and one on-disk format.

A format module ``robolearn.data.formats.<name>`` provides::

    detect(path: Path) -> bool                      # whether ``path`` looks like this format (cheap: no full read)
    read(path: Path, **options) -> Dataset          # every problem a DatasetError naming the file, field and fix
    write(dataset: Dataset, path: Path, **options) -> Path   # where it can write (never over an existing dataset)

`load_dataset` / `save_dataset` dispatch on a format name or, for reading, detect it. Modules load lazily
(h5py, pyarrow and video codecs only when their format is used).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from robolearn.data.dataset import Dataset
from robolearn.errors import DatasetError

#: name -> (module, can write). Detection tries them in this order.
FORMATS: dict[str, tuple[str, bool]] = {
    "robolearn": ("robolearn.data.formats.native", True),
    "episodes": ("robolearn.data.formats.episodes", False),
    "minari": ("robolearn.data.formats.minari", True),
    "d4rl": ("robolearn.data.formats.d4rl", True),
    "lerobot": ("robolearn.data.formats.lerobot", True),
}


def _module(name: str) -> Any:
    if name not in FORMATS:
        raise DatasetError(f"unknown dataset format {name!r}; use one of {', '.join(FORMATS)}")
    return importlib.import_module(FORMATS[name][0])


def detect_format(path: str | Path) -> str:
    """The format of the dataset at ``path``, or a DatasetError listing the formats tried."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path} does not exist")
    for name in FORMATS:
        if _module(name).detect(path):
            return name
    raise DatasetError(f"{path} is not a dataset in any known format ({', '.join(FORMATS)}); give format= or "
                       "convert it")


def load_dataset(path: str | Path, format: str = "auto", **options: Any) -> Dataset:  # noqa: A002
    """Read the dataset at ``path`` (``format="auto"`` detects it)."""
    name = detect_format(path) if format == "auto" else format
    return _module(name).read(Path(path), **options)


def save_dataset(dataset: Dataset, path: str | Path, format: str = "robolearn", **options: Any) -> Path:  # noqa: A002
    """Write ``dataset`` to ``path`` in ``format``."""
    module = _module(format)
    if not FORMATS[format][1]:
        raise DatasetError(f"format {format!r} is read-only; write robolearn, minari, d4rl or lerobot")
    return module.write(dataset, Path(path), **options)


__all__ = ["FORMATS", "detect_format", "load_dataset", "save_dataset"]
