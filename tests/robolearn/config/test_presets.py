"""Defaults live once: an algorithm preset (`configs/algo/<name>.yaml`) holds only what differs from its schema's
dataclass defaults (`ALGORITHMS[name][0]`, `EnvConfig`), each value with its source in a comment.

A preset that inherits another through its defaults list (the SAC recipes: `defaults: [sac, _self_]`) is checked
against what the key would be without it: the parent preset as composed. The composed configs are compared, so a
value is typed by its field first (`utd_ratio: 20` equals a default of 20.0; `true` never equals 1)."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

from robolearn.config import ALGORITHMS, EnvConfig, compose

ALGO_DIR = Path(__file__).resolve().parents[3] / "configs" / "algo"
PRESETS = sorted(ALGO_DIR.glob("*.yaml"))
#: Keys whose comment may be left out: they name the preset rather than set a value someone published.
NAMES = ("name", "recipe")


def _sections(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The preset's own values by top-level section (`algo`, `env`) and the preset names it inherits."""
    raw = yaml.safe_load(path.read_text()) or {}
    parents = [d for d in raw.pop("defaults", []) if isinstance(d, str) and d != "_self_" and "_schema" not in d]
    if "@package _global_" not in path.read_text():  # a plain group file: its keys are algo.*
        raw = {"algo": raw} if raw else {}
    return raw, parents


@functools.cache
def _composed(preset: str) -> dict[str, Any]:
    return compose("train", [f"algo={preset}"])


def _defaults(schema: type) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.structured(schema))


def _env_set(parents: list[str]) -> dict[str, Any]:
    """What the parent presets (and theirs) set in `env`, the later over the earlier."""
    values: dict[str, Any] = {}
    for parent in parents:
        own, grandparents = _sections(ALGO_DIR / f"{parent}.yaml")
        values.update({**_env_set(grandparents), **(own.get("env") or {})})
    return values


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_there_are_presets():
    assert PRESETS, f"no presets in {ALGO_DIR}"


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_a_preset_holds_only_what_differs_from_the_defaults(path: Path):
    own, parents = _sections(path)
    cfg = _composed(path.stem)
    name = cfg["algo"]["name"]
    assert name in ALGORITHMS, f"configs/algo/{path.name} composes algo.name={name!r}, not one of {sorted(ALGORITHMS)}"
    unknown = set(own) - {"algo", "env"}
    assert not unknown, (f"configs/algo/{path.name} sets {sorted(unknown)}: presets set algo.* and env.* (teach "
                         "tests/robolearn/config/test_presets.py where the defaults of another section live)")
    schema = ALGORITHMS[name][0]
    bases = {"algo": _composed(parents[-1])["algo"] if parents else _defaults(schema),
             "env": {**_defaults(EnvConfig), **_env_set(parents)}}
    fields = {"algo": {f.name for f in dataclasses.fields(schema)},
              "env": {f.name for f in dataclasses.fields(EnvConfig)}}
    repeated = []
    for section, values in own.items():
        for key in values or {}:
            assert key in fields[section], (f"configs/algo/{path.name}: {section}.{key} is not a field of "
                                            f"{schema.__name__ if section == 'algo' else 'EnvConfig'}")
            value = cfg[section][key]
            if _same(value, bases[section][key]):
                repeated.append(f"{section}.{key}: {value!r}")
    assert not repeated, (f"configs/algo/{path.name} repeats the default of {', '.join(repeated)} "
                          f"({'the ' + parents[-1] + ' preset' if parents else schema.__name__}); delete "
                          "those lines (the default's source is cited where it is defined)")


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_a_preset_says_what_it_is_and_where_each_value_comes_from(path: Path):
    lines = path.read_text().splitlines()
    header = [line for line in lines if line.strip() != "# @package _global_"]
    assert header and header[0].startswith("# "), f"configs/algo/{path.name} starts with a comment saying what it is"
    section = None
    for line in lines:
        top = re.match(r"^(\w+):", line)
        if top:
            section = top.group(1)
            continue
        value = re.match(r"^\s+(\w+):", line)
        if section in ("algo", "env") and value and value.group(1) not in NAMES:
            assert "#" in line, f"configs/algo/{path.name}: {section}.{value.group(1)} has no comment citing its source"
