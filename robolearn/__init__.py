"""robolearn's learning core, in packages by role: `commands/` (the CLI), `config/` (composition and schemas),
`algos/` (the learner protocol, the registry and one file per algorithm), `runners/` (the loops and the jobs that
build them), `eval/`, `checkpoints/`, `core/` (advantages, losses, buffers), `data/` (datasets and formats),
`collect/` (dataset generation) and `bench/` (suites and reports)."""

__version__ = "0.1.0"
