"""robolearn.data.formats.d4rl: D4RL HDF5 files (hand-built in D4RL's flat layout) to and from a Dataset."""

import tempfile
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robolearn.data.dataset import Dataset
from robolearn.data.formats import d4rl, load_dataset, save_dataset
from robolearn.errors import DatasetError

OBS_DIM = 3


def d4rl_rows(spec: list[tuple[int, str | None]]) -> dict[str, np.ndarray]:
    """D4RL's flat rows for episodes (T, end), end "terminal", "timeout" or None (no flag: the file's unfinished
    tail). Episode e's true observations are o_t = 100 e + t (t = 0..T) in every dimension; row t stores o_t and,
    in next_observations, o_{t+1}; rewards 1 + t, actions e; infos/qpos = 2 o_t."""
    out: dict[str, list[np.ndarray]] = {k: [] for k in ("observations", "next_observations", "actions", "rewards",
                                                         "terminals", "timeouts", "infos/qpos", "infos/goal")}
    for e, (t, end) in enumerate(spec):
        o = (100.0 * e + np.arange(t + 1, dtype=np.float32))[:, None].repeat(OBS_DIM, 1)
        flag = np.arange(t) == t - 1
        out["observations"].append(o[:-1])
        out["next_observations"].append(o[1:])
        out["actions"].append(np.full((t, 2), e, np.float32))
        out["rewards"].append(1.0 + np.arange(t, dtype=np.float32))
        out["terminals"].append(flag & (end == "terminal"))
        out["timeouts"].append(flag & (end == "timeout"))
        out["infos/qpos"].append(2 * o[:-1])
        out["infos/goal"].append(np.full((t, 2), e, np.float64))
    return {k: np.concatenate(v) for k, v in out.items()}


def write_h5(path: Path, rows: dict[str, np.ndarray], metadata: dict | None = None, **drop: bool) -> Path:
    """Write ``rows`` as D4RL does (D4RL-style metadata incl. policy weights); drop=True keys are left out."""
    with h5py.File(path, "w") as f:
        for key, value in rows.items():
            if not drop.get(key.split("/")[0]):
                f.create_dataset(key, data=value)
        f["metadata/algorithm"] = np.bytes_("SAC")
        f["metadata/iteration"] = np.int32(7)
        f["metadata/policy/fc0/weight"] = np.ones((4, OBS_DIM), np.float32)
        for key, value in (metadata or {}).items():
            f[f"metadata/{key}"] = value
    return path


SPEC = [(4, "terminal"), (5, "timeout"), (3, "timeout"), (3, None)]


def test_with_next_observations_every_step_is_kept(tmp_path):
    path = write_h5(tmp_path / "data.hdf5", d4rl_rows(SPEC))
    data = d4rl.read(path)
    assert (data.num_episodes, data.num_steps) == (4, 15) and data.lengths.tolist() == [4, 5, 3, 3]
    # the terminal stays a termination; time-outs and the unfinished tail are truncations (bootstrap)
    ends = np.cumsum(data.lengths) - 1
    assert np.flatnonzero(data.terminations).tolist() == [ends[0]]
    assert np.flatnonzero(data.truncations).tolist() == ends[1:].tolist()
    for e, ep in enumerate(data.episodes()):  # T+1 observations, the final one from next_observations
        assert np.array_equal(ep.observations["policy"][:, 0], 100 * e + np.arange(len(ep) + 1))
    flat = data.transitions().arrays()
    assert np.array_equal(flat["next_obs"], flat["obs"] + 1)  # never the next episode's o_0
    assert np.array_equal(data.infos["qpos"], 2 * flat["obs"]) and data.infos["goal"].shape == (15, 2)
    assert np.allclose(data.episode_returns(), [10, 15, 6, 6])
    assert data.metadata["algorithm"] == "SAC" and data.metadata["iteration"] == 7
    assert "policy/fc0/weight" not in data.metadata  # policy weights stay in the file
    assert data.metadata["d4rl_conversion"] == {"unfinished_tail_steps": 3}


def test_without_next_observations_last_steps_are_dropped_not_faked(tmp_path):
    spec = [(4, "terminal"), (5, "timeout"), (1, "timeout"), (3, "timeout"), (3, None)]
    path = write_h5(tmp_path / "data.hdf5", d4rl_rows(spec), next_observations=True)
    with pytest.warns(UserWarning, match=r"dropped the last step of 4 episodes .*1 one-step episodes vanished"):
        data = d4rl.read(path)
    # terminal episode: all 4 steps (o_T = o_3 repeated); time-outs / tail: last step dropped, the 1-step one vanishes
    assert data.lengths.tolist() == [4, 4, 2, 2] and data.num_steps == 12
    ep0 = data.episode(0)
    assert ep0.terminations[-1] and np.array_equal(ep0.observations["policy"][:, 0], [0, 1, 2, 3, 3])
    for ep, e in zip(list(data.episodes())[1:], (1, 3, 4), strict=True):
        assert ep.truncations[-1] and not ep.terminations.any()
        assert np.array_equal(ep.observations["policy"][:, 0], 100 * e + np.arange(len(ep) + 1))
    flat = data.transitions().arrays()
    moved = ~flat["terminated"]
    assert np.array_equal(flat["next_obs"][moved], flat["obs"][moved] + 1)  # real o_{t+1}, never across episodes
    assert np.array_equal(data.infos["qpos"], 2 * flat["obs"])  # infos keep the rows of the kept steps
    assert data.metadata["d4rl_conversion"] == {
        "dropped_steps": 4, "dropped_time_out_steps": 4, "dropped_episodes": 1, "repeated_final_observations": 1,
        "unfinished_tail_steps": 3}

    with pytest.warns(UserWarning, match="1 terminations"):
        dropped = d4rl.read(path, terminal_obs="drop")
    ep0 = dropped.episode(0)  # the termination moves to the step before: an approximation, opt-in
    assert dropped.lengths.tolist() == [3, 4, 2, 2] and ep0.terminations[-1] and len(ep0) == 3
    assert np.array_equal(ep0.observations["policy"][:, 0], [0, 1, 2, 3])


def test_time_outs_from_max_episode_steps_and_flags_as_floats(tmp_path):
    rows = d4rl_rows([(3, "timeout"), (3, "timeout"), (2, "terminal")])
    rows["terminals"] = rows["terminals"].astype(np.float32)  # some D4RL files store 0./1. floats
    path = write_h5(tmp_path / "old-v0.hdf5", rows, timeouts=True)
    with pytest.raises(DatasetError, match="no timeouts.*max_episode_steps"):
        d4rl.read(path)
    data = d4rl.read(path, max_episode_steps=3)
    assert data.lengths.tolist() == [3, 3, 2] and data.truncations.sum() == 2 and data.terminations[-1]


def test_terminal_and_timeout_on_one_row_is_a_termination_and_unflagged_cuts_split(tmp_path):
    rows = d4rl_rows([(3, "terminal"), (4, "timeout"), (2, "timeout")])
    rows["timeouts"][2] = True  # both flags: the termination is the truth
    rows["timeouts"][6] = False  # episodes 1 and 2 run together without a flag: next_observations shows the cut
    with pytest.warns(UserWarning, match="1 rows whose next_observations"):
        data = d4rl.read(write_h5(tmp_path / "d.hdf5", rows))
    assert data.lengths.tolist() == [3, 4, 2] and data.terminations[2] and not data.truncations[2]
    assert data.truncations[6] and data.metadata["d4rl_conversion"] == {"unflagged_cuts": 1}


@pytest.mark.parametrize("name, d4rl_id, refs", [
    ("hopper-medium-v2.hdf5", "hopper-medium-v2", (-20.272305, 3234.3)),
    ("halfcheetah_medium_replay-v2.hdf5", "halfcheetah-medium-replay-v2", (-280.178953, 12135.0)),
    ("walker_mixed.hdf5", "walker2d-medium-replay-v0", (1.629008, 4592.3)),
    ("ant-full-replay-v1", "ant-full-replay-v1", (-325.6, 3879.7)),
    ("Ant_maze_hardest-maze_noisy_multistart_True_multigoal_False_sparse_fixed.hdf5", "antmaze-large-play-v2",
     (0.0, 1.0)),
    ("pen-human-v1", "pen-human-v1", (96.262799, 3076.8331017826877)),
    ("door-demos-v0-bc-combined.hdf5", "door-cloned-v0", (-56.512833, 2880.5693087298737)),
    ("kitchen_microwave_kettle_bottomburner_light-v0.hdf5", "kitchen-mixed-v0", (0.0, 4.0)),
    ("maze2d-umaze-sparse-v1.hdf5", "maze2d-umaze-v1", (23.85, 161.86)),
    ("maze2d-large-dense-v1", "maze2d-large-dense-v1", (30.569041, 303.4857382709002)),
    ("cheetah-run", None, None),
    ("hopper-medium-v3", None, None),
])  # fmt: skip
def test_reference_scores_are_d4rl_infos(name, d4rl_id, refs):
    assert d4rl.d4rl_name(name) == d4rl_id and d4rl.reference_scores(name) == refs


def test_download_names_and_the_table_beside_the_scores():
    """The file D4RL downloads each id to and from where (d4rl/infos.py DATASET_URLS); the reference table is
    robolearn.eval.d4rl_reference's, which the scores module reads."""
    from robolearn.eval.d4rl_reference import REF_SCORES
    from robolearn.eval.scores import d4rl_reference

    assert d4rl.REF_SCORES is REF_SCORES and d4rl_reference("Hopper-Medium-v2") == (-20.272305, 3234.3)
    assert d4rl.download_file("halfcheetah-medium-v2") == "halfcheetah_medium-v2.hdf5"
    assert d4rl.download_url("walker2d-medium-replay-v0") == f"{d4rl.URL_BASE}/gym_mujoco/walker_mixed.hdf5"
    assert d4rl.download_url("antmaze-umaze-v2") == (f"{d4rl.URL_BASE}/ant_maze_v2/Ant_maze_u-maze_noisy_multistart_"
                                                     "False_multigoal_False_sparse_fixed.hdf5")
    assert d4rl.download_url("maze2d-umaze-v1") == f"{d4rl.URL_BASE}/maze2d/maze2d-umaze-sparse-v1.hdf5"
    assert d4rl.download_file("cheetah-run") is None
    for name in REF_SCORES:  # every id's download file maps back to it
        assert d4rl.d4rl_name(d4rl.download_file(name)) == name


def test_reference_scores_from_file_name_env_or_metadata(tmp_path):
    rows = d4rl_rows(SPEC)
    data = d4rl.read(write_h5(tmp_path / "hopper-medium-v2.hdf5", rows))
    assert data.metadata["task"] == data.metadata["d4rl_dataset"] == "hopper-medium-v2"
    assert data.normalized_score(3234.3) == pytest.approx(100.0) and data.normalized_score(-20.272305) == 0.0
    data = d4rl.read(write_h5(tmp_path / "mine.hdf5", rows), env="walker2d_medium_expert-v2")
    assert data.metadata["task"] == "walker2d-medium-expert-v2"
    assert (data.metadata["ref_min_score"], data.metadata["ref_max_score"]) == (1.629008, 4592.3)
    inside = write_h5(tmp_path / "inside.hdf5", rows, {"task": "antmaze-umaze-v2"})
    assert d4rl.read(inside).normalized_score(1.0) == 100.0
    assert d4rl.read(inside, env="antmaze-umaze-v2").metadata["task"] == "antmaze-umaze-v2"
    with pytest.raises(DatasetError, match="a dataset for another task.*'antmaze-umaze-v2'.*hopper-medium-v2"):
        d4rl.read(inside, env="hopper-medium-v2")
    own = write_h5(tmp_path / "hopper-expert-v2.hdf5", rows, {"ref_min_score": 0.0, "ref_max_score": 10.0})
    assert d4rl.read(own).normalized_score(5.0) == 50.0  # scores stored in the file win over the table
    assert "ref_min_score" not in d4rl.read(write_h5(tmp_path / "unknown.hdf5", rows)).metadata


def robot_dataset() -> Dataset:
    episodes = []
    for e, t in enumerate((4, 2, 5)):
        o = (10.0 * e + np.arange(t + 1, dtype=np.float32))[:, None] * np.array([1, -1, 0.5], np.float32)
        end = np.arange(t) == t - 1
        episodes.append({"observations": {"policy": o, "critic": np.concatenate([o, o], 1)},
                         "actions": np.full((t, 2), 0.1 * e, np.float32), "rewards": np.arange(t, dtype=np.float32),
                         "terminations": end & (e == 1), "truncations": end & (e != 1),
                         "infos": {"success": end & (e == 1), "raw_action": np.ones((t, 2)) * e}})
    meta = {"task": "cheetah-run", "ref_min_score": -1.5, "ref_max_score": 250.0, "seed": 3, "kind": "random",
            "env": {"name": "cheetah-run", "num_envs": 4}, "collected_with": "robolearn collect"}
    return Dataset.from_episodes(episodes, meta, source="test")


def test_round_trip_is_lossless_and_d4rl_shaped(tmp_path):
    data = robot_dataset()
    with pytest.warns(UserWarning, match=r"leaving out \['critic'\]"):
        path = save_dataset(data, tmp_path / "out", format="d4rl")
    assert path == tmp_path / "out.hdf5" and d4rl.detect(path)
    again = load_dataset(path, format="d4rl")
    for name in ("actions", "rewards", "terminations", "truncations", "lengths"):
        assert np.array_equal(getattr(again, name), getattr(data, name)) and \
            getattr(again, name).dtype == getattr(data, name).dtype
    assert np.array_equal(again.observations["policy"], data.observations["policy"]) and list(again.observations) \
        == ["policy"]
    assert all(np.array_equal(again.infos[k], v) and again.infos[k].dtype == v.dtype for k, v in data.infos.items())
    assert again.metadata.pop("robolearn_version") and again.metadata == data.metadata
    # what a D4RL consumer sees: its keys, flat rows, next_observations never across an episode end
    with h5py.File(path, "r") as f:
        assert {"observations", "actions", "rewards", "terminals", "timeouts", "next_observations"} <= set(f)
        assert f["terminals"].dtype == bool and f["observations"].shape == (11, 3)
        obs, nxt = f["observations"][:], f["next_observations"][:]
        ends = f["terminals"][:] | f["timeouts"][:]
        assert np.array_equal(np.flatnonzero(ends) + 1, np.cumsum(data.lengths))
        assert np.array_equal(nxt[:-1][~ends[:-1]], obs[1:][~ends[:-1]])
        assert f["metadata/task"][()] == b"cheetah-run" and f["metadata/ref_max_score"][()] == 250.0
    with pytest.raises(DatasetError, match="never overwritten"):
        d4rl.write(data, path)
    with pytest.warns(UserWarning, match=r"writing group 'critic'"):
        written = d4rl.write(data, tmp_path / "critic.h5", group="critic", compression="gzip")
    critic = d4rl.read(written)
    assert np.array_equal(critic.observations["critic"], data.observations["critic"])


def test_detect(tmp_path):
    assert d4rl.detect(write_h5(tmp_path / "a.hdf5", d4rl_rows(SPEC)))
    assert not d4rl.detect(write_h5(tmp_path / "b.hdf5", d4rl_rows(SPEC), actions=True))
    (tmp_path / "c.hdf5").write_text("not hdf5")
    assert not d4rl.detect(tmp_path / "c.hdf5") and not d4rl.detect(tmp_path)
    robot_dataset().save(tmp_path / "native")
    assert not d4rl.detect(tmp_path / "native")


def _set(key, value):
    return lambda rows: rows.__setitem__(key, value(rows[key]))


@pytest.mark.parametrize("damage, match", [
    (lambda rows: rows.pop("actions"), "no actions dataset at the top level"),
    (_set("rewards", lambda v: v[:-1]), "rewards has 14 rows, observations 15"),
    (_set("actions", lambda v: v.astype(bytes)), "actions holds strings"),
    (_set("observations", lambda v: np.where(np.arange(len(v))[:, None] == 5, np.nan, v)),
     r"observations has NaN or inf \(row 5\)"),
    (_set("rewards", lambda v: np.where(np.arange(len(v)) == 2, np.inf, v)), "rewards has NaN or inf"),
    (_set("terminals", lambda v: v * 0.5), "terminals holds 0.5"),
    (_set("next_observations", lambda v: v[:, :2]), "next_observations is"),
    (lambda rows: [rows.__setitem__(k, v[:0]) for k, v in list(rows.items())], "no steps"),
])  # fmt: skip
def test_bad_contents_raise_dataset_error(tmp_path, damage, match):
    rows = d4rl_rows(SPEC)
    damage(rows)
    path = write_h5(tmp_path / "bad.hdf5", rows)
    with pytest.raises(DatasetError, match=match) as info:
        d4rl.read(path)
    assert str(path) in str(info.value)


def test_observations_as_a_group_and_damaged_files_raise_dataset_error(tmp_path):
    rows = d4rl_rows(SPEC)
    grouped = write_h5(tmp_path / "g.hdf5", {**{f"observations/{k}": v for k, v in (("pos", rows["actions"]),)},
                                             **{k: v for k, v in rows.items() if k != "observations"}})
    with pytest.raises(DatasetError, match="observations is a group"):
        d4rl.read(grouped)
    good = write_h5(tmp_path / "good.hdf5", rows).read_bytes()
    cases = {"empty.hdf5": (b"", "is empty"), "text.hdf5": (b"hello", "not a readable HDF5 file"),
             "cut.hdf5": (good[: len(good) // 2], "truncated or corrupt")}
    for name, (content, match) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(DatasetError, match=match):
            d4rl.read(tmp_path / name)
    with pytest.raises(DatasetError, match="does not exist"):
        d4rl.read(tmp_path / "missing.hdf5")
    with pytest.raises(DatasetError, match="terminal_obs"):
        d4rl.read(tmp_path / "good.hdf5", terminal_obs="zeros")


@pytest.fixture(scope="module")
def written_files():
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for compression in (None, "gzip"):
            path = write_h5(Path(tmp) / f"{compression}.hdf5", d4rl_rows(SPEC))
            if compression:  # the same rows without next_observations, chunked and compressed
                with h5py.File(path, "r") as f:
                    rows = {k: f[k][()] for k in ("observations", "actions", "rewards", "terminals", "timeouts")}
                path.unlink()
                with h5py.File(path, "w") as f:
                    for k, v in rows.items():
                        f.create_dataset(k, data=v, compression=compression)
            files.append(path.read_bytes())
        yield files


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_corrupted_bytes_give_a_dataset_or_dataset_error(written_files, data):
    content = bytearray(data.draw(st.sampled_from(written_files)))
    if data.draw(st.booleans()):
        content = content[: data.draw(st.integers(0, len(content) - 1))]
    else:
        for _ in range(data.draw(st.integers(1, 8))):
            position = data.draw(st.integers(0, len(content) - 1))
            content[position] ^= data.draw(st.integers(1, 255))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.hdf5"
        path.write_bytes(bytes(content))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                result = d4rl.read(path)
            except DatasetError:
                return
        assert isinstance(result, Dataset)
