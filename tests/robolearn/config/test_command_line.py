"""Command lines stay usable as options change: a removed or renamed key is refused, before Hydra composes, with what
to write instead (`robolearn.config.compose.REMOVED` / `RENAMED`, each entry a change in this repo's history), and a
key a command never had gets Hydra's error plus the keys it does have at that level and the closest one."""

from __future__ import annotations

import pytest

from robolearn.commands.cli import main


def error_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What `robolearn <argv>` prints on stderr; it must fail as a usage error (exit status 2)."""
    assert main(list(argv)) == 2
    return capsys.readouterr().err


def test_a_removed_or_renamed_key_names_its_replacement(capsys):
    err = error_of(capsys, "actor", "token=secret")
    assert "`token` was removed from robolearn actor" in err and "token_file=<file>" in err and "ROBOLEARN_TOKEN" in err
    err = error_of(capsys, "train", "algo=sac", "algo.num_envs=4")
    assert "`algo.num_envs` is now `env.num_envs` in robolearn train: write env.num_envs=4" in err
    err = error_of(capsys, "chunk-bc", "data=demos")
    assert "write dataset=demos" in err


def test_an_unknown_key_lists_the_valid_ones_and_the_closest(capsys):
    err = error_of(capsys, "eval", "checkpont=runs/x")
    assert "Could not override 'checkpont'" in err  # Hydra's own message stays
    assert "did you mean checkpoint=?" in err and "valid options: backend, checkpoint, device" in err
    err = error_of(capsys, "fake-robot", "foo=1")
    assert "robolearn fake-robot has no foo= option; valid options:" in err and "rate_hz" in err and "robot" in err
    err = error_of(capsys, "train", "runner.log_evry=5")  # a nested key: the keys of its section
    assert "did you mean runner.log_every=?" in err and "valid runner.* options:" in err
    err = error_of(capsys, "train", "algo=sac", "algo.actor_hiden=[64,64]")  # the chosen algorithm's fields
    assert "did you mean algo.actor_hidden=?" in err and "utd_ratio" in err
    err = error_of(capsys, "eval", "robot=rc_car")  # named like a config group the command does not compose
    assert "robolearn eval has no robot= option; valid options: backend, checkpoint" in err
