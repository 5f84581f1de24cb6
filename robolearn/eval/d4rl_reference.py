"""D4RL's reference returns, as data: ``REF_MIN_SCORE`` / ``REF_MAX_SCORE`` of ``d4rl/infos.py``
(Farama-Foundation/D4RL), by D4RL dataset id. `robolearn.eval.scores` normalises with them (`d4rl_reference`);
the D4RL reader (`robolearn.data.formats.d4rl`) puts them into a file's metadata.

These are facts copied from D4RL, not estimates: the random policy's and D4RL's expert's average return. infos.py
reuses one pair per robot for every gym-mujoco dataset (``<env>-random-v0``'s for random, medium, expert,
medium-replay, full-replay and medium-expert, v0 to v2), one per adroit task (``<task>-human-v0``'s for human,
cloned and expert, v0 and v1), and (0, 1) for every antmaze (v0, v2) and (0, 4) for kitchen.

    REF_SCORES["halfcheetah-medium-v2"]      # (-280.178953, 12135.0)
"""

from __future__ import annotations

#: gym-mujoco: one pair per robot for every dataset and version (infos.py reuses the ``<env>-random-v0`` pair)
GYM_MUJOCO = {"halfcheetah": (-280.178953, 12135.0), "hopper": (-20.272305, 3234.3),
              "walker2d": (1.629008, 4592.3), "ant": (-325.6, 3879.7)}
#: the gym-mujoco datasets of each version (v0 has no full-replay)
GYM_MUJOCO_DATASETS = {0: ("random", "medium", "expert", "medium-replay", "medium-expert"),
                       1: ("random", "medium", "expert", "medium-replay", "full-replay", "medium-expert"),
                       2: ("random", "medium", "expert", "medium-replay", "full-replay", "medium-expert")}
#: adroit: one pair per task, from ``<task>-human-v0``, reused for cloned / expert and for v1
ADROIT = {"pen": (96.262799, 3076.8331017826877), "hammer": (-274.856578, 12794.134825156867),
          "relocate": (-6.425911, 4233.877797728884), "door": (-56.512833, 2880.5693087298737)}
MAZE2D = {"maze2d-open-v0": (0.01, 20.66), "maze2d-umaze-v1": (23.85, 161.86),
          "maze2d-medium-v1": (13.13, 277.39), "maze2d-large-v1": (6.7, 273.99),
          "maze2d-open-dense-v0": (11.17817, 27.166538620695782),
          "maze2d-umaze-dense-v1": (68.537689, 193.66285642381482),
          "maze2d-medium-dense-v1": (44.264742, 297.4552547777125),
          "maze2d-large-dense-v1": (30.569041, 303.4857382709002)}
ANTMAZE_DATASETS = ("umaze", "umaze-diverse", "medium-play", "medium-diverse", "large-play", "large-diverse")
KITCHEN_DATASETS = ("complete", "partial", "mixed")


def _ref_scores() -> dict[str, tuple[float, float]]:
    """Every D4RL dataset id with its (ref_min_score, ref_max_score), as infos.py defines them."""
    scores: dict[str, tuple[float, float]] = dict(MAZE2D)
    for env, ref in GYM_MUJOCO.items():
        for version, datasets in GYM_MUJOCO_DATASETS.items():
            scores.update({f"{env}-{dset}-v{version}": ref for dset in datasets})
    for task, ref in ADROIT.items():
        for version in (0, 1):
            scores.update({f"{task}-{dset}-v{version}": ref for dset in ("human", "cloned", "expert")})
    scores.update({f"antmaze-{dset}-v{version}": (0.0, 1.0) for dset in ANTMAZE_DATASETS for version in (0, 2)})
    scores.update({f"kitchen-{dset}-v0": (0.0, 4.0) for dset in KITCHEN_DATASETS})
    return scores


#: D4RL dataset id -> (ref_min_score, ref_max_score), from d4rl/infos.py
REF_SCORES: dict[str, tuple[float, float]] = _ref_scores()

__all__ = ["ADROIT", "ANTMAZE_DATASETS", "GYM_MUJOCO", "GYM_MUJOCO_DATASETS", "KITCHEN_DATASETS", "MAZE2D",
           "REF_SCORES"]
