#!/usr/bin/env bash
# Issue 33's CQL and ReBRAC fidelity cells on a lent GPU, in one call. On this 2-core CPU they cost over 20 and 4.3
# core-hours a dataset at the fidelity bench's 100K steps (docs/offline-rl.md); BC, TD3+BC and IQL run here.
#
#   bash benchmarks/gpu_wheels.sh --offline                 # here, once: the wheels the machine lacks (.whl/)
#   device run: bash benchmarks/studies/gpu_fidelity.sh     # carry [".whl"], timeout_s 600
#   here: mkdir -p runs/offline_fidelity_v5_gpu && tar xzf <files_at>/gpu_fidelity.tgz -C runs/offline_fidelity_v5_gpu
#         robolearn bench report out=runs/offline_fidelity_v5_gpu
#   QUICK=1 bash benchmarks/studies/gpu_fidelity.sh         # a dry run on a CPU: one small dataset, 20 steps, eager
#                                                           # (1 minute here); PLAN=1: print the bench command only
#
# 1. Makes the datasets there from the committed behaviour folders, one `robolearn collect` process each, all at
#    once, on a suite YAML holding one of the mujoco-v5 suite's datasets with the suite's fingerprints; JAX on the
#    CPU as here. Each says whether its dataset is bit for bit the suite's recorded one: the suite's reproducibility
#    on another kind of CPU (the H200 machines have Intel Xeons; the fingerprints were made on an AMD EPYC).
# 2. Runs `robolearn bench suite=offline-fidelity-v5 pack_seeds=true` for ALGOS x DATASETS with the learners on the
#    GPU (`device=cuda`), every pack at once (WORKERS, 2 CPU threads each), under the time left of BUDGET_S. Cells
#    that fail compiled (torch.compile on CUDA is unverified here) run again eager in the time left.
# 3. Writes $OUT/gpu_fidelity.tgz (the bench folder without checkpoints: cells, each seed's metrics.jsonl and
#    config, logs, report; the datasets' collect logs and suite.json records), gpu_fidelity.log and bench.log:
#    whatever finished, also when the budget cut the rest (each pack's evaluations every 10K steps are in its
#    metrics). Run again on the warm machine (its runs/ and data/ stay), it goes on: made datasets are kept, cells
#    resume from their checkpoints (every 10K steps).
# Env: ALGOS ("cql rebrac"), DATASETS (halfcheetah-v5 and hopper-v5 medium and medium-replay), STEPS (100000),
# WORKERS (one per pack), BUDGET_S (seconds for the whole script, default 540).
set -uo pipefail
cd "$(dirname "$0")/../.."
START=$(date +%s)
OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_fidelity.log") 2>&1
source benchmarks/gpu_env.sh  # PY, and the wheels installed where the packages are missing (the GPU machine)
gpu_env mujoco hydra omegaconf tensordict gymnasium
export PYTHONUNBUFFERED=1 JAX_PLATFORMS=cpu OMP_NUM_THREADS=2  # JAX: the C engine's resets and evaluations, as here
export TORCHINDUCTOR_COMPILE_THREADS=2  # 8 packs compiling at once on 16 cores: not 16 compile workers each

ALGOS="${ALGOS:-cql rebrac}"
DATASETS="${DATASETS:-halfcheetah-v5-medium hopper-v5-medium halfcheetah-v5-medium-replay hopper-v5-medium-replay}"
STEPS="${STEPS:-100000}"
BUDGET_S="${BUDGET_S:-540}"
DEVICE=cuda
EXTRA=""
if [[ -n "${QUICK:-}" ]]; then  # the dry run: the smallest dataset, a few steps, no compile, on the CPU
  ALGOS="${QUICK_ALGOS:-cql}" DATASETS=hopper-v5-medium-replay STEPS=20 DEVICE=cpu
  EXTRA=",runner.eval_every=20,runner.eval_episodes=1,runner.log_every=10,algo.compile=false"
fi
read -ra algos <<< "$ALGOS"
read -ra datasets <<< "$DATASETS"
WORKERS="${WORKERS:-$(( ${#algos[@]} * ${#datasets[@]} ))}"
BENCH=(bench suite=offline-fidelity-v5 pack_seeds=true "workers=$WORKERS" "algos=[$(IFS=,; echo "${algos[*]}")]"
       "datasets=[$(IFS=,; echo "${datasets[*]}")]" out=runs/offline_fidelity_v5_gpu)
OVERRIDES="runner.gradient_steps=$STEPS,device=$DEVICE$EXTRA"
echo "gpu_fidelity $(date -u +%FT%TZ) algos=[$ALGOS] datasets=[$DATASETS] steps=$STEPS workers=$WORKERS out=$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: none"
grep -m1 "model name" /proc/cpuinfo

# 1. the datasets, one collect process each (data/gpu_fidelity/<dataset>/, then copied where the bench's
#    `dataset=mujoco-v5/<name>` finds it); one made before is kept
# the work folder: each dataset's suite YAML, collect log and suite.json (not in $OUT: it takes 8 files)
W="${GPU_FIDELITY_WORK:-data/gpu_fidelity}"
mkdir -p data/mujoco-v5 "$W"
"$PY" - "$W" "${datasets[@]}" <<'PYEOF' || exit 1
import sys
from pathlib import Path

import yaml

out, names = Path(sys.argv[1]), sys.argv[2:]
suite = yaml.safe_load(Path("configs/dataset/mujoco-v5.yaml").read_text())
for name in names:  # halfcheetah-v5-medium-replay -> task halfcheetah-v5, kind medium-replay
    task = next((t for t in suite["tasks"] if name.startswith(t + "-")), None)
    if task is None:
        sys.exit(f"gpu_fidelity: {name} is not a mujoco-v5 dataset (tasks: {', '.join(suite['tasks'])})")
    one = {**suite, "tasks": {task: {**suite["tasks"][task], "kinds": [name[len(task) + 1:]]}}}
    (out / name).mkdir(parents=True, exist_ok=True)
    (out / name / "mujoco-v5.yaml").write_text(yaml.safe_dump(one, sort_keys=False))
PYEOF
if [[ -n "${PLAN:-}" ]]; then  # what it would run (tests/benchmarks/test_gpu_fidelity.py checks it composes)
  echo "plan: ${BENCH[*]} overrides=[$OVERRIDES]"; exit 0
fi
pids=()  # (a bare `wait` would wait for the log's tee too)
for d in "${datasets[@]}"; do
  [ -d "data/mujoco-v5/$d-v0" ] && [ ! -d "$W/$d/$d-v0" ] && continue  # the suite's own, made here before
  ( "$PY" -m robolearn.commands.cli collect "suite=$W/$d/mujoco-v5.yaml" "out=$W/$d" progress=false \
      > "$W/collect-$d.log" 2>&1 && rm -rf "data/mujoco-v5/$d-v0" && cp -r "$W/$d/$d-v0" "data/mujoco-v5/$d-v0" ) &
  pids+=($!)
done
(( ${#pids[@]} )) && wait "${pids[@]}"
for d in "${datasets[@]}"; do
  [ -f "$W/collect-$d.log" ] || { echo "$d: the one in data/mujoco-v5 (made before)"; continue; }
  grep -E "^fingerprints|other bits|steps, " "$W/collect-$d.log" || { tail -20 "$W/collect-$d.log"; exit 1; }
done
echo "datasets made: $(( $(date +%s) - START )) s"

# 2. the packs, all at once, under the time left (60 s kept for the archive)
bench() {  # bench <extra overrides>
  local left=$(( START + BUDGET_S - 60 - $(date +%s) ))
  if (( left < 60 )); then echo "bench: ${left} s left, not started"; return; fi
  timeout --signal=INT --kill-after=20 "$left" "$PY" -m robolearn.commands.cli "${BENCH[@]}" \
    "overrides=[$OVERRIDES$1]" >> "$OUT/bench.log" 2>&1
  echo "bench exited $? after $(( $(date +%s) - START )) s"
}
bench ""
if grep -l '"error": "[^"]' runs/offline_fidelity_v5_gpu/cells/*.json >/dev/null 2>&1; then
  echo "failed cells (compiled): again eager in the time left"
  grep -h -o '"error": "[^"]\{0,300\}' runs/offline_fidelity_v5_gpu/cells/*.json | sort -u | head -5
  bench ",algo.compile=false"
fi
tail -n 30 "$OUT/bench.log"

# 3. the archive: whatever finished, every pack's metrics, and the datasets' records (datasets/<name>/suite.json)
mkdir -p runs/offline_fidelity_v5_gpu/datasets
for d in "${datasets[@]}"; do
  mkdir -p "runs/offline_fidelity_v5_gpu/datasets/$d"
  cp "$W/collect-$d.log" "$W/$d/suite.json" "runs/offline_fidelity_v5_gpu/datasets/$d/" 2>/dev/null
done
(cd runs/offline_fidelity_v5_gpu && find . \( -name checkpoints -o -name tensorboard \) -prune -o -type f -print \
  | tar czf "$OUT/gpu_fidelity.tgz" -T -)
ls -la "$OUT"
echo "gpu_fidelity done in $(( $(date +%s) - START )) s"
