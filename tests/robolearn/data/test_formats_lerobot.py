"""robolearn.data.formats.lerobot: LeRobotDataset v3.0 layout written and read back (state exact, video within a
codec tolerance), the files and keys where LeRobot looks for them, stats.json, LeRobot-recorded data without
rewards, and bad input (including corrupted bytes) as DatasetError."""

import json
import shutil
import tempfile
from pathlib import Path

import imageio_ffmpeg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robolearn.data.dataset import Dataset
from robolearn.data.formats import lerobot, load_dataset, save_dataset
from robolearn.errors import DatasetError

FPS = 20


def images(t: int, e: int, size: int = 16, channels: int = 3) -> np.ndarray:
    """Smooth frames (a drifting colour gradient): what a codec keeps well."""
    yy, xx = np.mgrid[0:size, 0:size] / size
    frames = [np.stack([96 + 80 * np.sin(2 * xx + 0.3 * k), 96 + 80 * np.cos(2 * yy + 0.2 * k + e),
                        np.full_like(xx, 60 + 20 * e)], -1) for k in range(t)]
    return np.asarray(frames, dtype=np.uint8)[..., :channels]


def make(count: int = 3, pixels: bool = False, gray: bool = False, metadata: dict | None = None) -> Dataset:
    """Episode e has T = 4 + 2e steps; even episodes terminate (success), odd ones time out."""
    rng = np.random.default_rng(7)
    out = []
    for e in range(count):
        t = 4 + 2 * e
        end = np.zeros(t, bool)
        end[-1] = True
        groups = {"policy": rng.normal(size=(t + 1, 5)).astype(np.float32),
                  "critic": rng.normal(size=(t + 1, 7))}  # float64 stays float64
        if pixels:
            groups["pixels"] = images(t + 1, e)
        if gray:
            groups["depthish"] = images(t + 1, e, size=8, channels=1)
        out.append({"observations": groups, "actions": rng.normal(size=(t, 3)).astype(np.float32),
                    "rewards": rng.normal(size=t).astype(np.float32), "terminations": end & (e % 2 == 0),
                    "truncations": end & (e % 2 == 1),
                    "infos": {"success": end & (e % 2 == 0), "intervention": rng.random(t) < 0.3,
                              "raw_action": rng.normal(size=(t, 3))}})
    meta = {"task": "cheetah-run", "ref_min_score": -1.5, "ref_max_score": 300.0, "fps": FPS}
    return Dataset.from_episodes(out, meta if metadata is None else metadata)


def assert_same(a: Dataset, b: Dataset, exact_groups: tuple[str, ...]) -> None:
    assert np.array_equal(a.lengths, b.lengths)
    for name in ("actions", "rewards", "terminations", "truncations"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
        assert getattr(a, name).dtype == getattr(b, name).dtype, name
    assert set(a.observations) == set(b.observations)
    for group in exact_groups:
        assert np.array_equal(a.observations[group], b.observations[group]), group
        assert a.observations[group].dtype == b.observations[group].dtype, group
    assert set(a.infos) == set(b.infos)
    for name, value in a.infos.items():
        assert np.array_equal(value, b.infos[name]) and value.dtype == b.infos[name].dtype, name


def test_state_round_trip_is_exact_through_the_format_dispatch(tmp_path):
    data = make()
    folder = save_dataset(data, tmp_path / "ds", format="lerobot", task="run fast")
    assert lerobot.detect(folder)
    again = load_dataset(folder, format="lerobot")
    assert_same(data, again, ("policy", "critic"))
    assert again.metadata == data.metadata and again.source == str(folder)
    with pytest.raises(DatasetError, match="never overwritten"):
        lerobot.write(data, folder)


def test_pixels_round_trip_through_mp4_within_tolerance_and_losslessly_as_png(tmp_path):
    data = make(pixels=True, gray=True)
    video = lerobot.read(lerobot.write(data, tmp_path / "video"))
    assert_same(data, video, ("policy", "critic", "depthish"))  # 1-channel images go to PNG even with video
    got, want = video.observations["pixels"].astype(int), data.observations["pixels"].astype(int)
    assert got.shape == want.shape and video.observations["pixels"].dtype == np.uint8
    assert np.abs(got - want).mean() < 4.0  # AV1 at LeRobot's CRF 30
    finals = data.step_starts[1:] + np.arange(data.num_episodes)
    assert np.array_equal(got[finals], want[finals])  # o_T sits in meta/episodes as PNG
    png = lerobot.read(lerobot.write(data, tmp_path / "png", video=False))
    assert_same(data, png, ("policy", "critic", "pixels", "depthish"))


def test_layout_is_where_lerobot_looks(tmp_path):
    data = make(pixels=True)
    root = lerobot.write(data, tmp_path / "ds", task="run fast")
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == ["data/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-000.parquet",
                     "meta/info.json", "meta/robolearn.json", "meta/stats.json", "meta/tasks.parquet",
                     "videos/observation.images.pixels/chunk-000/file-000.mp4"]
    info = json.loads((root / "meta/info.json").read_text())
    n, e = data.num_steps, data.num_episodes
    assert {k: v for k, v in info.items() if k != "features"} == {
        "codebase_version": "v3.0", "fps": FPS, "total_episodes": e, "total_frames": n, "total_tasks": 1,
        "chunks_size": 1000, "data_files_size_in_mb": 100, "video_files_size_in_mb": 200,
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4", "robot_type": None,
        "splits": {"train": f"0:{e}"}}
    features = info["features"]
    assert list(features) == ["observation.state", "observation.critic", "observation.images.pixels", "action",
                              "next.reward", "next.done", "next.truncated", "next.success",
                              "complementary_info.intervention", "complementary_info.raw_action", "timestamp",
                              "frame_index", "episode_index", "index", "task_index"]
    assert features["observation.state"] == {"dtype": "float32", "shape": [5], "names": None}
    assert features["observation.critic"]["dtype"] == "float64" and features["action"]["shape"] == [3]
    assert features["next.done"] == {"dtype": "bool", "shape": [1], "names": None}
    cam = features["observation.images.pixels"]
    assert cam["dtype"] == "video" and cam["shape"] == [16, 16, 3] and cam["names"] == ["height", "width", "channels"]
    assert {k: cam["info"][k] for k in ("video.height", "video.width", "video.codec", "video.pix_fmt", "video.fps",
                                        "video.channels", "has_audio", "is_depth_map")} == {
        "video.height": 16, "video.width": 16, "video.codec": "av1", "video.pix_fmt": "yuv420p", "video.fps": FPS,
        "video.channels": 3, "has_audio": False, "is_depth_map": False}

    # data: every non-video feature, in info.json's order, one row per step, one row group per episode
    data_file = pq.ParquetFile(root / "data/chunk-000/file-000.parquet")
    table = data_file.read()
    assert table.column_names == [k for k, v in features.items() if v["dtype"] != "video"]
    assert data_file.num_row_groups == e
    assert pa.types.is_fixed_size_list(table.schema.field("observation.state").type)
    assert table.schema.field("next.reward").type == pa.float32()
    hf = json.loads(table.schema.metadata[b"huggingface"])["info"]["features"]
    assert hf["observation.state"] == {"feature": {"dtype": "float32", "_type": "Value"}, "length": 5, "_type": "List"}
    col = {k: table.column(k).to_numpy() for k in ("index", "frame_index", "episode_index", "timestamp")}
    frame = np.concatenate([np.arange(t) for t in data.lengths])
    assert np.array_equal(col["index"], np.arange(n)) and np.array_equal(col["frame_index"], frame)
    assert np.array_equal(col["episode_index"], np.repeat(np.arange(e), data.lengths))
    assert col["timestamp"].dtype == np.float32 and np.allclose(col["timestamp"], frame / FPS)
    done = table.column("next.done").to_numpy(zero_copy_only=False)
    assert np.array_equal(np.flatnonzero(done), data.step_starts[1:] - 1)
    assert np.array_equal(table.column("next.truncated").to_numpy(zero_copy_only=False), data.truncations)
    assert np.array_equal(np.stack(table.column("observation.state").to_numpy(zero_copy_only=False)),
                          data.observations["policy"][data.obs_index])

    # meta/episodes: lengths, offsets into data/ and the video, per-episode stats, the final observation
    episodes = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
    assert episodes["episode_index"] == list(range(e)) and episodes["length"] == data.lengths.tolist()
    assert episodes["tasks"] == [["run fast"]] * e
    assert episodes["dataset_from_index"] == data.step_starts[:-1].tolist()
    assert episodes["dataset_to_index"] == data.step_starts[1:].tolist()
    assert set(episodes["data/chunk_index"]) == {0} and set(episodes["data/file_index"]) == {0}
    key = "videos/observation.images.pixels"
    assert np.allclose(episodes[f"{key}/from_timestamp"], data.step_starts[:-1] / FPS)
    assert np.allclose(episodes[f"{key}/to_timestamp"], data.step_starts[1:] / FPS)
    assert set(episodes["meta/episodes/chunk_index"]) == {0}
    assert episodes["stats/action/count"] == [[t] for t in data.lengths.tolist()]
    finals = data.step_starts[1:] + np.arange(e)
    assert np.allclose(episodes["final/observation.state"], data.observations["policy"][finals])
    assert "final/observation.images.pixels" in episodes
    # the video holds exactly one frame per data row (StreamingLeRobotDataset seeks index / fps)
    frames, _ = imageio_ffmpeg.count_frames_and_secs(root / "videos/observation.images.pixels/chunk-000/file-000.mp4")
    assert frames == n

    tasks = pq.read_table(root / "meta/tasks.parquet")
    assert tasks.to_pydict() == {"task_index": [0], "task": ["run fast"]}
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["task"]  # pandas: the index is "task"


def test_stats_are_exact(tmp_path):
    data = make(pixels=True)
    root = lerobot.write(data, tmp_path / "ds")
    stats = json.loads((root / "meta/stats.json").read_text())
    frames = {"observation.state": data.observations["policy"][data.obs_index], "action": data.actions,
              "next.reward": data.rewards[:, None], "next.done": (data.terminations | data.truncations)[:, None],
              "index": np.arange(data.num_steps)[:, None]}
    qs = [0.01, 0.10, 0.50, 0.90, 0.99]
    for key, x in frames.items():
        x = x.astype(np.float64)
        s = {k: np.asarray(v) for k, v in stats[key].items()}
        assert list(stats[key]) == ["min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"]
        assert np.allclose(s["mean"], x.mean(0)) and np.allclose(s["std"], x.std(0))
        assert np.allclose(s["min"], x.min(0)) and np.allclose(s["max"], x.max(0))
        assert s["count"].tolist() == [data.num_steps]
        assert np.allclose([s[f"q{int(q * 100):02d}"] for q in qs], np.quantile(x, qs, axis=0))
    # images: per channel, in [0, 1], shaped (3, 1, 1); every frame of these short episodes is in the sample
    px = data.observations["pixels"][data.obs_index].reshape(-1, 3) / 255.0
    s = {k: np.asarray(v) for k, v in stats["observation.images.pixels"].items()}
    assert s["mean"].shape == (3, 1, 1) and s["count"].tolist() == [data.num_steps]
    assert np.allclose(s["mean"].ravel(), px.mean(0)) and np.allclose(s["std"].ravel(), px.std(0))
    assert np.allclose(s["q10"].ravel(), np.quantile(px, 0.10, axis=0))
    assert np.allclose(s["max"].ravel(), px.max(0))
    # per-episode stats in meta/episodes
    episodes = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
    for ep in range(data.num_episodes):
        actions = data.episode(ep).actions.astype(np.float64)
        assert np.allclose(episodes["stats/action/mean"][ep], actions.mean(0))
        assert np.allclose(episodes["stats/action/q50"][ep], np.median(actions, 0))


def strip_to_lerobot_recording(root: Path) -> None:
    """What ``lerobot-record`` leaves: no rewards, no end flags, no final observation, no robolearn sidecar."""
    drop = ["next.reward", "next.done", "next.truncated"]
    data_file = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(data_file)
    pq.write_table(table.drop_columns(drop), data_file)
    info = json.loads((root / "meta/info.json").read_text())
    info["features"] = {k: v for k, v in info["features"].items() if k not in drop}
    (root / "meta/info.json").write_text(json.dumps(info))
    episodes_file = root / "meta/episodes/chunk-000/file-000.parquet"
    episodes = pq.read_table(episodes_file)
    pq.write_table(episodes.drop_columns([c for c in episodes.column_names if c.startswith("final/")]), episodes_file)
    (root / "meta/robolearn.json").unlink()


def test_lerobot_recordings_without_rewards_need_a_choice(tmp_path):
    data = make(pixels=True)
    root = lerobot.write(data, tmp_path / "ds", video=False)
    strip_to_lerobot_recording(root)
    with pytest.raises(DatasetError, match=r"no 'next.reward'.*rewards='zeros'"):
        lerobot.read(root)
    demo = lerobot.read(root, rewards="zeros")
    assert not demo.rewards.any() and not demo.terminations.any()
    assert np.array_equal(np.flatnonzero(demo.truncations), data.step_starts[1:] - 1)  # episodes on a timer
    assert np.array_equal(demo.actions, data.actions) and set(demo.observations) == {"policy", "critic", "pixels"}
    frames = data.obs_index
    assert np.array_equal(demo.observations["policy"][frames], data.observations["policy"][frames])
    finals = data.step_starts[1:] + np.arange(data.num_episodes)
    assert np.array_equal(demo.observations["pixels"][finals], data.observations["pixels"][finals - 1])  # repeated
    assert "repeated last frame" in demo.metadata["lerobot_final_observation"]
    assert demo.metadata["task"] == "cheetah-run" and demo.metadata["fps"] == FPS
    assert set(demo.infos) == {"success", "intervention", "raw_action"}  # next.success, complementary_info.*
    ended = lerobot.read(root, rewards="zeros", ends="termination")
    assert ended.terminations.sum() == data.num_episodes and not ended.truncations.any()


def test_split_files_and_chunks_read_back(tmp_path, monkeypatch):
    data = make(count=4, pixels=True)
    monkeypatch.setattr(lerobot, "_file_size_mb", lambda path: 1e9)  # every video file counts as full
    root = lerobot.write(data, tmp_path / "ds", chunks_size=2, data_files_size_in_mb=0.0001)
    assert sorted(str(p.relative_to(root / "data")) for p in (root / "data").rglob("*.parquet")) == [
        "chunk-000/file-000.parquet", "chunk-000/file-001.parquet", "chunk-001/file-000.parquet",
        "chunk-001/file-001.parquet"]
    assert len(list((root / "videos").rglob("*.mp4"))) == 4
    episodes = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
    assert episodes["videos/observation.images.pixels/from_timestamp"] == [0.0] * 4
    assert episodes["data/chunk_index"] == [0, 0, 1, 1] and episodes["data/file_index"] == [0, 1, 0, 1]
    again = lerobot.read(root)
    assert_same(data, again, ("policy", "critic"))
    assert np.abs(again.observations["pixels"].astype(int) - data.observations["pixels"]).mean() < 4.0


def rewrite(file: Path, change) -> None:
    pq.write_table(change(pq.read_table(file)), file)


def edit_info(root: Path, change) -> None:
    info = json.loads((root / "meta/info.json").read_text())
    change(info)
    (root / "meta/info.json").write_text(json.dumps(info))


def nan_action(table: pa.Table) -> pa.Table:
    actions = np.stack(table.column("action").to_numpy(zero_copy_only=False)).astype(np.float32)
    actions[5, 1] = np.nan
    column = pa.FixedSizeListArray.from_arrays(pa.array(actions.ravel()), 3)
    return table.set_column(table.column_names.index("action"), "action", column)


def inner_done(table: pa.Table) -> pa.Table:
    done = table.column("next.done").to_numpy(zero_copy_only=False).copy()
    done[1] = True
    return table.set_column(table.column_names.index("next.done"), "next.done", pa.array(done))


DATA = "data/chunk-000/file-000.parquet"


@pytest.mark.parametrize("damage, match", [
    (lambda r: (r / "meta/info.json").unlink(), r"meta/info.json is missing"),
    (lambda r: edit_info(r, lambda i: i.update(codebase_version="v2.1")), r"v2.1 dataset.*convert_dataset_v21_to_v30"),
    (lambda r: edit_info(r, lambda i: i.update(codebase_version="v4.0")), r"not v3"),
    (lambda r: edit_info(r, lambda i: i["features"]["observation.state"].update(shape=[6])),
     r"column 'observation.state' holds 5 values per row.*shape \[6\]"),
    (lambda r: edit_info(r, lambda i: i.update(fps="fast")), r"fps 'fast'"),
    (lambda r: shutil.rmtree(r / "meta/episodes"), r"meta/episodes has no parquet files"),
    (lambda r: (r / DATA).write_bytes((r / DATA).read_bytes()[:-100]), r"file-000.parquet: cannot read frame data"),
    (lambda r: (r / DATA).unlink(), r"file-000.parquet is missing"),
    (lambda r: rewrite(r / DATA, nan_action), r"column 'action' has NaN or inf \(episode 1, frame 1\)"),
    (lambda r: rewrite(r / DATA, inner_done), r"next.done is true inside episode 0"),
    (lambda r: rewrite(r / DATA, lambda t: t.drop_columns(["action"])), r"no columns \['action'\]"),
    (lambda r: (r / "meta/robolearn.json").write_text("[]"), r"robolearn.json is not robolearn's"),
    (lambda r: edit_info(r, lambda i: i.update(total_frames=3)), r"total_frames is 3"),
])  # fmt: skip
def test_bad_input_raises_dataset_error_naming_file_and_field(tmp_path, damage, match):
    root = lerobot.write(make(), tmp_path / "ds")
    damage(root)
    with pytest.raises(DatasetError, match=match):
        lerobot.read(root)


def test_bad_write_arguments(tmp_path):
    data = make(metadata={"task": "x"})
    with pytest.raises(DatasetError, match="no frame rate"):
        lerobot.write(data, tmp_path / "a")
    with pytest.raises(DatasetError, match="not a positive integer"):
        lerobot.write(data, tmp_path / "b", fps=12.5)
    odd = Dataset.from_episodes([{"observations": {"cam": np.zeros((3, 5, 5, 3), np.uint8)},
                                  "actions": np.zeros((2, 1)), "rewards": np.zeros(2),
                                  "terminations": [False, True], "truncations": [False, False]}])
    with pytest.raises(DatasetError, match="even height and width.*video=False"):
        lerobot.write(odd, tmp_path / "c", fps=10)
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no half-written folder left behind
    lerobot.read(lerobot.write(odd, tmp_path / "d", fps=10, video=False))


def test_detect(tmp_path):
    root = lerobot.write(make(), tmp_path / "ds")
    assert lerobot.detect(root) and not lerobot.detect(tmp_path) and not lerobot.detect(tmp_path / "nothing")
    edit_info(root, lambda i: i.update(codebase_version="v2.1"))
    assert not lerobot.detect(root)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    return lerobot.write(make(count=2, pixels=True), tmp_path_factory.mktemp("fuzz") / "ds")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_corrupted_bytes_give_a_dataset_or_a_dataset_error(written, data):
    files = sorted(p.relative_to(written) for p in written.rglob("*") if p.is_file())
    target = data.draw(st.sampled_from(files))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ds"
        shutil.copytree(written, root)
        raw = bytearray((root / target).read_bytes())
        if data.draw(st.booleans()):
            raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
        else:
            for _ in range(data.draw(st.integers(1, 4))):
                raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
        (root / target).write_bytes(bytes(raw))
        try:
            result = lerobot.read(root)
        except DatasetError:
            return
        assert isinstance(result, Dataset)
