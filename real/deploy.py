"""`robolearn deploy`: a robolearn checkpoint on a robot (or the fake robot) through `PolicyRunner`.

    robolearn deploy checkpoint=runs/<run>/checkpoints/final robot=rc_car transport=dds
    robolearn deploy policy=sim.tasks.rc_car_control:demo_lap_policy robot=rc_car duration=60
    robolearn deploy checkpoint=... robot=arm inputs.joints.topic=/my_arm/joint_states

``robot`` picks configs/robot/<robot>.yaml (the runner preset); every other key=value is a Hydra override of
`DeployConfig` (see configs/deploy.yaml for the runner keys). ``policy=module:function`` runs a scripted
controller mapping the observation batch ``[N, D]`` to actions (e.g. the RC car's demo-lap pure pursuit)
instead of a checkpoint.

``rate_hz: null`` (the rc_car default) runs at the rate the checkpoint's policy acted at in training; without a
checkpoint at the robot's `FALLBACK_RATES` entry. An explicit rate_hz that differs from the checkpoint's is an
error unless ``force_rate=true``. This process loads neither JAX nor MuJoCo.

With ``transport=rclpy`` the deployer is the ROS 2 node ``node_name`` (``/robolearn_deploy``), whose read-only
parameters are its settings (`deploy_parameters`): ``ros2 param get /robolearn_deploy rate_hz``.
real/launch/deploy.launch.py starts it together with ``robolearn record`` (`record_topics`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from real import msgs
from real.runner import RUNNER_KEYS, PolicyRunner, RunnerConfig
from real.transport.base import ParameterValue, ros_parameters
from robolearn.checkpoints.policy import Policy, load_policy, scripted_policy
from robolearn.config import compose, config_dir, control_rate
from robolearn.errors import ConfigError

log = logging.getLogger(__name__)

#: The ROS 2 launch file starting the deployer and a recorder (``ros2 launch <LAUNCH_FILE> checkpoint:=...``).
LAUNCH_FILE = Path(__file__).with_name("launch") / "deploy.launch.py"
#: Control rates (Hz) for ``rate_hz: null`` without a checkpoint to take it from (the sim task's rate).
FALLBACK_RATES = {"rc_car": 20.0}


@dataclasses.dataclass
class DeployConfig:
    """`robolearn deploy`: the process (policy source, transport, duration) and the runner (the robot preset)."""

    checkpoint: str | None = None   # a robolearn checkpoint folder (config.json + model.safetensors)
    policy: str | None = None       # or a scripted controller "module:function" mapping obs[N, D] -> actions[N, A]
    transport: str = "auto"         # auto (rclpy in a sourced ROS 2 env, else dds) | dds | rclpy | memory
    domain_id: int | None = None    # DDS / ROS domain; null: ROS_DOMAIN_ID or 0
    duration: float | None = None   # seconds to run; null: until Ctrl-C / SIGTERM (stop commands are sent either way)
    torch_threads: int = 1          # small MLPs infer fastest on one thread
    force_rate: bool = False        # true: allow a rate_hz that differs from the checkpoint's control rate
    node_name: str = "robolearn_deploy"  # the ROS 2 node's name (transport=rclpy)
    # the runner (set by configs/robot/<robot>.yaml; documented in configs/deploy.yaml)
    robot: str = "rc_car"
    rate_hz: float | None = None
    device: str = "cpu"
    spin_ms: float = 0.2
    inputs: dict[str, Any] = dataclasses.field(default_factory=dict)
    observation: list[Any] = dataclasses.field(default_factory=list)
    command: dict[str, Any] = dataclasses.field(default_factory=dict)
    safety: dict[str, Any] = dataclasses.field(default_factory=dict)
    estop: dict[str, Any] | None = None
    require_estop: bool = False
    teleop: dict[str, Any] | None = None
    stats: dict[str, Any] | None = None
    adapter: dict[str, Any] = dataclasses.field(default_factory=dict)


#: Keys of `DeployConfig` that concern the process, not the runner.
PROCESS_KEYS = ("checkpoint", "policy", "transport", "domain_id", "duration", "torch_threads", "force_rate",
                "node_name")
#: What the read-only ROS 2 parameters of the deployer's node say about themselves.
PARAMETER_DESCRIPTION = "robolearn deploy's setting, read-only: restart the deployer to change it"


def robots() -> list[str]:
    """The robots with a runner preset (configs/robot/<robot>.yaml)."""
    return sorted(p.stem for p in (config_dir() / "robot").glob("*.yaml"))


def compose_deploy(robot: str = "rc_car", overrides: Sequence[str] = (), command: str = "deploy",
                   schema: type = DeployConfig) -> dict[str, Any]:
    """The resolved deploy config of ``robot`` with Hydra ``key=value`` overrides."""
    if robot not in robots():
        raise ConfigError(f"no runner preset for robot {robot!r}; available: {robots()}")
    return compose(command, [f"robot={robot}", *overrides], schema)


def load_deploy_policy(checkpoint: str | None = None, policy: str | None = None,
                       device: str = "cpu") -> tuple[Policy, dict[str, Any]]:
    """The policy and its run config: a checkpoint folder (deterministic), or a ``module:function`` controller."""
    if (checkpoint is None) == (policy is None):
        raise ConfigError("deploy needs exactly one of checkpoint=<run>/checkpoints/final or policy=module:function")
    loaded = load_policy(checkpoint, device=device) if checkpoint is not None else scripted_policy(str(policy))
    return loaded, loaded.run


def resolve_rate(rate_hz: Any, robot: str, run_config: Mapping[str, Any], force: bool = False) -> float:
    """The deploy rate: ``rate_hz``, or (None) the checkpoint's control rate, else the robot's fallback.

    A given rate that differs from the checkpoint's is a `ConfigError` unless ``force`` (its observations,
    averaged over a period or holding the previous action, and the dynamics per step would differ).
    """
    trained = control_rate(dict(run_config))
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
    rate = resolve_rate(cfg.get("rate_hz"), str(cfg.get("robot", "")), run_config, bool(cfg.get("force_rate")))
    runner_cfg = RunnerConfig.from_dict({**{k: v for k, v in cfg.items() if k not in PROCESS_KEYS}, "rate_hz": rate})
    return PolicyRunner(runner_cfg, policy, transport, run_config=run_config)


def deploy_parameters(cfg: Mapping[str, Any], runner: PolicyRunner) -> dict[str, ParameterValue]:
    """The deployer's settings as ROS 2 parameters (``safety.max_rate``, ``inputs.odom.topic``, ...): every
    `DeployConfig` key, with the values in effect where the runner resolved them (``rate_hz``; ``command.type``,
    the command's message type)."""
    settings = {key: cfg.get(key) for key in (*PROCESS_KEYS, *RUNNER_KEYS)}
    settings["rate_hz"] = runner.config.rate_hz
    settings["command"] = {**runner.config.command, "type": runner.adapter.command_type}
    return ros_parameters(settings)


def record_topics(cfg: Mapping[str, Any]) -> str:
    """``robolearn record``'s ``topics=`` for a deploy config (`compose_deploy`): the inputs, the command, the
    teleop, e-stop and loop-statistics topics, each with its type and the QoS to record it with."""
    from real.robots import make_adapter

    command_type = make_adapter(str(cfg["robot"]), cfg.get("adapter"), 1.0).command_type
    items = [(s["topic"], s["type"], s.get("qos")) for s in (cfg.get("inputs") or {}).values()]
    items.append((cfg["command"]["topic"], command_type, cfg["command"].get("qos")))
    for key, msg_type in (("teleop", command_type), ("estop", msgs.BOOL), ("stats", msgs.FLOAT32_MULTI_ARRAY)):
        if (cfg.get(key) or {}).get("topic"):
            items.append((cfg[key]["topic"], msg_type, cfg[key].get("qos")))
    return ",".join(f"{topic}:{msg_type}@{qos or 'default'}" for topic, msg_type, qos in items)


def open_transport(kind: str, domain_id: int | None, node_name: str | None = None):
    """`real.transport.make_transport` with a bad kind as a `ConfigError`."""
    from real.transport import make_transport

    try:
        return make_transport(kind, domain_id, node_name)
    except ValueError as e:
        raise ConfigError(str(e)) from e


def cmd_deploy(cfg: DeployConfig) -> int:
    """Run a checkpoint (or a scripted controller) on a robot until Ctrl-C, SIGTERM or `duration`."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(cfg.torch_threads)
    with open_transport(cfg.transport, cfg.domain_id, cfg.node_name) as transport:
        settings = dataclasses.asdict(cfg)
        runner = build_runner(settings, transport)
        transport.declare_parameters(deploy_parameters(settings, runner), PARAMETER_DESCRIPTION)
        log.info("deploying on %s: %g Hz, command %s on %s", cfg.robot, runner.config.rate_hz,
                 runner.adapter.command_type, runner.publisher.topic)
        try:
            runner.run(duration=cfg.duration)
        except KeyboardInterrupt:
            log.info("interrupted; stop commands sent")
        finally:
            runner.close()
    return 0
