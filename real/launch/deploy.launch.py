"""ROS 2 launch file: the deployer (``robolearn deploy ... transport=rclpy``, the node ``/robolearn_deploy``) and a
recorder of its topics (``robolearn record``, rosbag2 MCAP), on a ROS 2 install with ``launch`` (``ros2 launch``)::

    ros2 launch "$(python -c 'import real.deploy as d; print(d.LAUNCH_FILE)')" \\
        checkpoint:=runs/car/checkpoints/final robot:=rc_car bag:=bags/run1

``ros2 launch <file> --show-args`` lists the arguments (`ARGUMENTS`). The deployer's exit (``duration:=`` ran out,
an error) ends the launch; Ctrl-C stops both: the deployer sends its stop commands, the recorder closes its bag.

`commands` builds the two command lines from the arguments' values and needs no ``launch`` (tests import this
file with importlib where ``launch`` is not installed); `generate_launch_description` is what ``ros2 launch`` calls.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping
from typing import Any

#: The launch arguments: name -> (default, description).
ARGUMENTS: dict[str, tuple[str, str]] = {
    "checkpoint": ("", "robolearn checkpoint folder (config.json + model.safetensors)"),
    "policy": ("", "or a scripted controller module:function, instead of a checkpoint"),
    "robot": ("rc_car", "the runner preset, configs/robot/<robot>.yaml"),
    "bag": ("", "rosbag2 folder to record to (must not exist); empty: bags/<robot>_<date>_<time>"),
    "record_topics": ("", "robolearn record's topics=; empty: the deploy config's inputs, command, teleop, e-stop "
                          "and loop statistics with their types (real.deploy.record_topics)"),
    "domain_id": ("", "ROS domain id; empty: ROS_DOMAIN_ID (or 0)"),
    "duration": ("", "seconds the deployer runs; empty: until Ctrl-C"),
    "node_name": ("robolearn_deploy", "the deployer's ROS 2 node name"),
    "deploy_args": ("", "more robolearn deploy key=value overrides, space-separated (e.g. adapter.output=twist)"),
    "record_args": ("", "more robolearn record key=value overrides, space-separated"),
    "robolearn": ("robolearn", "the robolearn command (e.g. <venv>/bin/robolearn)"),
}


def commands(args: Mapping[str, str]) -> dict[str, list[str]]:
    """``{"deploy": argv, "record": argv}`` for the launch arguments' values ``args`` (missing ones: defaults).

    Both run over ``transport=rclpy``. Without ``record_topics`` the deploy config is composed here to name the
    topics and their types (robolearn must then be importable by this Python; else pass record_topics).
    """
    unknown = sorted(set(args) - set(ARGUMENTS))
    if unknown:
        raise ValueError(f"unknown launch arguments {unknown}; valid: {sorted(ARGUMENTS)}")
    a = {name: str(args.get(name, default)) for name, (default, _) in ARGUMENTS.items()}
    exe, overrides = shlex.split(a["robolearn"]), shlex.split(a["deploy_args"])
    domain = [f"domain_id={a['domain_id']}"] if a["domain_id"] else []
    deploy = [*exe, "deploy", f"robot={a['robot']}", "transport=rclpy", f"node_name={a['node_name']}", *domain]
    deploy += [f"{key}={a[key]}" for key in ("checkpoint", "policy", "duration") if a[key]]
    topics = a["record_topics"]
    if not topics:
        from real.deploy import compose_deploy, record_topics

        topics = record_topics(compose_deploy(a["robot"], overrides))
    bag = a["bag"] or f"bags/{a['robot']}_{time.strftime('%Y%m%d_%H%M%S')}"
    record = [*exe, "record", f"out={bag}", f"topics={topics}", "transport=rclpy", *domain,
              *shlex.split(a["record_args"])]
    return {"deploy": deploy + overrides, "record": record}


def generate_launch_description() -> Any:
    """The ``LaunchDescription``: the arguments, then the deployer and the recorder as processes."""
    from launch import LaunchDescription
    from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction, Shutdown
    from launch.substitutions import LaunchConfiguration

    def processes(context: Any) -> list[Any]:
        argv = commands({name: LaunchConfiguration(name).perform(context) for name in ARGUMENTS})
        return [
            ExecuteProcess(cmd=argv["deploy"], name="deploy", output="screen",
                           on_exit=Shutdown(reason="the deployer exited")),
            ExecuteProcess(cmd=argv["record"], name="record", output="screen"),
        ]  # fmt: skip

    return LaunchDescription([
        *(DeclareLaunchArgument(name, default_value=default, description=text)
          for name, (default, text) in ARGUMENTS.items()),
        OpaqueFunction(function=processes),
    ])  # fmt: skip
