#!/usr/bin/env bash
# robolearn's GPU benchmark suite in one command, for a lent NVIDIA H100/H200 (finishes in under 8 minutes):
# MJX throughput, MJX-vs-C smoke, PPO wall-clock to a return of 800 on cartpole-swingup, SAC/IQL updates/s.
# The parts and what they measure: benchmarks/speed/gpu_suite.py. Results: JSON under $OUT (default ./gpu_out),
# each part's file written as soon as it has numbers, plus suite.log and summary.json.
#
#   bash benchmarks/gpu_suite.sh            # on the GPU machine; carry .whl (the wheels it lacks, see below)
#   bash benchmarks/gpu_suite.sh --quick    # tiny sizes on a CPU (here: .venv/bin/python), < 3 minutes warm
#
# Why each part is its own process under `timeout`: one part's crash, hang or slow compile still leaves the
# others' results, and the suite's total stays inside its budget (SUITE_BUDGET_S, seconds, default 455, counted
# after the ~10 s of set-up).
# The GPU machine has no mujoco, mujoco-mjx, hydra-core, omegaconf, tensordict: they travel as wheels in the
# git-ignored .whl/ (no jax, numpy or torch among them, so the machine's CUDA builds are the ones imported), which
# `bash benchmarks/gpu_wheels.sh` fills.
set -uo pipefail
cd "$(dirname "$0")/.."

QUICK=""
if [[ "${1:-}" == "--quick" ]]; then QUICK="--quick"; fi
OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
export OUT
exec > >(tee -a "$OUT/suite.log") 2>&1

source benchmarks/gpu_env.sh  # PY, and the wheels installed where the packages are missing (the GPU machine)
gpu_env mujoco.mjx hydra omegaconf tensordict

export PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false            # JAX shares the GPU with torch: allocate on demand
export ROBOLEARN_JAX_CACHE="${ROBOLEARN_JAX_CACHE:-/tmp/robolearn_jax_cache}"  # persistent compilation cache
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-1}"
# On a shared CPU, torch's default of one OpenMP thread per core crawls (SAC: 2 instead of 70 updates/s here).
if [[ -n "$QUICK" ]]; then export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"; fi

echo "gpu_suite ${QUICK:-full} $(date -u +%FT%TZ) python=$PY out=$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>/dev/null \
  || echo "nvidia-smi: none"
"$PY" -c "import sys, jax, torch, mujoco; print(sys.version.split()[0], 'jax', jax.__version__, jax.devices(),
         'torch', torch.__version__, torch.cuda.is_available(), 'mujoco', mujoco.__version__)" 2>&1 | grep -v Warp

START=$(date +%s)
TOTAL=${SUITE_BUDGET_S:-455}
RCS=""

# run_part PART HARD_LIMIT_S: the part gets its hard limit (cut to what the suite has left) and, as its own
# budget for skipping sizes, that minus 12 s (so it ends by itself, writing its JSON, before `timeout` strikes).
run_part() {
  local part=$1 hard=$2 left
  left=$(( START + TOTAL - $(date +%s) ))
  if (( left < hard )); then hard=$left; fi
  if (( hard < 20 )); then
    echo "=== $part: skipped, the suite's ${TOTAL} s are spent"
    RCS+="$part=skipped "
    return
  fi
  echo "=== $part: hard limit ${hard} s ($(date +%T))"
  timeout -k 5 "$hard" "$PY" benchmarks/speed/gpu_suite.py --part "$part" --budget $(( hard - 12 )) $QUICK
  local rc=$?
  RCS+="$part=$rc "
  echo "=== $part: exit $rc after $(( $(date +%s) - START )) s of the suite"
}

# Hard limits (s), each cut to what the suite has left; the last part gets all that is left (~90 s at worst).
# PARTS picks and orders the parts (a rerun of what a first run's budget cut: PARTS="offpolicy mjx"
# GPU_SUITE_SIZES=65536 SUITE_BUDGET_S=400); the part named last gets all that is left.
PARTS="${PARTS:-mjx smoke ppo offpolicy}"
declare -A LIMIT
if [[ -n "$QUICK" ]]; then LIMIT=([mjx]=150 [smoke]=60 [ppo]=55 [offpolicy]=120); else
  LIMIT=([mjx]=175 [smoke]=55 [ppo]=135 [offpolicy]=300); fi
LAST="${PARTS##* }"
for part in $PARTS; do
  if [[ "$part" == "$LAST" ]]; then run_part "$part" 9999; else run_part "$part" "${LIMIT[$part]}"; fi
done
"$PY" benchmarks/speed/gpu_suite.py --part summary --rcs "$RCS"
echo "gpu_suite done in $(( $(date +%s) - START )) s: $RCS"
ls -la "$OUT"
sleep 1  # let tee write the end of suite.log
