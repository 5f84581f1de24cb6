"""`robolearn chunk-bc`, `robolearn flow-rl` and `robolearn dsrl`: action-chunk policies from the command line.

    robolearn chunk-bc dataset=data/arm-push-demos out=runs/arm-push-bc bc.chunk=5 bc.num_steps=4 bc.steps=6000
    robolearn flow-rl checkpoint=runs/arm-push-bc run_dir=runs/arm-push-ppo rl.iterations=100
    robolearn flow-rl resume=runs/arm-push-ppo rl.iterations=200        # go on
    robolearn dsrl checkpoint=runs/arm-push-bc run_dir=runs/arm-push-dsrl iterations=100

Each command makes one library call with its settings (`robolearn.runners.chunk`: the jobs and their schemas).
"""

from __future__ import annotations

from robolearn.runners.chunk import ChunkBCJob, DSRLJob, FlowRLJob, clone_chunk_policy, run_dsrl, run_flow_rl


def cmd_chunk_bc(cfg: ChunkBCJob) -> int:
    """Behaviour-clone a flow / diffusion action-chunk policy from a dataset."""
    clone_chunk_policy(cfg)
    return 0


def cmd_flow_rl(cfg: FlowRLJob) -> int:
    """PPO / GRPO fine-tuning of a flow (or VLA) chunk policy in the batched sim (pi_RL)."""
    run_flow_rl(cfg)
    return 0


def cmd_dsrl(cfg: DSRLJob) -> int:
    """SAC over a frozen flow / diffusion chunk policy's initial noise (DSRL); writes the steered policy."""
    run_dsrl(cfg)
    return 0
