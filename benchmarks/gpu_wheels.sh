#!/usr/bin/env bash
# The wheels a lent GPU machine lacks, downloaded here into the git-ignored .whl/ (carry it: `carry: [".whl"]`).
# That machine has Python 3.12 with torch (CUDA), JAX (CUDA), numpy, scipy, pandas, matplotlib, tensorboard, h5py,
# safetensors and pyyaml (../.library/device/KINDS.md), but not MuJoCo, Hydra, TensorDict or Gymnasium (the v5
# tasks read their models from its assets). The list is what `robolearn collect`, `train` and `bench` import beyond
# that image (read off sys.modules after a run here), at this venv's versions; rliable and arch make the bench's
# report there too. No torch, jax or numpy: the machine's CUDA builds must be the ones imported.
#
#   bash benchmarks/gpu_wheels.sh            # 29 MB: for benchmarks/gpu_suite.sh (MJX)
#   bash benchmarks/gpu_wheels.sh --offline  # 22 MB, no MJX: benchmarks/studies/gpu_fidelity.sh
# The scripts install them on the machine (pip --no-index --target /tmp/site). What travels is the working tree
# (about 37 MB) and the carried paths, 64 MiB in all: so mujoco-studio (13 MB, its Filament renderer) stays here.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
PKGS=(mujoco mujoco-core glfw PyOpenGL hydra-core omegaconf antlr4-python3-runtime tensordict pyvers gymnasium
      Farama-Notifications lz4 zstandard backports.zstd rliable arch)
if [ "${1:-}" != --offline ]; then PKGS+=(mujoco-mjx); fi
rm -rf .whl  # one version of each, and only this set
SPECS=()
for p in "${PKGS[@]}"; do
  v=$("$PY" -m pip show "$p" 2>/dev/null | sed -n 's/^Version: //p')
  [ -n "$v" ] || { echo "gpu_wheels: $p is not installed in $PY's environment (make test installs it)" >&2; exit 1; }
  SPECS+=("$p==$v")
done
mkdir -p .whl
PLATFORMS=()
for n in 2_39 2_35 2_34 2_31 2_28 2_27 2_24 2_17; do PLATFORMS+=(--platform "manylinux_${n}_x86_64"); done
for spec in "${SPECS[@]}"; do  # one at a time: a pure-Python sdist (antlr4-python3-runtime 4.9.3) is built here
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLATFORMS[@]}" --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$spec" 2>/dev/null \
    || "$PY" -m pip wheel -q --no-deps -w .whl "$spec"
done
du -sh .whl
