"""Checkpoints: a folder with `config.json` + `model.safetensors` (the LeRobot layout), never pickle.

`save` writes into a temporary sibling folder and renames it into place, so a crash mid-write
never leaves a half-written checkpoint. A process killed outright (SIGKILL, a dead torchrun rank) can leave the
hidden temporary folder behind, or the previous checkpoint set aside while the new one moves in: the next `save`
or `load` of that path removes the one and puts the other back (`_recover`). Training state for resume (optimizer,
RNG, environment state) travels in the same folder as `trainer.safetensors` + `trainer.json`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from robolearn.errors import CheckpointError

CONFIG = "config.json"
MODEL = "model.safetensors"
TRAINER_TENSORS = "trainer.safetensors"
TRAINER_META = "trainer.json"


def save(path: str | Path, config: dict[str, Any], model_state: dict[str, torch.Tensor],
         trainer_tensors: dict[str, torch.Tensor] | None = None, trainer_meta: dict[str, Any] | None = None) -> Path:
    """Atomically write a checkpoint folder at `path` (replacing any previous one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _recover(path)
    for stale in path.parent.glob(f".{path.name}.*"):  # temporary folders of a save that was killed
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        (tmp / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True))
        save_file(_host(model_state), str(tmp / MODEL))
        if trainer_tensors is not None:
            save_file(_host(trainer_tensors), str(tmp / TRAINER_TENSORS))
            (tmp / TRAINER_META).write_text(json.dumps(trainer_meta or {}, indent=2, sort_keys=True))
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _recover(path: Path) -> None:
    """Put the previous checkpoint back at `path` if a save was killed between setting it aside and moving the new
    one in (the only moment `path` is missing while its `.old` sibling exists)."""
    old = path.with_name(f".{path.name}.old")
    if not path.exists() and old.is_dir():
        os.replace(old, path)


def _host(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().contiguous() for k, v in tensors.items()}


def _read_tensors(file: Path) -> dict[str, torch.Tensor]:
    if not file.is_file():
        raise CheckpointError(f"checkpoint file {file} is missing")
    try:
        return load_file(str(file))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{file} is not a readable safetensors file ({e}); the checkpoint is corrupt") from e


def _read_json(file: Path, missing: str) -> dict[str, Any]:
    try:
        return json.loads(file.read_text())
    except FileNotFoundError as e:
        raise CheckpointError(missing) from e
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{file} is not valid JSON ({e}); the checkpoint is corrupt") from e


def load(path: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Read (config, model state) from a checkpoint folder; a missing or corrupt file raises `CheckpointError`."""
    path = Path(path)
    _recover(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist (expected a folder with {CONFIG} and {MODEL})")
    config = _read_json(path / CONFIG, f"checkpoint {path} has no {CONFIG}")
    return config, _read_tensors(path / MODEL)


def load_trainer(path: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Read the training state saved beside the model, for resume."""
    path = Path(path)
    meta = _read_json(path / TRAINER_META, f"checkpoint {path} has no training state ({TRAINER_META}); "
                                           "it cannot be resumed")
    return meta, _read_tensors(path / TRAINER_TENSORS)


def flatten_optimizer(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """An optimizer's state as flat tensors plus JSON metadata (no pickle)."""
    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for pid, st in sd["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v):
                tensors[f"optim.{pid}.{k}"] = v
            else:
                scalars[f"{pid}.{k}"] = v
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def restore_optimizer(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    state: dict[int, dict[str, Any]] = {}
    for name, v in tensors.items():
        if name.startswith("optim."):
            _, pid, k = name.split(".", 2)
            state.setdefault(int(pid), {})[k] = v
    for name, v in meta["scalars"].items():
        pid, k = name.split(".", 1)
        state.setdefault(int(pid), {})[k] = v
    try:
        opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    except (ValueError, KeyError) as e:
        raise CheckpointError(f"optimizer state does not match the model: {e}") from e


def flatten_optimizers(optimizers: dict[str, torch.optim.Optimizer]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Several named optimizers (`flatten_optimizer` each): tensors under `<name>/`, metadata by name."""
    tensors, meta = {}, {}
    for name, opt in optimizers.items():
        t, meta[name] = flatten_optimizer(opt)
        tensors.update({f"{name}/{k}": v for k, v in t.items()})
    return tensors, meta


def restore_optimizers(optimizers: dict[str, torch.optim.Optimizer], tensors: dict[str, torch.Tensor],
                       meta: dict[str, Any]) -> None:
    """Undo `flatten_optimizers`: each named optimizer from its `<name>/` tensors and its metadata."""
    for name, opt in optimizers.items():
        prefix = name + "/"
        restore_optimizer(opt, {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}, meta[name])
