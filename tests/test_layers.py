"""The layers read one way: sim and policies know nothing of robolearn or real; real uses robolearn's public API
only; algorithms import no runner or command, the library no command, benchmarks no private name; no module imports
itself back through others (no import circles); no algorithm name is switched on outside `robolearn/algos/` and
`robolearn/config/` (the registry says what an algorithm is); the robot's deploy process loads neither JAX nor
MuJoCo; every command composes its config the same way (`--help`, a bad key names it)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from policies.actor_critic import ActorCritic
from robolearn.checkpoints import checkpoint
from robolearn.commands.cli import COMMANDS, main

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
            if private or any(part.startswith("_") for part in module.split(".")):
                bad.append((path.name, module, names))
    assert not bad, bad


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


PACKAGES = ("robolearn", "sim", "policies", "real", "examples", "benchmarks")


def _graph() -> dict[str, set[str]]:
    """module -> the modules of ours it imports (anywhere in its file, functions included)."""
    paths = {_module(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in paths}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    edges.add(full if full in paths else node.module)
        graph[name] = {e for e in edges if e in paths and e != name}
    return graph


def test_no_import_circles():
    """Tarjan's strongly connected components of the import graph: every one is a single module."""
    graph, index, low, stack, on_stack, circles = _graph(), {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_algorithms_import_no_runner_and_the_library_no_command():
    graph = _graph()
    bad = [(m, e) for m, edges in graph.items() for e in edges
           if (m.startswith("robolearn.algos") and e.startswith(("robolearn.runners", "robolearn.commands")))
           or (m.startswith(("robolearn", "real")) and not m.startswith(("robolearn.commands", "robolearn.__main__"))
               and e.startswith("robolearn.commands"))]
    assert not bad, bad


def test_benchmarks_and_examples_import_no_private_names():
    bad = [(p.name, mod, names) for package in ("benchmarks", "examples") for p, mod, names in _imports(package)
           if mod.startswith(("robolearn", "sim", "policies", "real"))
           and (any(n.strip().startswith("_") for n in names.split(",")) or "._" in mod)]
    assert not bad, bad


def test_no_algorithm_name_is_switched_on_outside_algos_and_configs():
    """Runners, checkpoints, warm starts and commands ask the registry (`robolearn.algos.base`): no string literal
    of theirs is a registered algorithm's name."""
    from robolearn.algos.base import registry

    names, bad = set(registry()), []
    for path in sorted((ROOT / "robolearn").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("robolearn/algos/", "robolearn/config/")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                bad.append(f"{rel}:{node.lineno} {node.value!r}")
    assert not bad, bad


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


def test_a_renamed_or_removed_option_names_its_replacement(capsys):
    from robolearn.config.compose import REMOVED, RENAMED

    for command, renamed in RENAMED.items():
        for old, new in renamed.items():
            assert main([command.replace("_", "-"), f"{old}=x"]) == 2
            assert f"`{new}`" in capsys.readouterr().err, (command, old)
    for command, removed in REMOVED.items():
        for old, hint in removed.items():
            assert main([command.replace("_", "-"), f"{old}=x"]) == 2
            assert hint in capsys.readouterr().err, (command, old)
