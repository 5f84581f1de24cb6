"""A tiny token-level RL trainer: proof that a language model and a robot learn from one advantage module.

A character-level transformer (`model.TinyGPT`) learns multi-digit addition (`task`): supervised warm-up on a few
examples, then RL from the verifiable reward (1 for an exact answer) with GRPO, RLOO, Lite PPO ... or PPO with a
token-level critic (`rl`). The advantages come from `robolearn.core.advantages` and the losses from
`robolearn.core.losses`,
the same functions PPO on robots calls; only what a step (a token) and a group (the same prompt) are differs.
"""
