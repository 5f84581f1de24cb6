"""robolearn's own format: ``.npy`` arrays + ``dataset.json`` (`Dataset.save` / `Dataset.load`, memory-mapped)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from robolearn.data.dataset import FORMAT, INDEX, Dataset


def detect(path: Path) -> bool:
    try:
        return json.loads((path / INDEX).read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def read(path: Path, mmap: bool = True, **_: Any) -> Dataset:
    return Dataset.load(path, mmap=mmap)


def write(dataset: Dataset, path: Path, **_: Any) -> Path:
    return dataset.save(path)
