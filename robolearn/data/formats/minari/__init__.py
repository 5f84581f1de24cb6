"""Minari datasets on disk (Farama's offline-RL format), read and written with pyarrow / h5py / json only.

The ``minari`` package is not needed at run time: this module reads and writes Minari's storage layout
(learned from minari 0.5.4's ``MinariStorage``, ``ArrowStorage`` and ``HDF5Storage``) directly, and the tests
check the files against the real package. A dataset with id ``ns/sub/name-v0`` lives in
``$MINARI_DATASETS_PATH/ns/sub/name-v0/`` (default root ``~/.minari/datasets``; `dataset_dir` gives it)::

    <root>/ns/namespace_metadata.json          namespace folders (``{}`` unless the namespace has a description)
    <root>/ns/sub/name-v0/data/metadata.json   dataset metadata (below)
      data_format "arrow" or "parquet":   data/<i>/part-0.arrow (or .parquet), data/<i>/metadata.json per episode i
      data_format "hdf5":                 data/main_data.hdf5 with one group episode_<i> per episode

``metadata.json``: ``dataset_id``, ``total_episodes``, ``total_steps``, ``data_format``, ``minari_version``,
``observation_space`` / ``action_space`` (Gymnasium spaces as JSON strings: Box, Discrete, MultiDiscrete,
MultiBinary, Dict, Tuple), ``jpeg_encoding`` (image Boxes stored as JPEG bytes; missing means true), optional
``env_spec``, ``eval_env_spec``, ``algorithm_name``, ``author`` / ``author_email`` (lists),
``code_permalink``, ``description``, ``requirements``, ``ref_min_score`` / ``ref_max_score`` (for
``minari.get_normalized_score``), ``num_episodes_average_score``, ``dataset_size`` (MB).

One episode of T steps. Arrow: a table of T+1 rows, columns ``observations`` (T+1 real rows), ``actions``,
``rewards``, ``terminations``, ``truncations`` (T real rows + one zero row of padding) and optional ``infos``;
a Box leaf is a fixed-size list column of its flattened shape, a Discrete leaf a plain integer column, a Dict
(or Tuple, fields "0", "1", ...) a struct column. HDF5: datasets ``observations`` [T+1, ...] (a group per Dict
/ Tuple level, Tuple children ``_index_<i>``), ``actions`` [T, ...], ``rewards`` / ``terminations`` /
``truncations`` [T] and an optional ``infos`` group; episode attributes ``id``, ``total_steps``, ``seed``.
Minari's data collector records T+1 infos per episode: the reset's info, then each step's. Nested info dicts
are struct fields (arrow) or sub-groups (HDF5).

Mapping to `Dataset`:

- observations: a Box space is group ``"policy"``; a Dict (or Tuple) space gives one group per leaf, nested
  keys joined with ``"/"`` (``{"arm": {"qpos": ...}}`` -> ``"arm/qpos"``). Writing reverses this: a dataset
  with only group ``"policy"`` is written as a Box, anything else as a (nested) Dict. A Discrete leaf reads as
  [T+1, 1].
- actions: one Box (or Discrete / MultiDiscrete / MultiBinary) space, read as [T, A] float32; Dict actions are
  refused.
- infos: ``Dataset.infos[k][t]`` is the info of step t, i.e. Minari's ``infos[k][t + 1]``. Reading drops the
  reset row of T+1-row infos (T-row infos are taken as they are); writing prepends a zero row for the reset,
  as Minari's arrow layout needs T+1 rows. Only numeric / bool arrays are kept; others are skipped with a
  warning and listed in ``metadata["minari"]["skipped_infos"]``.
- metadata: written in full as ``robolearn_metadata`` (an extra key that Minari ignores) and copied to
  Minari's own fields where they fit (``ref_min_score`` / ``ref_max_score``, ``algorithm_name`` (or
  ``algorithm`` / ``policy``), ``author``, ``description`` (or the ``task``), ...). Reading a dataset written
  here returns that metadata; reading any other Minari dataset returns Minari's descriptive fields. Either
  way ``dataset_id`` is added and ``metadata["minari"]`` keeps the spaces and env specs, so writing the
  dataset again keeps its space bounds, Discrete types and environment.

Writing stores images raw (``jpeg_encoding: false``: lossless); reading decodes JPEG-encoded images (Pillow).
New Box spaces get the widest bounds of their dtype (``-inf``..``inf`` for floats). ``minari_version``
defaults to "0.5.0", the first Minari with this layout, so that every Minari 0.5.x accepts the files (each
refuses versions newer than itself); the tests check them against minari 0.5.4.

``read(path, flatten=True)`` (what training reads) makes a Dict / Tuple observation one float32 group "policy"
in ``gymnasium.spaces.flatten``'s layout (sorted Dict keys), the vector a policy sees in the dataset's env. A
folder written under the Minari root gets the id Minari lists it by (``<root>/point-mass/random-v0`` ->
``point-mass/random-v0``: `folder_id`).

Modules: `layout` (file names, ids, `minari_root`, `dataset_dir`, `folder_id`, `detect`), `flatten` (gymnasium's
flat layout), `spaces` (Gymnasium spaces as JSON), `metadata`
(metadata.json <-> `Dataset.metadata`), `arrow` and `hdf5` (the two storage backends, each read and written),
`episode` (what both backends share), `reader` (`read`) and `writer` (`write`).
"""

from __future__ import annotations

from robolearn.data.formats.minari.flatten import flat_observation, flat_size
from robolearn.data.formats.minari.layout import (
    DATA_FORMATS,
    HDF5_FILE,
    ID_RE,
    METADATA,
    MINARI_VERSION,
    NAMESPACE_METADATA,
    ROBOLEARN_KEY,
    dataset_dir,
    detect,
    folder_id,
    minari_root,
)
from robolearn.data.formats.minari.reader import read
from robolearn.data.formats.minari.spaces import Space, parse_space
from robolearn.data.formats.minari.writer import write

__all__ = ["DATA_FORMATS", "HDF5_FILE", "ID_RE", "METADATA", "MINARI_VERSION", "NAMESPACE_METADATA", "ROBOLEARN_KEY",
           "Space", "dataset_dir", "detect", "flat_observation", "flat_size", "folder_id", "minari_root", "parse_space",
           "read", "write"]
