"""Minari's storage layout: file names, the data formats, dataset ids and folders, and `detect`.

Shared by the reader, the writer and both storage backends (arrow / parquet and HDF5).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

METADATA = "metadata.json"
HDF5_FILE = "main_data.hdf5"
NAMESPACE_METADATA = "namespace_metadata.json"
DATA_FORMATS = ("arrow", "parquet", "hdf5")
MINARI_VERSION = "0.5.0"
ROBOLEARN_KEY = "robolearn_metadata"
#: dataset ids as Minari parses them, (namespace/)name-v<version>; Minari needs the version
ID_RE = re.compile(r"^(?:(?P<namespace>[-_\w][-_\w/]*[-_\w]+)/)?(?P<name>[-_\w]+?)-v(?P<version>\d+)$")
#: the per-step fields every episode holds besides observations and infos
STEP_FIELDS = ("rewards", "terminations", "truncations")


def minari_root() -> Path:
    """Where Minari keeps its datasets: ``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets`` (minari's
    ``get_dataset_path``)."""
    return Path(os.environ.get("MINARI_DATASETS_PATH") or Path.home() / ".minari" / "datasets")


def dataset_dir(dataset_id: str, root: str | Path | None = None) -> Path:
    """Where Minari keeps ``dataset_id``: ``root`` (default `minari_root`) joined with the id."""
    return Path(root if root is not None else minari_root()) / dataset_id


def folder_id(path: Path) -> str:
    """The id Minari lists the dataset folder ``path`` under: its path below the Minari root (`minari_root`) when
    it lies there (``<root>/point-mass/random-v0`` -> ``point-mass/random-v0``), else its name below the namespace
    folders (those holding ``namespace_metadata.json``) it sits in, else its name."""
    path = Path(path).expanduser().absolute()
    try:
        return path.resolve().relative_to(minari_root().expanduser().resolve()).as_posix()
    except ValueError:
        pass
    parts, parent = [path.name], path.parent
    while (parent / NAMESPACE_METADATA).is_file() and parent != parent.parent:
        parts.insert(0, parent.name)
        parent = parent.parent
    return "/".join(parts)


def data_dir(path: Path) -> Path:
    """The ``data`` folder (holding ``metadata.json``) of a dataset folder, or ``path`` if it is that folder."""
    return path / "data" if (path / "data").is_dir() else path


def detect(path: Path) -> bool:
    """A Minari dataset folder (``<id>/`` or its ``data/``): ``metadata.json`` with Minari's storage keys."""
    try:
        meta = json.loads((data_dir(Path(path)) / METADATA).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("data_format") in DATA_FORMATS and "total_episodes" in meta
