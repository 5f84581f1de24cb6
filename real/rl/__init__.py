"""Real-world RL: an actor on the robot, a learner on a GPU box, linked over gRPC (see `real.rl.link`).

`real.rl.codec` defines the payloads (safetensors + JSON headers, framed), `real.rl.link` the
`LearnerServer` / `ActorClient` pair, `real.rl.learner` the SAC learner process (``robolearn learner``) and
`real.rl.actor` the robot side (``robolearn actor``).
"""
