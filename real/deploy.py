"""`robolearn deploy`: a robolearn checkpoint on a robot (or the fake robot) through `PolicyRunner`.

    robolearn deploy checkpoint=runs/<run>/checkpoints/final robot=rc_car transport=dds
    robolearn deploy policy=sim.tasks.rc_car_control:demo_lap_policy robot=rc_car duration=60
    robolearn deploy checkpoint=... robot=arm inputs.joints.topic=/my_arm/joint_states

``robot`` picks configs/deploy/<robot>.yaml; every other key=value is a Hydra override of it (see
configs/deploy.yaml for the keys). ``policy=module:function`` runs a scripted controller mapping the observation
batch ``[N, D]`` to actions (e.g. the RC car's demo-lap pure pursuit) instead of a checkpoint.

``rate_hz: null`` (the rc_car default) runs at the checkpoint's control rate (1 / ctrl_dt of its task); without a
checkpoint at the robot's `FALLBACK_RATES` entry. An explicit rate_hz that differs from the checkpoint's is an
error unless ``force_rate=true``.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from real.runner import PolicyRunner, RunnerConfig
from robolearn.errors import ConfigError, UnknownTaskError

log = logging.getLogger(__name__)

#: Keys of configs/deploy.yaml that concern the process, not the runner.
PROCESS_KEYS = ("checkpoint", "policy", "transport", "domain_id", "duration", "torch_threads", "force_rate")
#: Control rates (Hz) for ``rate_hz: null`` without a checkpoint to take it from (the sim task's rate).
FALLBACK_RATES = {"rc_car": 20.0}


class FunctionPolicy(torch.nn.Module):
    """A scripted controller ``fn(obs[N, D]) -> actions[N, A]`` called like a robolearn policy (``{"policy": obs}``)."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], name: str = "") -> None:
        super().__init__()
        self.fn, self.name = fn, name or getattr(fn, "__name__", "function")

    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return self.fn(obs["policy"])


def robots() -> list[str]:
    """The robots with a deploy config (configs/deploy/<robot>.yaml)."""
    from robolearn.train import config_dir

    return sorted(p.stem for p in (config_dir() / "deploy").glob("*.yaml"))


def compose_deploy(robot: str = "rc_car", overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The resolved deploy config of ``robot`` with Hydra ``key=value`` overrides."""
    from robolearn.train import compose

    if robot not in robots():
        raise ConfigError(f"no deploy config for robot {robot!r}; available: {robots()}")
    return compose([f"deploy={robot}", *overrides], name="deploy")


def load_deploy_policy(checkpoint: str | Path | None = None, policy: str | None = None,
                       device: str = "cpu") -> tuple[torch.nn.Module, dict[str, Any]]:
    """The policy module and its run config: a checkpoint folder, or a ``module:function`` controller."""
    if (checkpoint is None) == (policy is None):
        raise ConfigError("deploy needs exactly one of checkpoint=<run>/checkpoints/final or policy=module:function")
    if checkpoint is not None:
        from robolearn.train import load_policy

        module, run_config = load_policy(checkpoint)
        return module.to(device), dict(run_config)
    path, _, attr = str(policy).partition(":")
    try:
        fn = getattr(importlib.import_module(path), attr)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(f"policy={policy!r}: cannot import it ({e}); use module.path:function") from e
    return FunctionPolicy(fn, str(policy)), {}


def trained_rate(run_config: Mapping[str, Any]) -> float | None:
    """The control rate (Hz, 1 / ctrl_dt) of the task a checkpoint was trained on; None when unknown."""
    env = run_config.get("env") or {}
    if not env.get("name"):
        return None
    from sim.tasks import get_task_class

    try:
        overrides = env.get("overrides") or {}
        return 1.0 / float(overrides.get("ctrl_dt") or get_task_class(env["name"]).config_class().ctrl_dt)
    except (UnknownTaskError, TypeError, ValueError, ZeroDivisionError):  # unknown task or bad ctrl_dt: no rate
        return None


def resolve_rate(rate_hz: Any, robot: str, run_config: Mapping[str, Any], force: bool = False) -> float:
    """The deploy rate: ``rate_hz``, or (None) the checkpoint's control rate, else the robot's fallback.

    A given rate that differs from the checkpoint's is a `ConfigError` unless ``force`` (its observations,
    averaged over a period or holding the previous action, and the dynamics per step would differ).
    """
    trained = trained_rate(run_config)
    if rate_hz is None:
        if trained is not None:
            return trained
        from real.robots import ADAPTERS

        if robot not in ADAPTERS:
            raise ConfigError(f"unknown robot {robot!r}; available: {sorted(ADAPTERS)}")
        if robot not in FALLBACK_RATES:
            raise ConfigError(f"rate_hz is null and there is no checkpoint to take it from: set rate_hz for {robot}")
        log.warning("rate_hz null without a checkpoint's control rate: %s runs at its sim task's %.0f Hz",
                    robot, FALLBACK_RATES[robot])
        return FALLBACK_RATES[robot]
    rate = float(rate_hz)
    if trained is not None and abs(rate / trained - 1.0) > 0.01:
        if not force:
            raise ConfigError(f"rate_hz={rate:g} but the checkpoint was trained at {trained:g} Hz; leave rate_hz null "
                              "to match, or set force_rate=true")
        log.warning("deploying at %g Hz a policy trained at %g Hz (force_rate)", rate, trained)
    return rate


def build_runner(cfg: Mapping[str, Any], transport: Any, policy: torch.nn.Module | None = None,
                 run_config: Mapping[str, Any] | None = None) -> PolicyRunner:
    """A `PolicyRunner` from a composed deploy config; loads the policy from it unless one is given."""
    if policy is None:
        policy, run_config = load_deploy_policy(cfg.get("checkpoint"), cfg.get("policy"), str(cfg.get("device", "cpu")))
    run_config = dict(run_config or {})
    force = str(cfg.get("force_rate", False)).lower() in ("true", "1", "yes")
    rate = resolve_rate(cfg.get("rate_hz"), str(cfg.get("robot", "")), run_config, force)
    runner_cfg = RunnerConfig.from_dict({**{k: v for k, v in cfg.items() if k not in PROCESS_KEYS}, "rate_hz": rate})
    return PolicyRunner(runner_cfg, policy, transport, run_config=run_config)


def cmd_deploy(opts: dict[str, str]) -> int:
    """`robolearn deploy robot=<robot> checkpoint=<dir> | policy=<module:function> [transport=auto|dds|rclpy]
    [domain_id=N] [duration=seconds] [hydra overrides of configs/deploy/<robot>.yaml]`."""
    from real.transport import make_transport

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    opts = dict(opts)
    robot = opts.pop("robot", "rc_car")
    process = {k: opts.pop(k) for k in PROCESS_KEYS if k in opts}  # paths stay out of Hydra's override grammar
    cfg = compose_deploy(robot, [f"{k}={v}" for k, v in opts.items()])
    cfg.update(process)
    torch.set_num_threads(int(cfg.get("torch_threads") or 1))
    duration = None if cfg.get("duration") in (None, "", "null") else float(cfg["duration"])
    domain_id = None if cfg.get("domain_id") in (None, "", "null") else int(cfg["domain_id"])
    try:
        transport = make_transport(str(cfg.get("transport") or "auto"), domain_id)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    with transport:
        runner = build_runner(cfg, transport)
        log.info("deploying on %s: %g Hz, command %s on %s", robot, runner.config.rate_hz,
                 runner.adapter.command_type, runner.publisher.topic)
        try:
            runner.run(duration=duration)
        except KeyboardInterrupt:
            log.info("interrupted; stop commands sent")
        finally:
            runner.close()
    return 0
