"""The layers read one way: sim and policies know nothing of robolearn or real; real uses robolearn's public API
only; nothing outside robolearn imports robolearn.train's internals; the robot's deploy process loads neither
JAX nor MuJoCo; every command composes its config the same way (`--help`, a bad key names it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from policies.actor_critic import ActorCritic
from robolearn import checkpoint
from robolearn.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]


def _imports(package: str) -> list[tuple[Path, str]]:
    """(file, imported module) of every import statement under `package/`."""
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line in path.read_text().splitlines():
            m = re.match(r"\s*(?:from\s+(\S+)\s+import\s+(.+)|import\s+(\S+))", line)
            if m:
                found.append((path, m.group(1) or m.group(3), m.group(2) or ""))
    return found


def test_sim_and_policies_import_nothing_of_ours():
    for package in ("sim", "policies"):
        bad = [(p.name, mod) for p, mod, _ in _imports(package) if mod.split(".")[0] in ("robolearn", "real")]
        assert not bad, f"{package}/ imports {bad}"


def test_real_uses_robolearns_public_api_only():
    bad = []
    for path, module, names in _imports("real"):
        if module.startswith("robolearn"):
            private = [n.strip() for n in names.split(",") if n.strip().startswith("_")]
            if private or any(part.startswith("_") for part in module.split(".")) or module == "robolearn.train":
                bad.append((path.name, module, names))
    assert not bad, bad
    outside = subprocess.run(["git", "grep", "-n", "from robolearn.train import", "--", ":!robolearn/",
                              ":!tests/test_layers.py"], cwd=ROOT, capture_output=True, text=True).stdout
    assert outside == "", outside


def test_deploy_process_loads_neither_jax_nor_mujoco(tmp_path):
    """A robot deploying a PPO checkpoint: config, policy, runner and transport, but no simulator."""
    policy = ActorCritic(10, 2, actor_hidden=(8,), critic_hidden=(8,))
    run = {"env": {"name": "rc-car-track", "policy_dt": 0.05}, "algo": {"name": "ppo"}}
    checkpoint.save(tmp_path / "ckpt", {"policy": policy.config, "run": run}, policy.state_dict())
    code = f"""
import sys
from real.deploy import build_runner, compose_deploy
from real.transport.memory import MemoryBus, MemoryTransport
import real.robots.rc_car, real.robots.course, real.rl.actor, real.recorder, real.bag2dataset
import robolearn.errors, sim, sim.errors, sim.tasks
cfg = compose_deploy("rc_car", ["checkpoint={tmp_path / 'ckpt'}"])
runner = build_runner(cfg, MemoryTransport(MemoryBus()))
assert runner.config.rate_hz == 20.0, runner.config.rate_hz
loaded = sorted(m for m in ("jax", "mujoco", "mujoco.mjx") if m in sys.modules)
print("loaded:", loaded)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "loaded: []" in out.stdout, out.stdout


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_lists_its_options_and_names_a_bad_key(command, capsys):
    assert main([command, "--help"]) == 0
    assert "options of `robolearn" in capsys.readouterr().out
    assert main([command, "no_such_option=1"]) == 2
    assert "no_such_option" in capsys.readouterr().err
