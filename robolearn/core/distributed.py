"""Data-parallel training across processes, GPUs and hosts with `torchrun` (torch.distributed, nothing home-made).

    torchrun --nproc_per_node=2 -m robolearn train env=cartpole-swingup algo=ppo            # 2 processes, CPU: gloo
    torchrun --nproc_per_node=8 -m robolearn train env=ant-velocity device=cuda             # 8 GPUs: NCCL
    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=8 --rdzv_backend=c10d \\
        --rdzv_endpoint=head-node:29500 -m robolearn train ...                               # two hosts (each runs it)

`torchrun` starts one process per rank and sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and the rendezvous; `setup`
joins the process group (NCCL on CUDA devices, gloo on the CPU). As rsl_rl and IsaacLab do it, every rank is a
whole training process with its own env block (``env.num_envs`` envs per rank, seeded `rank_seed`, so no two
ranks share a random stream) on its own device (``cuda:<LOCAL_RANK>`` for ``device=cuda``); the learners start
from rank 0's parameters (`broadcast_`) and every gradient step averages the gradients of all ranks
(`robolearn.algos.common.gradient_step` calls `average_`), so the parameters stay identical on every rank. The
batched critic ensembles need no DDP wrapper: their gradients are tensors like any other. PPO also averages the
minibatch KL that adapts its learning rate and merges the observation normalisers' statistics of all ranks
(`merge_moments`), so those stay identical too.

Rank 0 writes the run's `config.yaml`, `metrics.jsonl` (with `world_size` and `env_steps_all_ranks`), TensorBoard
and the checkpoints a policy loads from. Every other rank checkpoints its own training state (env, RNGs, replay
buffer) under ``<run_dir>/ranks/rank<k>/``, atomically as every checkpoint is written, so `robolearn train
resume=<run_dir>` under the same `torchrun` command restores every rank exactly.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from robolearn.errors import ConfigError

#: Added to the run's seed per rank: rank 0 keeps the seed, so a one-process run is the solo run.
RANK_SEED_STRIDE = 1_000_003


@dataclasses.dataclass(frozen=True)
class Ranks:
    """This process's place in the job."""

    rank: int
    local_rank: int
    world_size: int

    @property
    def main(self) -> bool:
        """Rank 0: the one that logs and writes the run's own checkpoints."""
        return self.rank == 0


def launched() -> bool:
    """Whether `torchrun` started this process as one of several ranks."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def setup(device: str, timeout_s: float = 300.0) -> Ranks:
    """Join the process group `torchrun` describes (NCCL for CUDA devices, else gloo) once; this process's ranks."""
    if not launched():
        raise ConfigError("distributed training needs torchrun (WORLD_SIZE > 1), e.g. "
                          "`torchrun --nproc_per_node=2 -m robolearn train ...`")
    ranks = Ranks(int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0")), int(os.environ["WORLD_SIZE"]))
    if not dist.is_initialized():
        cuda = torch.device(device).type == "cuda"
        if cuda:
            torch.cuda.set_device(ranks.local_rank)
        dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=timeout_s))
    return ranks


def active() -> bool:
    """Whether this process trains as one of several ranks (a process group of more than one is up)."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank_device(device: str, ranks: Ranks) -> str:
    """``cuda`` becomes this rank's GPU, ``cuda:<LOCAL_RANK>``; any other device is kept."""
    return f"cuda:{ranks.local_rank}" if device == "cuda" else device


def rank_seed(seed: int, ranks: Ranks) -> int:
    """The seed of this rank's envs and random streams (rank 0: `seed` itself).

    ``ROBOLEARN_RANK_SEED_STRIDE=0`` gives every rank the same seed, hence the same data: the averaged gradient is
    then each rank's own, and the job must reproduce the one-process run exactly (how the tests check the
    data-parallel path). Never useful for training."""
    stride = int(os.environ.get("ROBOLEARN_RANK_SEED_STRIDE", RANK_SEED_STRIDE))
    return seed + stride * ranks.rank


def rank_dir(run_dir: Path, ranks: Ranks) -> Path:
    """Where this rank keeps its own checkpoints: the run folder for rank 0, ``ranks/rank<k>`` inside it otherwise."""
    return run_dir if ranks.main else run_dir / "ranks" / f"rank{ranks.rank}"


def average_(tensors: list[torch.Tensor]) -> None:
    """Replace each tensor by its mean over all ranks (one all-reduce of them flattened together)."""
    if not tensors:
        return
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for t in tensors:
        t.copy_(flat[offset:offset + t.numel()].view_as(t))
        offset += t.numel()


def mean(value: torch.Tensor) -> torch.Tensor:
    """The mean of a tensor over all ranks (a new tensor)."""
    out = value.detach().clone()
    average_([out])
    return out


def broadcast_(tensors: dict[str, torch.Tensor]) -> None:
    """Overwrite every tensor in place with rank 0's (the learners' starting parameters)."""
    with torch.no_grad():
        for t in tensors.values():
            dist.broadcast(t, src=0)


def merge_moments(mean_: torch.Tensor, var: torch.Tensor, count: float
                  ) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The mean, population variance and count of the union of every rank's samples, from each rank's own."""
    n = torch.tensor(float(count), dtype=torch.float64, device=mean_.device)
    m = mean_.to(torch.float64)
    stats = torch.cat([n.reshape(1), n * m, n * (var.to(torch.float64) + m * m)])
    dist.all_reduce(stats)
    total = float(stats[0])
    union_mean = stats[1:1 + m.numel()] / total
    union_var = stats[1 + m.numel():] / total - union_mean * union_mean
    return union_mean.to(mean_.dtype).view_as(mean_), union_var.clamp_min(0).to(var.dtype).view_as(var), total


def _comm_device() -> torch.device:
    """Where small control tensors go for a collective: the current GPU under NCCL, else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def broadcast_text(text: str | None) -> str:
    """Rank 0's string on every rank (the run folder rank 0 chose), sent as bytes in a tensor (nothing pickled)."""
    device = _comm_device()
    data = torch.tensor(list((text or "").encode()), dtype=torch.uint8, device=device)
    size = torch.tensor([data.numel()], dtype=torch.int64, device=device)
    dist.broadcast(size, src=0)
    if dist.get_rank() != 0:
        data = torch.empty(int(size), dtype=torch.uint8, device=device)
    dist.broadcast(data, src=0)
    return bytes(data.cpu().tolist()).decode()


def check_same(value: int, what: str) -> None:
    """Raise unless every rank holds the same `value` (e.g. the iteration each restored from its checkpoint)."""
    device = _comm_device()
    low = torch.tensor([value], dtype=torch.int64, device=device)
    high = low.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    if int(low) != int(high):
        raise ConfigError(f"the ranks disagree on {what}: {int(low)} to {int(high)} (their checkpoints were written at "
                          "different times, e.g. a rank died while saving): resume from a checkpoint all ranks share")


def barrier() -> None:
    if active():
        dist.barrier()


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def describe(ranks: Ranks | None) -> dict[str, Any]:
    """What a run's metrics and config record about the job's layout."""
    return {"world_size": ranks.world_size if ranks else 1}
