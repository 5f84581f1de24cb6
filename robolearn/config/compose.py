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
    items = _split_top(value[1:-1]) if value.startswith("[") and value.endswith("]") else []
    if any("=" in item and item[:1] not in "'\"" for item in items):
        # a list of overrides (`overrides=[a=1,b=[2,3]]`, some perhaps quoted): Hydra's grammar wants each quoted
        return f"{key}=[" + ",".join(item if item[:1] in "'\"" else json.dumps(item) for item in items) + "]"
    if value[:1] in ("[", "{", "'", '"'):
        return arg
    try:
        if OverridesParser.create().parse_override(arg).value_type == ValueType.ELEMENT:
            return arg
    except HydraException:
        pass
    return f"{key}='" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _split_top(text: str) -> list[str]:
    """`a=1,b=[2,3],"c=[4,5]"` -> ["a=1", "b=[2,3]", '"c=[4,5]"']: the commas outside brackets and quotes."""
    parts, depth, current, quote, escaped = [], 0, "", "", False
    for ch in text:
        if quote:  # inside a quoted item: only its closing quote (not an escaped one) counts
            quote = "" if ch == quote and not escaped else quote
            escaped = ch == "\\" and not escaped
        elif ch in "'\"":
            quote = ch
        else:
            depth += ch in "[{("
            depth -= ch in "]})"
        if ch == "," and depth == 0 and not quote:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


#: Options renamed or moved, per command: old key -> new key. An override of an old key is refused with its new name,
#: before Hydra composes (whose own error would only say the key is unknown). Each entry is a rename in this repo's
#: history; `robolearn bench` also reads this table to resume cells recorded under the old names.
RENAMED: dict[str, dict[str, str]] = {
    "train": {
        **{f"algo.{k}": f"runner.{k}" for k in RunnerConfig.fields()},  # the runner's settings left algo.* (9d3957d)
        "algo.num_envs": "env.num_envs",  # SAC's preset held the env count until the env group took it (90be801)
    },
    "learner": {"algo.offline_data": "offline_data"},
    "chunk_bc": {"data": "dataset"},  # one name per concept: `dataset=` as train and finetune (1beda59)
}


_TOKEN = ("a secret on the command line shows in `ps` and the shell history: put it in a file and pass "
          "token_file=<file>, or set the ROBOLEARN_TOKEN environment variable")

#: Options removed, per command: old key -> what to do instead (a removal in this repo's history).
REMOVED: dict[str, dict[str, str]] = {
    "actor": {"token": _TOKEN},  # 7f64c24: the link's secret from token_file= or ROBOLEARN_TOKEN only
    "learner": {"token": _TOKEN},  # 78fe581
}


def _refuse_renamed(command: str, overrides: Sequence[str]) -> None:
    """Refuse an override of a removed or renamed key with its replacement (the tables above)."""
    renamed, removed = RENAMED.get(command, {}), REMOVED.get(command, {})
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key in removed:
            raise ConfigError(f"`{key}` was removed from robolearn {command.replace('_', '-')}: {removed[key]}")
        if key in renamed:
            raise ConfigError(f"`{key}` is now `{renamed[key]}` in robolearn {command.replace('_', '-')}: write "
                              f"{renamed[key]}={o.split('=', 1)[1] if '=' in o else '...'}")


def _valid_keys(command: str, overrides: Sequence[str], parent: str = "") -> list[str]:
    """The option names the command has under `parent` (`""`: the top level; `algo`: the chosen algorithm's fields),
    composed with the config-group choices among `overrides` only; [] when even that does not compose."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    groups = _groups(command)
    chosen = [_quoted(o) for o in overrides if o.split("=", 1)[0].lstrip("+") in groups]
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
            node: Any = OmegaConf.to_container(hydra_compose(config_name=command, overrides=chosen), resolve=False)
    except Exception:  # noqa: BLE001 - only a hint: the caller's error stands without it
        return []
    for part in parent.split(".") if parent else ():
        node = node.get(part) if isinstance(node, dict) else None
    return sorted(node) if isinstance(node, dict) else []


def _unknown_key_hint(command: str, key: str, valid: Sequence[str]) -> str:
    """`robolearn <command> has no <key>= option; did you mean ...? valid options: ...`: what to write instead of an
    unknown key (a typo, or another command's option), since Hydra's error names only the key it could not set."""
    import difflib

    parent, _, leaf = key.rpartition(".")
    prefix, name = f"{parent}." if parent else "", command.replace("_", "-")
    text = f"robolearn {name} has no {key}= option"
    if not valid:
        return text
    close = difflib.get_close_matches(leaf, valid, n=1)
    guess = f"; did you mean {prefix}{close[0]}=?" if close else ";"
    return (f"{text}{guess} valid {f'{prefix}* ' if parent else ''}options: {', '.join(valid)} "
            f"(`robolearn {name} --help` shows their defaults)")


def _missing_key(error: BaseException) -> str | None:
    """The full key of the unknown option behind a composition error (OmegaConf's key error in its causes), if any."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, (ConfigKeyError, ConfigAttributeError)):
        cause = cause.__cause__
    return getattr(cause, "full_key", None) or None


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
        key = _missing_key(e)
        hint = _unknown_key_hint(command, key, _valid_keys(command, overrides, key.rpartition(".")[0])) if key else ""
        raise ConfigError(f"bad {command.replace('_', '-')} option: {_first_lines(e)}" + (f"\n{hint}" if hint else "")
                          ) from e
    for key, value in plain.items():
        if key not in out:
            raise ConfigError(f"bad {command.replace('_', '-')} option: {_unknown_key_hint(command, key, sorted(out))}")
        out[key] = value
    return out


def _groups(command: str) -> set[str]:
    """The config groups `configs/<command>.yaml` composes (its defaults list)."""
    import yaml

    defaults = (yaml.safe_load((config_dir() / f"{command}.yaml").read_text()) or {}).get("defaults") or []
    return {str(next(iter(d))).split("@")[0].lstrip("/") for d in defaults if isinstance(d, dict)}


def _first_lines(e: Exception) -> str:
    """Hydra's message without the hint lines it adds for its own CLI."""
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
