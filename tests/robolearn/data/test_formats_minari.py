"""Minari format (robolearn.data.formats.minari): files the real minari package wrote read back identically,
files written here load in minari, round trips, and bad or corrupt input is always a DatasetError."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import gymnasium as gym
import minari
import numpy as np
import pyarrow as pa
import pytest
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from minari.data_collector import EpisodeBuffer

from robolearn.data import Dataset
from robolearn.data.formats import detect_format, load_dataset, save_dataset
from robolearn.data.formats import minari as fmt
from robolearn.errors import DatasetError

pytestmark = pytest.mark.filterwarnings("ignore:.*is set to None:UserWarning",
                                        "ignore:env_spec is None:UserWarning")


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(path))
    return path


# --- datasets made by the real minari --------------------------------------------------------------------


class Tiny(gym.Env):
    """Dict observations (one nested), Box actions, infos of every kind Minari stores (bool, int, vector, dict)."""

    observation_space = spaces.Dict({"pos": spaces.Box(-5, 5, (2,), np.float32),
                                     "arm": spaces.Dict({"qvel": spaces.Box(-1, 1, (3,), np.float64)})})
    action_space = spaces.Box(-1, 1, (2,), np.float32)

    def _obs(self):
        rng = self.np_random
        return {"pos": rng.uniform(-1, 1, 2).astype(np.float32), "arm": {"qvel": rng.uniform(-1, 1, 3)}}

    def _info(self):
        return {"success": self.t == 4, "k": self.t, "vec": np.full(2, self.t, np.float32), "sub": {"x": 1.5 * self.t}}

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), self._info()

    def step(self, action):
        self.t += 1
        return self._obs(), float(self.t), self.t == 4, False, self._info()


def collect(dataset_id: str, env: gym.Env, data_format: str, episodes: int = 3, **kwargs) -> minari.MinariDataset:
    collector = minari.DataCollector(env, record_infos=True, data_format=data_format)
    for seed in range(episodes):
        collector.reset(seed=seed)
        collector.action_space.seed(seed)
        while not any(collector.step(collector.action_space.sample())[2:4]):
            pass
    return collector.create_dataset(dataset_id=dataset_id, algorithm_name="random", **kwargs)


def flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        out.update(flat(value, f"{prefix}{key}/") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


def assert_same_as_minari(ours: Dataset, theirs: minari.MinariDataset, infos: bool = True) -> None:
    """Episode by episode: ours equals what minari's iterate_episodes gives (our infos skip the reset row)."""
    assert ours.num_episodes == theirs.total_episodes and ours.num_steps == theirs.total_steps
    for mine, ep in zip(ours.episodes(), theirs.iterate_episodes(), strict=True):
        obs = flat(ep.observations) if isinstance(ep.observations, dict) else {"policy": ep.observations}
        assert obs.keys() == mine.observations.keys()
        for key, value in obs.items():
            np.testing.assert_array_equal(mine.observations[key], value.reshape(len(value), -1).reshape(
                mine.observations[key].shape))
            assert len(mine.observations[key]) == len(mine) + 1
        np.testing.assert_array_equal(mine.actions, np.asarray(ep.actions, np.float32).reshape(len(mine), -1))
        np.testing.assert_array_equal(mine.rewards, ep.rewards.astype(np.float32))
        np.testing.assert_array_equal(mine.terminations, ep.terminations)
        np.testing.assert_array_equal(mine.truncations, ep.truncations)
        if infos:
            theirs_infos = {k: v for k, v in flat(ep.infos).items() if v.dtype != object}
            for key, value in theirs_infos.items():
                np.testing.assert_array_equal(mine.infos[key], value[1:] if len(value) == len(mine) + 1 else value)


@pytest.mark.parametrize("data_format", ["arrow", "hdf5", "parquet"])
def test_read_data_collector_dataset(root, data_format):
    theirs = collect(f"tiny/{data_format}-v0", gym.wrappers.TimeLimit(Tiny(), 3), data_format)
    path = fmt.dataset_dir(f"tiny/{data_format}-v0")
    assert fmt.detect(path) and fmt.detect(path / "data") and detect_format(path) == "minari"
    ours = load_dataset(path)
    assert sorted(ours.observations) == ["arm/qvel", "pos"]
    assert ours.observations["arm/qvel"].dtype == np.float64 and ours.observations["pos"].dtype == np.float32
    # minari's arrow reader returns nested info dicts as object arrays; ours flattens them ("sub/x")
    assert sorted(ours.infos) == ["k", "sub/x", "success", "vec"]
    np.testing.assert_array_equal(ours.infos["k"], np.tile([1, 2, 3], 3))  # step t's info, the reset's dropped
    np.testing.assert_array_equal(ours.infos["sub/x"], 1.5 * np.tile([1, 2, 3], 3))
    assert_same_as_minari(ours, theirs)
    assert ours.metadata["algorithm_name"] == "random" and ours.metadata["dataset_id"] == f"tiny/{data_format}-v0"
    assert ours.metadata["minari"]["data_format"] == data_format


def test_flatten_is_gymnasiums_layout(root):
    """read(flatten=True): a Dict (nested, keys sorted) or Tuple (with a Discrete, one-hot) observation becomes the
    one float32 group "policy" that gymnasium.spaces.flatten gives, row for row."""
    theirs = collect("tiny/flat-v0", gym.wrappers.TimeLimit(Tiny(), 3), "hdf5")
    ours = fmt.read(fmt.dataset_dir("tiny/flat-v0"), flatten=True)
    assert list(ours.observations) == ["policy"] and ours.metadata["minari"]["flattened"] == ["arm/qvel", "pos"]
    space = theirs.spec.observation_space
    for mine, ep in zip(ours.episodes(), theirs.iterate_episodes(), strict=True):
        rows = [gym.spaces.flatten(space, {"arm": {"qvel": ep.observations["arm"]["qvel"][t]},
                                           "pos": ep.observations["pos"][t]}) for t in range(len(mine) + 1)]
        np.testing.assert_array_equal(mine.observations["policy"], np.stack(rows).astype(np.float32))
    obs_space = spaces.Tuple((spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(4, start=1)))
    buffers = [EpisodeBuffer(observations=(np.full((3, 2), 0.5, np.float32), np.array([1, 4, 2])),
                             actions=np.zeros((2, 1), np.float32), rewards=np.ones(2), terminations=[False, True],
                             truncations=[False, False])]
    minari.create_dataset_from_buffers("tuple-v0", buffers, observation_space=obs_space,
                                       action_space=spaces.Box(-1, 1, (1,), np.float32))
    policy = fmt.read(root / "tuple-v0", flatten=True).observations["policy"]
    want = [gym.spaces.flatten(obs_space, (np.full(2, 0.5, np.float32), d)) for d in (1, 4, 2)]
    np.testing.assert_array_equal(policy, np.stack(want).astype(np.float32))


def test_default_id_is_the_path_under_the_minari_root(root, tmp_path):
    """Written under MINARI_DATASETS_PATH without a dataset_id, a dataset gets the id minari lists it by (its path
    there); elsewhere its folder's name."""
    data = make_dataset(episodes=(2,))
    fmt.write(data, root / "point-mass" / "random-v0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # minari warns "Misconfigured dataset" for an id that does not match
        assert list(minari.list_local_datasets()) == ["point-mass/random-v0"]
    assert minari.load_dataset("point-mass/random-v0").total_episodes == 1
    assert fmt.folder_id(tmp_path / "elsewhere" / "x-v0") == "x-v0"


def test_read_pendulum_with_reference_scores(root):
    theirs = collect("pendulum/random-v0", gym.make("Pendulum-v1", max_episode_steps=5), "arrow",
                     ref_min_score=-1200.0, ref_max_score=-150.0)
    ours = fmt.read(fmt.dataset_dir("pendulum/random-v0"))
    assert list(ours.observations) == ["policy"] and ours.observations["policy"].shape == (18, 3)
    assert ours.truncations.sum() == 3 and not ours.terminations.any()
    assert_same_as_minari(ours, theirs)
    returns = ours.episode_returns()
    np.testing.assert_allclose(ours.normalized_score(returns), 100 * minari.get_normalized_score(theirs, returns))
    assert "Pendulum-v1" in ours.metadata["minari"]["env_spec"]


@pytest.mark.parametrize("data_format", ["arrow", "hdf5"])
def test_read_buffers_with_tuple_discrete_and_jpeg_images(root, data_format):
    """Tuple observations (a JPEG-encoded image, a Discrete), Discrete actions, HDF5 infos with T rows.

    (Vector infos: minari's arrow reader fails on the one-number-per-step ndarray infos its writer stores.)"""
    obs_space = spaces.Tuple((spaces.Box(0, 255, (32, 32, 3), np.uint8), spaces.Discrete(5)))
    rng = np.random.default_rng(0)
    buffers = []
    for t in (3, 2):
        image = np.repeat(np.repeat(rng.integers(0, 255, (t + 1, 4, 4, 3), dtype=np.uint8), 8, 1), 8, 2)
        infos = {"cost": rng.normal(size=(t + (data_format == "arrow"), 2))}  # arrow stores T+1 rows
        buffers.append(EpisodeBuffer(observations=(image, rng.integers(0, 5, t + 1)), actions=rng.integers(0, 3, t),
                                     rewards=rng.normal(size=t), terminations=[False] * (t - 1) + [True],
                                     truncations=[False] * t, infos=infos))
    theirs = minari.create_dataset_from_buffers("buf/tuple-v1", buffers, observation_space=obs_space,
                                                action_space=spaces.Discrete(3), data_format=data_format)
    ours = fmt.read(fmt.dataset_dir("buf/tuple-v1"))
    assert ours.observations["0"].shape == (7, 32, 32, 3) and ours.observations["1"].shape == (7, 1)
    assert ours.actions.shape == (5, 1)
    np.testing.assert_array_equal(ours.infos["cost"],
                                  np.concatenate([b.infos["cost"][-len(b.rewards):] for b in buffers]))
    for mine, ep in zip(ours.episodes(), theirs.iterate_episodes(), strict=True):
        np.testing.assert_array_equal(mine.observations["0"], ep.observations[0])  # the same JPEG decoding
        np.testing.assert_array_equal(mine.observations["1"][:, 0], ep.observations[1])
        np.testing.assert_array_equal(mine.actions[:, 0], ep.actions)


# --- written here, loaded by minari ----------------------------------------------------------------------


def make_dataset(episodes=(3, 5, 2), seed=0, infos=True) -> Dataset:
    rng = np.random.default_rng(seed)
    eps = []
    for i, t in enumerate(episodes):
        ep = {"observations": {"policy": rng.normal(size=(t + 1, 4)).astype(np.float32),
                               "arm/qpos": rng.normal(size=(t + 1, 2, 3)),
                               "pixels": rng.integers(0, 255, (t + 1, 32, 32, 3), dtype=np.uint8)},
              "actions": rng.uniform(-1, 1, (t, 2)).astype(np.float32), "rewards": rng.normal(size=t),
              "terminations": np.eye(t, dtype=bool)[-1] & (i % 2 == 0),
              "truncations": np.eye(t, dtype=bool)[-1] & (i % 2 == 1)}
        if infos:
            ep["infos"] = {"success": rng.random(t) < 0.5, "force": rng.normal(size=(t, 3)).astype(np.float32),
                           "count": np.arange(t, dtype=np.int32), "safety/cost": rng.normal(size=t)}
        eps.append(ep)
    meta = {"task": "arm-reach", "ref_min_score": -10.0, "ref_max_score": 90.0, "algorithm": "sac",
            "author": "robolearn tests", "collection": {"policy": "sac", "steps": 10, "noise": [0.1, 0.2]}}
    return Dataset.from_episodes(eps, meta)


def assert_same(a: Dataset, b: Dataset) -> None:
    assert a.observations.keys() == b.observations.keys() and a.infos.keys() == b.infos.keys()
    for key in a.observations:
        assert a.observations[key].dtype == b.observations[key].dtype
        np.testing.assert_array_equal(a.observations[key], b.observations[key])
    for key in a.infos:
        assert a.infos[key].dtype == b.infos[key].dtype
        np.testing.assert_array_equal(a.infos[key], b.infos[key])
    for name in ("actions", "rewards", "terminations", "truncations", "lengths"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


@pytest.mark.parametrize("data_format", ["arrow", "hdf5", "parquet"])
def test_written_dataset_loads_in_minari(root, data_format):
    data = make_dataset()
    dataset_id = f"robolearn/arm/reach-{data_format}-v0"
    path = save_dataset(data, fmt.dataset_dir(dataset_id), format="minari", dataset_id=dataset_id,
                        data_format=data_format)
    assert (root / "robolearn" / "namespace_metadata.json").exists()
    assert (root / "robolearn" / "arm" / "namespace_metadata.json").exists()
    assert dataset_id in minari.list_local_datasets()

    theirs = minari.load_dataset(dataset_id)
    assert theirs.total_episodes == 3 and theirs.total_steps == 10
    spec = theirs.spec
    assert spec.env_spec is None and spec.dataset_id == dataset_id
    assert isinstance(spec.observation_space, spaces.Dict) and isinstance(spec.observation_space["arm"], spaces.Dict)
    assert spec.observation_space["pixels"] == spaces.Box(0, 255, (32, 32, 3), np.uint8)
    assert spec.observation_space["arm"]["qpos"].shape == (2, 3)
    assert spec.action_space == spaces.Box(-np.inf, np.inf, (2,), np.float32)
    returns = data.episode_returns()
    np.testing.assert_allclose(100 * minari.get_normalized_score(theirs, returns), data.normalized_score(returns))
    raw = theirs.storage.metadata
    assert raw["algorithm_name"] == "sac" and raw["author"] == {"robolearn tests"} and "arm-reach" in raw["description"]

    assert_same_as_minari(data, theirs, infos=False)
    for mine, ep in zip(data.episodes(), theirs.iterate_episodes(), strict=True):
        assert ep.observations["pixels"].dtype == np.uint8  # stored raw, not JPEG
        infos = flat(ep.infos)
        for key in ("success", "force", "count") + (("safety/cost",) if data_format == "hdf5" else ()):
            assert len(infos[key]) == len(mine) + 1 and not infos[key][0].any()  # a zero row for the reset
            np.testing.assert_array_equal(infos[key][1:], mine.infos[key])

    again = load_dataset(path)
    assert_same(data, again)
    assert {k: again.metadata[k] for k in data.metadata} == data.metadata
    assert again.metadata["dataset_id"] == dataset_id


@pytest.mark.parametrize("data_format", ["arrow", "hdf5"])
def test_round_trip(tmp_path, data_format):
    data = make_dataset(episodes=(1, 4, 7, 2), seed=3)
    path = fmt.write(data, tmp_path / "round-v2", data_format=data_format)
    back = fmt.read(path)
    assert_same(data, back)
    assert back.metadata["collection"] == {"policy": "sac", "steps": 10, "noise": [0.1, 0.2]}
    twice = fmt.read(fmt.write(back, tmp_path / "again" / "round-v2", data_format=data_format))
    assert_same(data, twice)
    assert twice.metadata["minari"]["observation_space"] == back.metadata["minari"]["observation_space"]


def test_box_observations_and_no_infos(root):
    data = Dataset.from_episodes([{"observations": np.ones((3, 2)), "actions": np.zeros((2, 1)), "rewards": [1, 2],
                                   "terminations": [False, True], "truncations": [False, False]}])
    fmt.write(data, root / "box-v0")
    theirs = minari.load_dataset("box-v0")
    assert theirs.spec.observation_space == spaces.Box(-np.inf, np.inf, (2,), np.float64)
    assert next(theirs.iterate_episodes()).infos == {}
    assert_same(data, fmt.read(root / "box-v0"))
    with pytest.raises(ValueError, match="Reference score not provided"):
        minari.get_normalized_score(theirs, np.zeros(1))


def test_rewrite_keeps_minari_spaces(root):
    """A minari dataset (Tuple obs with a Discrete, Discrete actions, env_spec) read and written back keeps its
    spaces and loads in minari with the same data."""
    obs_space = spaces.Tuple((spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(4)))
    buffers = [EpisodeBuffer(observations=(np.full((t + 1, 2), 0.5, np.float32), np.arange(t + 1) % 4),
                             actions=np.arange(t) % 3, rewards=np.ones(t), terminations=[False] * (t - 1) + [True],
                             truncations=[False] * t) for t in (2, 3)]
    theirs = minari.create_dataset_from_buffers("src-v0", buffers, env="CartPole-v1", observation_space=obs_space,
                                                action_space=spaces.Discrete(3))
    ours = fmt.read(root / "src-v0")
    fmt.write(ours, root / "copy" / "dst-v0", dataset_id="copy/dst-v0", data_format="hdf5")
    copy = minari.load_dataset("copy/dst-v0")
    assert copy.spec.observation_space == obs_space and copy.spec.action_space == spaces.Discrete(3)
    assert copy.spec.env_spec.id == "CartPole-v1"
    for a, b in zip(theirs.iterate_episodes(), copy.iterate_episodes(), strict=True):
        for x, y in zip(a.observations, b.observations, strict=True):
            np.testing.assert_array_equal(x, y)
            assert x.dtype == y.dtype
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)


def test_no_minari_or_gymnasium_needed(tmp_path):
    code = f"""
import sys
sys.modules["minari"] = sys.modules["gymnasium"] = None
import numpy as np
from robolearn.data import Dataset
from robolearn.data.formats import minari as fmt
data = Dataset.from_episodes([{{"observations": np.ones((3, 2)), "actions": np.zeros((2, 1)), "rewards": [1, 2],
                               "terminations": [False, True], "truncations": [False, False]}}])
for f in ("arrow", "hdf5"):
    assert fmt.read(fmt.write(data, {str(tmp_path)!r} + "/" + f + "/x-v0", data_format=f)).num_steps == 2
"""
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[3])


# --- refusals and bad input ------------------------------------------------------------------------------


def test_write_refuses(tmp_path):
    data = make_dataset(episodes=(2,))
    fmt.write(data, tmp_path / "x-v0")
    for kwargs, match in [({"path": tmp_path / "x-v0"}, "exists already"),
                          ({"path": tmp_path / "noversion"}, "not a Minari dataset id"),
                          ({"path": tmp_path / "y-v0", "dataset_id": "ns/y-v0"}, "does not end in the dataset id"),
                          ({"path": tmp_path / "z-v0", "data_format": "zarr"}, "data_format")]:
        with pytest.raises(DatasetError, match=match):
            fmt.write(data, **kwargs)
    text = Dataset.from_episodes([{"observations": np.ones((2, 1)), "actions": np.zeros((1, 1)), "rewards": [0],
                                   "terminations": [True], "truncations": [False], "infos": {"msg": np.array(["a"])}}])
    with pytest.raises(DatasetError, match=r"infos\['msg'\].*numbers or booleans"):
        fmt.write(text, tmp_path / "t-v0")
    for groups, match in [(("arm", "arm/qpos"), "clash"), (("arm/", "x"), "empty part")]:
        clash = Dataset.from_episodes([{"observations": {g: np.ones((2, 1)) for g in groups},
                                        "actions": np.zeros((1, 1)), "rewards": [0], "terminations": [True],
                                        "truncations": [False]}])
        with pytest.raises(DatasetError, match=match):
            fmt.write(clash, tmp_path / "c-v0")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x-v0"]  # nothing half-written


def buffers_dataset(root: Path, dataset_id: str, data_format: str, **changes) -> Path:
    t = 3
    episode = {"observations": np.zeros((t + 1, 2), np.float32), "actions": np.zeros((t, 1), np.float32),
               "rewards": np.ones(t), "terminations": [False, False, True], "truncations": [False] * t, **changes}
    minari.create_dataset_from_buffers(dataset_id, [EpisodeBuffer(**episode)], data_format=data_format,
                                       observation_space=spaces.Box(-1, 1, (2,), np.float32),
                                       action_space=spaces.Box(-1, 1, (1,), np.float32))
    return root / dataset_id


def edit_metadata(path: Path, **changes) -> None:
    file = path / "data" / "metadata.json"
    meta = json.loads(file.read_text())
    meta.update(changes)
    for key, value in changes.items():
        if value is None:
            del meta[key]
    file.write_text(json.dumps(meta))


@pytest.mark.parametrize("data_format", ["arrow", "hdf5"])
def test_bad_input_is_a_dataset_error(root, data_format):
    nan = buffers_dataset(root, "nan-v0", data_format, observations=np.array([[0, 0], [0, np.nan], [0, 0], [0, 0]],
                                                                             np.float32))
    with pytest.raises(DatasetError, match=r"nan-v0: observations\['policy'\] has NaN"):
        fmt.read(nan)
    open_end = buffers_dataset(root, "open-v0", data_format, terminations=[False] * 3)
    with pytest.raises(DatasetError, match="open-v0: episode 0 has no end flag"):
        fmt.read(open_end)

    good = fmt.write(make_dataset(episodes=(2, 3)), root / "good-v0", data_format=data_format)
    cases = {}

    def case(name, edit):
        path = root / f"{name}-v0"
        shutil.copytree(good, path)
        edit(path)
        cases[name] = path

    data_file = "data/main_data.hdf5" if data_format == "hdf5" else "data/1/part-0.arrow"
    case("no-metadata", lambda p: (p / "data" / "metadata.json").unlink())
    case("bad-json", lambda p: (p / "data" / "metadata.json").write_text("{'total_episodes': 2"))
    case("no-space", lambda p: edit_metadata(p, observation_space=None))
    case("bad-space", lambda p: edit_metadata(p, action_space='{"type": "Box", "shape": "x"}'))
    case("text-space", lambda p: edit_metadata(p, action_space='{"type": "Text", "max_length": 3}'))
    case("format", lambda p: edit_metadata(p, data_format="zarr"))
    case("more-episodes", lambda p: edit_metadata(p, total_episodes=3))
    case("more-steps", lambda p: edit_metadata(p, total_steps=6))
    case("shape", lambda p: edit_metadata(p, action_space=json.dumps(
        {"type": "Box", "dtype": "float32", "shape": [3], "low": [0] * 3, "high": [1] * 3})))
    case("missing-file", lambda p: (p / data_file).unlink())
    case("truncated", lambda p: (p / data_file).write_bytes((p / data_file).read_bytes()[:3000]))
    case("garbage", lambda p: (p / data_file).write_bytes(b"\x00garbage" * 100))
    if data_format == "arrow":
        case("no-column", lambda p: rewrite_arrow(p / data_file, lambda t: t.drop_columns(["rewards"])))
        case("wrong-type", lambda p: rewrite_arrow(p / data_file, lambda t: t.set_column(
            t.column_names.index("rewards"), "rewards", pa.array(["x"] * t.num_rows))))
    else:
        case("no-group", lambda p: edit_hdf5(p / data_file, lambda h5: h5.__delitem__("episode_1/actions")))
        case("wrong-type", lambda p: edit_hdf5(p / data_file, lambda h5: (
            h5.__delitem__("episode_1/rewards"), h5.create_dataset("episode_1/rewards", data=np.array([b"x"] * 3)))))
    expected = {"no-metadata": "is missing", "bad-json": "corrupt", "no-space": "no observation_space",
                "bad-space": "malformed Box", "text-space": "action_space is a Text", "format": "data_format",
                "more-episodes": "lists 3 episodes", "more-steps": "total_steps 6", "shape": "fixed-size lists of 3"
                if data_format == "arrow" else "needs \\[rows, 3\\]", "missing-file": "missing|holds no",
                "truncated": "truncated or corrupt", "garbage": "truncated or corrupt",
                "no-column": "no column 'rewards'", "no-group": "episode_1/actions is missing",
                "wrong-type": "not numbers"}
    for name, path in cases.items():
        with pytest.raises(DatasetError, match=expected[name]) as error:
            fmt.read(path)
        assert f"{name}-v0" in str(error.value), error.value


def rewrite_arrow(file: Path, change) -> None:
    table = change(pa.ipc.open_file(pa.BufferReader(file.read_bytes())).read_all())
    with pa.ipc.new_file(str(file), table.schema) as writer:
        writer.write_table(table)


def edit_hdf5(file: Path, change) -> None:
    import h5py

    with h5py.File(file, "a") as h5:
        change(h5)


def test_infos_that_do_not_fit_are_skipped_with_a_warning(root):
    buffers = [EpisodeBuffer(observations=np.zeros((t + 1, 1), np.float32), actions=np.zeros((t, 1), np.float32),
                             rewards=np.ones(t), terminations=[False] * (t - 1) + [True], truncations=[False] * t,
                             infos={"ok": np.arange(t + 1), "long": np.arange(t + 5), "name": ["a"] * t})
               for t in (2, 3)]
    minari.create_dataset_from_buffers("skip-v0", buffers, data_format="hdf5",
                                       observation_space=spaces.Box(-1, 1, (1,), np.float32),
                                       action_space=spaces.Box(-1, 1, (1,), np.float32))
    with pytest.warns(UserWarning, match=r"infos \['long', 'name'\] not read"):
        data = fmt.read(root / "skip-v0")
    np.testing.assert_array_equal(data.infos["ok"], [1, 2, 1, 2, 3])
    assert set(data.metadata["minari"]["skipped_infos"]) == {"long", "name"}


def test_detect(tmp_path):
    Dataset.from_episodes([{"observations": np.ones((2, 1)), "actions": np.zeros((1, 1)), "rewards": [0],
                            "terminations": [True], "truncations": [False]}]).save(tmp_path / "native")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "metadata.json").write_text('{"total_episodes": 1}')
    assert not fmt.detect(tmp_path / "native") and not fmt.detect(tmp_path / "other")
    assert not fmt.detect(tmp_path / "missing") and detect_format(tmp_path / "native") == "robolearn"


# --- fuzz: corrupt bytes never escape as anything but a DatasetError ------------------------------------


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("fuzz")
    data = make_dataset(episodes=(3, 2))
    return {f: fmt.write(data, base / f / "fuzz-v0", data_format=f) for f in ("arrow", "hdf5")}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data_format=st.sampled_from(["arrow", "hdf5"]), pick=st.integers(0, 1000),
       mutation=st.sampled_from(["truncate", "flip", "zero"]), where=st.floats(0, 1), count=st.integers(1, 64),
       seed=st.integers(0, 2**32 - 1))
def test_fuzz_corrupt_files(written, data_format, pick, mutation, where, count, seed):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(shutil.copytree(written[data_format], Path(tmp) / "fuzz-v0"))
        files = sorted(p for p in path.rglob("*") if p.is_file())
        file = files[pick % len(files)]
        data = bytearray(file.read_bytes())
        at = int(where * len(data))
        if mutation == "truncate":
            data = data[:at]
        else:
            rng = np.random.default_rng(seed)
            for i in rng.integers(0, max(1, len(data)), count):
                if i < len(data):
                    data[i] = 0 if mutation == "zero" else data[i] ^ (1 << int(rng.integers(0, 8)))
        file.write_bytes(bytes(data))
        try:
            with warnings.catch_warnings():  # a corrupt info name drops that info, with a warning
                warnings.simplefilter("ignore", UserWarning)
                result = fmt.read(path)
        except DatasetError:
            return
        assert isinstance(result, Dataset)
        result.validate()


def test_dataset_dir_default_root(monkeypatch):
    monkeypatch.delenv("MINARI_DATASETS_PATH", raising=False)
    assert fmt.dataset_dir("a/b-v0") == Path.home() / ".minari" / "datasets" / "a" / "b-v0"
    monkeypatch.setenv("MINARI_DATASETS_PATH", os.sep + "r")
    assert fmt.dataset_dir("b-v0", root="/x") == Path("/x/b-v0")
    assert fmt.dataset_dir("b-v0") == Path("/r/b-v0")
