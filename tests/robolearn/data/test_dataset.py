"""robolearn.data.dataset: the flat episode dataset, its transition view (time-outs kept), save/load, bad input."""

import numpy as np
import pytest

from robolearn.data.dataset import Dataset
from robolearn.errors import DatasetError


def episodes(count: int = 3, obs_dim: int = 2) -> list[dict]:
    """Episode e has T = 4 + e steps, o_t = 100 e + t in every dimension; episode 0 terminates, the rest time out."""
    out = []
    for e in range(count):
        t = 4 + e
        obs = (100.0 * e + np.arange(t + 1, dtype=np.float32))[:, None].repeat(obs_dim, 1)
        end = np.zeros(t, bool)
        end[-1] = True
        out.append({"observations": {"policy": obs, "critic": obs * 2}, "actions": np.full((t, 1), e, np.float32),
                    "rewards": np.arange(t, dtype=np.float32), "terminations": end & (e == 0),
                    "truncations": end & (e != 0), "infos": {"success": end & (e == 0)}})
    return out


def test_transitions_keep_time_outs_and_never_cross_episodes():
    data = Dataset.from_episodes(episodes(), {"ref_min_score": 0.0, "ref_max_score": 12.0})
    assert (data.num_episodes, data.num_steps) == (3, 4 + 5 + 6)
    flat = data.transitions().arrays()
    # next_obs is always o_{t+1} of the same episode: one step ahead, never the next episode's o_0
    assert np.array_equal(flat["next_obs"] - flat["obs"], np.ones_like(flat["obs"]))
    # every step is a transition: the time-outs are kept (D4RL's qlearning_dataset drops them), flagged truncated
    assert flat["truncated"].sum() == 2 and flat["terminated"].sum() == 1 and len(flat["obs"]) == data.num_steps
    assert np.array_equal(data.transitions("critic").arrays()["obs"], flat["obs"] * 2)
    assert np.allclose(data.episode_returns(), [6, 10, 15])
    assert np.allclose(data.normalized_score([0.0, 12.0]), [0.0, 100.0])
    ep = data.episode(-1)
    assert len(ep) == 6 and ep.observations["policy"][0, 0] == 200 and ep.truncations[-1]
    batch = data.sample(64, np.random.default_rng(0))
    assert batch["obs"].shape == (64, 2) and np.array_equal(batch["next_obs"], batch["obs"] + 1)


def test_save_and_load_memory_mapped(tmp_path):
    data = Dataset.from_episodes(episodes(), {"task": "cheetah-run", "ref_min_score": np.float32(1.5)})
    folder = data.save(tmp_path / "ds")
    again = Dataset.load(folder)
    assert isinstance(again.actions, np.memmap) and again.metadata == {"task": "cheetah-run", "ref_min_score": 1.5}
    for key, value in data.transitions().arrays().items():
        assert np.array_equal(again.transitions().arrays()[key], value)
    assert np.array_equal(again.infos["success"], data.infos["success"])
    with pytest.raises(DatasetError, match="never overwritten"):
        data.save(folder)
    nested = Dataset(data.observations | {"arm/qpos": data.observations["policy"]}, data.actions, data.rewards,
                     data.terminations, data.truncations, data.lengths, {"sub/x": data.rewards})
    again = Dataset.load(nested.save(tmp_path / "nested"))  # nested Minari keys hold "/": escaped file names
    assert np.array_equal(again.observations["arm/qpos"], data.observations["policy"]) and "sub/x" in again.infos


def test_fingerprint_is_the_arrays_bits_not_the_metadata_or_folder(tmp_path):
    data = Dataset.from_episodes(episodes(), {"task": "cheetah-run"})
    print_ = data.fingerprint()
    assert len(print_) == 64 and Dataset.load(data.save(tmp_path / "ds")).fingerprint() == print_  # memory-mapped
    relabelled = Dataset(data.observations, data.actions, data.rewards, data.terminations, data.truncations,
                         data.lengths, data.infos, {"task": "other"})
    assert relabelled.fingerprint() == print_
    rewards = data.rewards.copy()
    rewards[3] = np.nextafter(rewards[3], np.float32(np.inf))  # one ulp in one reward
    assert Dataset(data.observations, data.actions, rewards, data.terminations, data.truncations, data.lengths,
                   data.infos).fingerprint() != print_


@pytest.mark.parametrize("damage, match", [
    (lambda f: (f / "rewards.npy").write_bytes((f / "rewards.npy").read_bytes()[:-7]), "truncated or corrupt"),
    (lambda f: (f / "actions.npy").unlink(), "actions.npy is missing"),
    (lambda f: (f / "dataset.json").write_text("{"), "corrupt"),
    (lambda f: (f / "dataset.json").unlink(), "not a robolearn dataset"),
    (lambda f: np.save(f / "rewards.npy", np.zeros(3, np.float32)), "the index says"),
])  # fmt: skip
def test_damaged_folders_raise_dataset_error(tmp_path, damage, match):
    folder = Dataset.from_episodes(episodes()).save(tmp_path / "ds")
    damage(folder)
    with pytest.raises(DatasetError, match=match):
        Dataset.load(folder)


def test_bad_episodes_raise_dataset_error_naming_the_field():
    def broken(**change):
        eps = episodes()
        eps[1].update(change)
        return eps

    t = 5
    cases = [
        (broken(rewards=np.full(t, np.nan, np.float32)), "rewards has NaN"),
        (broken(observations={"policy": np.full((t + 1, 2), np.inf), "critic": np.zeros((t + 1, 2))}),
         r"observations\['policy'\] has NaN or inf"),
        (broken(observations={"policy": np.zeros((t, 2)), "critic": np.zeros((t, 2))}), "T\\+1 observations"),
        (broken(truncations=np.zeros(t, bool)), "episode 1 has no end flag"),
        (broken(terminations=np.ones(t, bool), truncations=np.zeros(t, bool)), "end flags inside episodes"),
        (broken(actions=np.zeros((t, 3))), "do not stack"),
        (broken(observations={"policy": np.zeros((t + 1, 2))}), "observation groups"),
        ([{"observations": np.zeros((2, 1))}], "lacks"),
        ([], "no episodes"),
    ]
    for eps, match in cases:
        with pytest.raises(DatasetError, match=match):
            Dataset.from_episodes(eps, source="test")


def test_load_checks_values_on_request(tmp_path):
    """`save` checked the values; `load` trusts them unless asked (a file edited or copied from elsewhere)."""
    data = Dataset.from_episodes(episodes())
    folder = data.save(tmp_path / "ds")
    rewards = np.load(folder / "rewards.npy")
    rewards[3] = np.nan
    np.save(folder / "rewards.npy", rewards)
    assert Dataset.load(folder).num_steps == data.num_steps  # shapes and dtypes still match the index
    with pytest.raises(DatasetError, match=r"rewards has NaN or inf \(row 3\)"):
        Dataset.load(folder, check_values=True)


def test_replay_buffer_clips_actions_to_the_box(capsys):
    """A dataset that recorded raw Gaussian draws (|a| > 1) enters a learner's buffer clipped to [-1, 1], the
    actions the sims applied, with a note; in-box actions pass unchanged."""
    import torch

    from robolearn.data.dataset import to_replay_buffer

    eps = episodes()
    eps[1]["actions"] = np.full_like(eps[1]["actions"], 7.5)
    eps[2]["actions"] = np.full_like(eps[2]["actions"], -0.25)
    buffer = to_replay_buffer(Dataset.from_episodes(eps))
    assert "5 of 15 action entries lie outside [-1, 1] (up to 7.5); clipped" in capsys.readouterr().out
    actions = buffer.sample(256, torch.Generator().manual_seed(0))["actions"]
    assert float(actions.abs().max()) == 1.0 and (actions == -0.25).any() and (actions == 0.0).any()
