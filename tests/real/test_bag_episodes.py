"""Robot episodes on disk: an episode without an end flag is refused, a bag that ends mid-episode gives a truncated
last step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from robolearn.data.episodes import Episode, load_episodes, save_episodes
from robolearn.errors import DatasetError


def _episode(terminations: list[bool], truncations: list[bool], **metadata) -> Episode:
    t = len(terminations)
    return Episode(observations=np.zeros((t + 1, 2)), actions=np.zeros((t, 1)), rewards=np.zeros(t),
                   terminations=terminations, truncations=truncations, metadata=metadata)


def test_an_episode_without_an_end_flag_is_refused(tmp_path):
    _episode([False, True], [False, False])
    _episode([False, False], [False, True])
    with pytest.raises(DatasetError, match=r"episode 7 of run\.bag \(T=2 steps\) has no end flag.*truncations\[-1\]"):
        _episode([False, False], [False, False], episode_id=7, source="run.bag")
    # a file holding one (written before the rule, or by another tool) names the file
    ok = _episode([False, True], [False, False])
    save_episodes(tmp_path / "d", [ok])
    file = tmp_path / "d" / "episode_000000.safetensors"
    ok.terminations[-1] = False  # bypass the constructor's check, as an old writer would have
    file.write_bytes(ok.to_bytes())
    with pytest.raises(DatasetError, match=f"{file.name}: episode .*no end flag"):
        load_episodes(tmp_path / "d")


def _bag_cut_mid_episode(path: Path) -> None:
    """Six ticks: episode 0 (ticks 0-2) ends terminated, episode 1 (ticks 3-5) is still running when the bag ends."""
    from real.recorder import Recorder
    from real.transport.memory import FakeClock, MemoryBus, MemoryTransport

    clock = FakeClock(1_000_000_000)
    with Recorder(MemoryTransport(MemoryBus(), clock), path, [], clock_offset_ns=0) as rec:
        for k in range(6):
            rec.record_tick(clock(), [0.0], [0.0], intervention=False, policy_version=0, reward=1.0,
                            episode=0 if k < 3 else 1, done="terminated" if k == 2 else None, observation=[float(k)])
            clock.advance(0.1)


def test_a_bag_ending_mid_episode_gives_a_truncated_last_step(tmp_path):
    from real.bag2dataset import bag_to_episodes

    _bag_cut_mid_episode(tmp_path / "bag")
    first, second = bag_to_episodes(tmp_path / "bag")
    assert first.terminations[-1] and not first.truncations.any()
    assert np.array_equal(second.observations[:, 0], [3.0, 4.0, 5.0])
    assert second.truncations.tolist() == [False, True] and not second.terminations.any()
