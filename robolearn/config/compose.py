"""Composition: `configs/<command>.yaml` over the command's schema with `key=value` overrides, and the
`--help` text that lists every option with its default.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from robolearn.config.schemas import ALGORITHMS, RunnerConfig, TrainConfig
from robolearn.errors import ConfigError


def config_dir() -> Path:
    """The `configs/` folder: beside the packages in a checkout, inside `robolearn` in a wheel."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package.parent / "configs", package / "configs"):
        if (candidate / "train.yaml").is_file():
            return candidate
    raise ConfigError("robolearn's configs/ folder was not found next to the package; reinstall robolearn")


def _register(command: str, schema: type | None) -> None:
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    if schema is not None:
        store.store(name=f"{command}_schema", node=schema)
    for name, (algo_schema, _) in ALGORITHMS.items():  # any command may compose the algo presets (learner)
        store.store(group="algo", name=f"{name}_schema", node=algo_schema)


def _quoted(arg: str) -> str:
    """`key=value` as Hydra should read it: a value its grammar would take for a sweep (`a,b`) or reject
    (`~/x`, `x=y`) is quoted, so `topics=/odom,/imu` or `out=~/bags/run.mcap` stay plain strings."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType
    from hydra.errors import HydraException

    if "=" not in arg:
        raise ConfigError(f"arguments are key=value overrides, got {arg!r}")
    key, value = arg.split("=", 1)
    if value.startswith("[") and value.endswith("]") and "=" in value and not re.search(r"[\[,]\s*[\"']", value):
        # a list of overrides (`overrides=[a=1,b=[2,3]]`): Hydra's grammar wants each item quoted
        return f"{key}=[" + ",".join(json.dumps(item) for item in _split_top(value[1:-1])) + "]"
    if value[:1] in ("[", "{", "'", '"'):
        return arg
    try:
        if OverridesParser.create().parse_override(arg).value_type == ValueType.ELEMENT:
            return arg
    except HydraException:
        pass
    return f"{key}='" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _split_top(text: str) -> list[str]:
    """`a=1,b=[2,3]` -> ["a=1", "b=[2,3]"]: the commas outside brackets."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch in "[{("
        depth -= ch in "]})"
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


#: Options renamed or moved, per command: old key -> new key. An override of an old key is refused with its new name.
RENAMED: dict[str, dict[str, str]] = {
    "train": {f"algo.{k}": f"runner.{k}" for k in RunnerConfig.fields()},  # the runner's settings left algo.*
    "learner": {"algo.offline_data": "offline_data"},
    "chunk_bc": {"data": "dataset"},  # one name per concept: `dataset=` as train and finetune
}


#: Options removed, per command: old key -> what to do instead.
REMOVED: dict[str, dict[str, str]] = {
    "fake_robot": {"robot": "the fake robot simulates only the RC car (deploy's robot=rc_car): drop robot="},
}


def _refuse_renamed(command: str, overrides: Sequence[str]) -> None:
    renamed, removed = RENAMED.get(command, {}), REMOVED.get(command, {})
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key in removed:
            raise ConfigError(f"`{key}` was removed from robolearn {command.replace('_', '-')}: {removed[key]}")
        if key in renamed:
            raise ConfigError(f"`{key}` is now `{renamed[key]}` in robolearn {command.replace('_', '-')}: write "
                              f"{renamed[key]}={o.split('=', 1)[1] if '=' in o else '...'}")


def compose(command: str, overrides: Sequence[str] = (), schema: type | None = None) -> dict[str, Any]:
    """`configs/<command>.yaml` over its `schema` with `key=value` overrides, resolved into a plain dict.

    `schema` is the command's dataclass; it is registered as `<command>_schema`, the first entry of the
    YAML's defaults list (`train` registers its own, `TrainConfig`); the algorithm schemas are always registered.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if command == "train" and schema is None:
        schema = TrainConfig
    _refuse_renamed(command, overrides)
    _register(command, schema)
    if not (config_dir() / f"{command}.yaml").is_file():
        raise ConfigError(f"no configs/{command}.yaml in {config_dir()}")
    # A plain option named like a config-group folder the command does not compose (finetune's `algo=wsrl`, the
    # `dataset=` of train and chunk-bc) is a value, not a group choice: it is set after composition.
    plain_keys = {p.name for p in config_dir().iterdir() if p.is_dir()} - _groups(command)
    plain = {o.split("=", 1)[0].lstrip("+"): o.split("=", 1)[1] for o in overrides
             if o.split("=", 1)[0].lstrip("+") in plain_keys}
    overrides = [o for o in overrides if o.split("=", 1)[0].lstrip("+") not in plain]
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            cfg = hydra_compose(config_name=command, overrides=[_quoted(o) for o in overrides])
        out = OmegaConf.to_container(cfg, resolve=True)
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(f"bad {command} option: {_first_lines(e)}") from e
    for key, value in plain.items():
        if key not in out:
            raise ConfigError(f"bad {command} option: robolearn {command.replace('_', '-')} has no {key}= option")
        out[key] = value
    return out


def _groups(command: str) -> set[str]:
    """The config groups `configs/<command>.yaml` composes (its defaults list)."""
    import yaml

    defaults = (yaml.safe_load((config_dir() / f"{command}.yaml").read_text()) or {}).get("defaults") or []
    return {str(next(iter(d))).split("@")[0].lstrip("/") for d in defaults if isinstance(d, dict)}


def _first_lines(e: Exception) -> str:
    """Hydra's message without the hint lines it adds for its own CLI."""
    import re

    text = str(e) if not e.__cause__ else f"{e} ({e.__cause__})"
    text = re.sub(r"To append to your config use \S+ ", "", text)  # a schema has no room for new keys
    lines = [line.strip() for line in text.splitlines()]
    return " ".join(line for line in lines if line and "HYDRA_FULL_ERROR" not in line
                    and not line.startswith(("Config search path", "provider=")))


def help_text(command: str, schema: type | None = None, doc: str = "", overrides: Sequence[str] = ()) -> str:
    """What `robolearn <command> --help` prints: the usage, every option with its default, the groups. With
    `overrides` (`robolearn train algo=sac --help`) the options are those they compose: the chosen algorithm's."""
    import yaml

    cfg = compose(command, overrides, schema)
    given = f" {' '.join(overrides)}" if overrides else ""
    header = f"options of `robolearn {command}{given}` (key=value; defaults shown):"
    lines = [doc.strip(), "", header, ""] if doc else []
    lines += ["  " + line for line in yaml.safe_dump(cfg, sort_keys=False, default_flow_style=None).splitlines()]
    groups = sorted(p for p in config_dir().iterdir() if p.is_dir())
    used = [g for g in groups if g.name in _groups(command)]  # the groups it composes, not same-named options
    for group in used:
        names = sorted(p.stem for p in group.glob("*.yaml"))
        lines.append(f"\n  {group.name}=<{'|'.join(names)}>")
    return "\n".join(lines)


T = TypeVar("T")


def parse_overrides(schema: type[T], args: Sequence[str], doc: str = "") -> T:
    """A dataclass `schema` filled from `key=value` overrides in the command line's grammar (`a.b=1`,
    `sizes=[64,64]`), for scripts outside the `robolearn` command (the benchmarks). `--help` prints every field with
    its default and exits; an unknown key or a value of the wrong type is a `ConfigError` that names it.

        cfg = parse_overrides(SpeedConfig, sys.argv[1:], __doc__)
    """
    import sys

    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if any(a in ("-h", "--help") for a in args):
        defaults = OmegaConf.to_container(OmegaConf.structured(schema))
        print((doc.strip() + "\n\n" if doc else "") + "options (key=value; defaults shown):\n")
        print("\n".join("  " + line for line in yaml.safe_dump(defaults, sort_keys=False).splitlines()))
        sys.exit(0)
    bad = [a for a in args if "=" not in a]
    if bad:
        raise ConfigError(f"arguments are key=value overrides, got {bad}")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.from_dotlist(list(args)))
        return _tuples(OmegaConf.to_object(merged))
    except OmegaConfBaseException as e:
        raise ConfigError(f"bad option: {_first_lines(e)}") from e


def _tuples(obj: Any) -> Any:
    """`obj` (a dataclass instance, nested ones too) with its `tuple[...]` fields as tuples again (OmegaConf gives
    lists), so the configs equal the ones built in code (`SACConfig(actor_hidden=(64, 64))`)."""
    import dataclasses
    import typing

    if not dataclasses.is_dataclass(obj):
        return obj
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, list) and _is_tuple(hints.get(f.name)):
            setattr(obj, f.name, tuple(value))
        else:
            _tuples(value)
    return obj


def _is_tuple(hint: Any) -> bool:
    """A `tuple[...]` annotation, alone or in a union (`tuple[int, ...] | None`)."""
    import types
    import typing

    origin = typing.get_origin(hint)
    if origin is tuple:
        return True
    return origin in (typing.Union, types.UnionType) and any(_is_tuple(a) for a in typing.get_args(hint))
