"""Supervised warm-up, then RL from the verifiable reward, for the tiny addition transformer.

    from examples.char_lm.rl import LMConfig, train_addition
    history = train_addition(LMConfig(estimator="grpo"))   # [{"iteration", "accuracy", ...}, ...]

One RL iteration samples `group_size` answers to each of `prompts` prompts (temperature 1), scores them (reward 1
on the last answer token when the whole answer is right), and turns the rewards into per-token advantages with
`robolearn.core.advantages.compute_advantages`: an outcome estimator (GRPO, Dr. GRPO, RLOO, Lite PPO, REINFORCE++ ...)
with `group_ids` = the prompt, or "gae" with the model's value head (PPO; gamma 1, the value of the state after
the end token is 0). Then `epochs` passes of `robolearn.core.losses.ppo_clip_loss` (clip-higher, dual clip, token-mean
aggregation) plus `kl_coef` times the k3 estimate of KL to the warm-up model and, for PPO, `value_loss`. These are
the functions PPO on robots calls (`robolearn.algos.online.ppo`): a step here is a token, a group the same prompt.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any

import torch

from examples.char_lm.model import TinyGPT
from examples.char_lm.task import EOS, VOCAB, AdditionTask
from robolearn.core.advantages import compute_advantages
from robolearn.core.losses import agg_loss, kl_estimate, ppo_clip_loss, value_loss
from robolearn.errors import ConfigError


@dataclasses.dataclass
class LMConfig:
    digits: int = 2
    dim: int = 64
    layers: int = 2
    heads: int = 4
    seed: int = 0
    sft_steps: int = 300            # supervised warm-up on `sft_examples` fixed problems
    sft_examples: int = 256
    sft_batch: int = 64
    sft_lr: float = 3e-3
    estimator: str = "grpo"         # any robolearn.core.advantages estimator; "gae" trains the value head (PPO)
    iterations: int = 40
    prompts: int = 32               # prompts per iteration
    group_size: int = 8             # answers sampled per prompt (the GRPO group)
    epochs: int = 2                 # passes of the clipped loss over each batch
    lr: float = 1e-3
    clip_low: float = 0.2
    clip_high: float = 0.28         # clip-higher (DAPO)
    dual_clip: float | None = 3.0
    agg: str = "token-mean"
    kl_coef: float = 0.0            # k3 KL to the warm-up model
    value_coef: float = 0.5         # PPO's value loss weight
    lam: float = 0.95               # GAE lambda (gamma is 1: an episode is one answer)
    eval_problems: int = 512
    eval_every: int = 5


def sample(model: TinyGPT, prompts: torch.Tensor, length: int, generator: torch.Generator | None,
           greedy: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Answers [N, length] continuing `prompts` [N, P] token by token, and their log-probabilities [N, length]."""
    tokens = prompts
    logps = []
    with torch.no_grad():
        for _ in range(length):
            logits = model(tokens)[0][:, -1].log_softmax(-1)
            nxt = logits.argmax(-1) if greedy else torch.multinomial(logits.exp(), 1, generator=generator).squeeze(-1)
            logps.append(logits.gather(-1, nxt[:, None]).squeeze(-1))
            tokens = torch.cat([tokens, nxt[:, None]], 1)
    return tokens[:, prompts.shape[1]:], torch.stack(logps, 1)


def response_mask(responses: torch.Tensor) -> torch.Tensor:
    """[N, L] True up to and including the first end token (everything when there is none)."""
    ended = (responses == EOS).long().cumsum(1)
    return (ended == 0) | ((ended == 1) & (responses == EOS))


def token_logp(model: TinyGPT, prompts: torch.Tensor, responses: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(response token | prefix) [N, L] and the value of each response token's prefix [N, L] (or None)."""
    tokens = torch.cat([prompts, responses], 1)
    logits, values = model(tokens[:, :-1])
    p = prompts.shape[1] - 1
    logp = logits[:, p:].log_softmax(-1).gather(-1, responses[..., None]).squeeze(-1)
    return logp, (values[:, p:] if values is not None else None)


@torch.no_grad()
def accuracy(model: TinyGPT, task: AdditionTask, pairs: torch.Tensor, prompts: torch.Tensor) -> float:
    """Exact-answer rate of greedy decoding."""
    responses, _ = sample(model, prompts, task.answer_len, None, greedy=True)
    return float(task.reward(pairs, responses).mean())


def warm_up(model: TinyGPT, task: AdditionTask, cfg: LMConfig, generator: torch.Generator) -> None:
    """Next-token cross-entropy on the answers of `sft_examples` fixed problems (a small demonstration set)."""
    pairs, prompts = task.sample(cfg.sft_examples, generator)
    answers = task.answer(pairs)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.sft_lr)
    for _ in range(cfg.sft_steps):
        idx = torch.randint(0, cfg.sft_examples, (cfg.sft_batch,), generator=generator)
        logp, _ = token_logp(model, prompts[idx], answers[idx])
        loss = -logp.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def rl_step(model: TinyGPT, reference: TinyGPT, opt: torch.optim.Optimizer, task: AdditionTask, cfg: LMConfig,
            generator: torch.Generator) -> dict[str, float]:
    """One iteration: sample groups, advantages from `robolearn.core.advantages`, `epochs` clipped-loss steps."""
    pairs, prompts = task.sample(cfg.prompts, generator)
    pairs, prompts = pairs.repeat_interleave(cfg.group_size, 0), prompts.repeat_interleave(cfg.group_size, 0)
    group_ids = torch.arange(cfg.prompts).repeat_interleave(cfg.group_size)
    model.eval()
    responses, old_logp = sample(model, prompts, task.answer_len, generator)
    mask = response_mask(responses)
    correct = task.reward(pairs, responses)
    last = mask.long().sum(1) - 1                                   # the outcome sits on the last valid token
    rewards = torch.zeros(responses.shape, dtype=torch.float32).scatter_(1, last[:, None], correct[:, None])
    if cfg.estimator == "gae":
        with torch.no_grad():
            _, old_values = token_logp(model, prompts, responses)
        values = torch.cat([old_values * mask, torch.zeros(len(responses), 1)], 1)  # 0 after the answer
        dones = torch.zeros_like(mask).scatter_(1, last[:, None], True)
        adv, returns = compute_advantages("gae", rewards=rewards, values=values, mask=mask, dones=dones, gamma=1.0,
                                          lam=cfg.lam, normalize=True)
    else:
        adv, _ = compute_advantages(cfg.estimator, rewards=rewards, mask=mask, group_ids=group_ids)
    with torch.no_grad():
        ref_logp, _ = token_logp(reference, prompts, responses)
    model.train()
    stats: dict[str, float] = {}
    for _ in range(cfg.epochs):
        logp, new_values = token_logp(model, prompts, responses)
        loss, info = ppo_clip_loss(logp, old_logp, adv, mask, cfg.clip_low, cfg.clip_high, cfg.dual_clip, cfg.agg)
        kl = agg_loss(kl_estimate(logp, ref_logp, "k3"), mask)
        loss = loss + cfg.kl_coef * kl
        if cfg.estimator == "gae":
            loss = loss + cfg.value_coef * value_loss(new_values, old_values, returns, mask)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        stats = {"loss": loss.item(), "kl": kl.item(), "clip_fraction": float(info["clip_fraction"])}
    return {"reward": float(correct.mean()), **stats}


def train_addition(cfg: LMConfig | None = None, progress: bool = False) -> list[dict[str, Any]]:
    """Warm up, then `iterations` of RL; returns one row per evaluation (iteration 0 = after the warm-up) with the
    greedy accuracy on held-out problems, the sampled answers' mean reward and the wall time so far."""
    cfg = cfg if cfg is not None else LMConfig()
    if cfg.dim % cfg.heads:
        raise ConfigError(f"dim ({cfg.dim}) must be a multiple of heads ({cfg.heads})")
    torch.manual_seed(cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    task = AdditionTask(cfg.digits)
    model = TinyGPT(len(VOCAB), task.prompt_len + task.answer_len, cfg.dim, cfg.layers, cfg.heads,
                    value_head=cfg.estimator == "gae")
    eval_pairs, eval_prompts = task.sample(cfg.eval_problems, torch.Generator().manual_seed(10_000 + cfg.seed))
    start = time.perf_counter()
    warm_up(model, task, cfg, generator)
    reference = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    history = [{"iteration": 0, "accuracy": accuracy(model, task, eval_pairs, eval_prompts),
                "wall_s": time.perf_counter() - start}]
    for it in range(1, cfg.iterations + 1):
        row = rl_step(model, reference, opt, task, cfg, generator)
        if it % cfg.eval_every == 0 or it == cfg.iterations:
            history.append({"iteration": it, "accuracy": accuracy(model, task, eval_pairs, eval_prompts),
                            "wall_s": time.perf_counter() - start, **row})
            if progress:
                print(history[-1], flush=True)
    return history
