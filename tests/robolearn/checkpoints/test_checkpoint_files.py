"""A checkpoint folder is replaced atomically; what a killed save leaves behind is cleaned up or put back."""

import os

import torch

from robolearn.checkpoints import checkpoint


def test_a_killed_save_leaves_nothing_the_next_save_or_load_does_not_repair(tmp_path):
    path = tmp_path / "latest"
    checkpoint.save(path, {"v": 1}, {"w": torch.ones(2)})
    # killed while writing: a hidden temporary folder with part of a checkpoint
    partial = tmp_path / ".latest.abc123"
    partial.mkdir()
    (partial / checkpoint.CONFIG).write_text("{")
    # killed between setting the old checkpoint aside and moving the new one in
    os.replace(path, tmp_path / ".latest.old")
    config, state = checkpoint.load(path)  # the previous checkpoint is put back
    assert config == {"v": 1} and torch.equal(state["w"], torch.ones(2))
    checkpoint.save(path, {"v": 2}, {"w": torch.zeros(2)})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest"]
    assert checkpoint.load(path)[0] == {"v": 2}
