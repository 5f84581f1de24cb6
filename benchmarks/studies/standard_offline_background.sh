#!/bin/bash
# The long CPU jobs behind the standard offline benchmarks (issues 33 and 35), resumable across sessions: start it at a
# session's beginning (`nohup bash benchmarks/studies/standard_offline_background.sh > runs/background.log 2>&1 &`).
# Each job resumes where the last session stopped (training runs from their checkpoints, the bench from its finished
# cells and packs). The training runs, the antmaze collection and the fidelity bench (issue 33, ahead of 35; about
# 30-40 minutes a dataset and algorithm on a core) run at nice 19 (PRIORITY): a core each. The O2O comparison (tens of
# core-hours at its CPU budget) runs at idle priority (`chrt -i 0`: `nice` does not hold across sessions' autogroups)
# on what is left, and takes a core when the others are done.
#   1. the antmaze goal reacher: SAC on ant-goal, 3M env steps at most, snapshots every 100K (docs/offline-rl.md);
#   2. once a reacher snapshot is committed as ant-goal's reference: D4RL's six antmaze datasets (data/antmaze);
#      then ant-v5's behaviour run for the mujoco-v5 suite (1M env steps, snapshots every 50K; both runs are over
#      and committed, so neither trains again);
#   3. the O2O comparison (WSRL, RO2O, Cal-QL, RLPD, SAC) on halfcheetah-v5-medium and hopper-v5-medium at the CPU
#      budget of configs/bench/o2o-v5.yaml's header (64x64, 10K offline + 20K online steps, 5 seeds packed), then on
#      antmaze-umaze and -diverse (configs/bench/o2o-antmaze.yaml) at the same budget;
#   4. the v5 fidelity bench (BC, TD3+BC, IQL; 100K steps, 3 seeds packed), dataset by dataset (the cells committed
#      in benchmarks/results/offline_fidelity_v5/cells count as done), then ReBRAC on halfcheetah-v5-medium, then on
#      hopper-v5-medium and the medium-replay sets (about 4.3 core-hours each; the machine keeps them across resets).
# The suite's datasets regenerate first when data/mujoco-v5 is missing, from the committed behaviour folders (about 25
# minutes beside these jobs).
# A machine reset takes runs/ with it (it has happened three times). Every 10 minutes `keep_bench` copies the
# unfinished packs of the benches (configs, metrics and checkpoints: an O2O offline phase is about 1 MB a seed, an
# online one about 2-6 MB a seed with its replay buffer, which holds only the online steps; a fidelity pack about 7 MB
# a seed; not the tensorboard logs) into the tracked benchmarks/in-progress/<bench>/, for the session to commit (once,
# near its end: git grows by what changed), and `restore_bench` puts them back where a reset took them, so every phase
# resumes from its last kept checkpoint. Likewise every 10 minutes `keep` copies a training run's networks (its latest
# checkpoint without buffer and optimizer state, about 2 MB) and its policy snapshots into the tracked
# benchmarks/behaviour/in-progress/<run>/, for the session to commit; a run whose folder is gone starts again from
# those networks (`init=`, an empty buffer) instead of from scratch.
set -u
cd "$(dirname "$0")/../.."
# (checkpoint_interval=1: a checkpoint every 1000 updates, so a stopped session loses minutes, not the phase)
O2O_CPU="offline=[algo.compile=true,algo.actor_hidden=[64,64],algo.critic_hidden=[64,64],checkpoint_interval=1],\
online=[env.num_envs=1,algo.compile=true,algo.actor_hidden=[64,64],algo.critic_hidden=[64,64],checkpoint_interval=1]"
REACHER=benchmarks/references/ant-goal-sac/config.json  # committed: the reacher's run is over
# The training runs and the antmaze collection are the critical path (the datasets wait on the reacher): nice 19,
# above the idle-priority benches, so they keep one core while the benches share the other (BACKGROUND_PRIORITY=idle:
# all at idle priority)
PRIORITY=(nice -n 19)
[ "${BACKGROUND_PRIORITY:-nice}" = idle ] && PRIORITY=(chrt -i 0)
mkdir -p runs/behaviour
train() {  # train <run dir> <overrides...>: resume the run if it has a checkpoint, else start it
  local run=$1; shift
  local kept=benchmarks/behaviour/in-progress/$(basename "$run")
  if [ -f "$run/checkpoints/latest/config.json" ]; then
    set -- "resume=$run"
  elif [ -f "$kept/warm/model.safetensors" ]; then  # the earlier life's snapshots move aside: the new one counts from 0
    [ -d "$kept/snapshots" ] && mv "$kept/snapshots" "$kept/snapshots.$(date +%Y%m%d-%H%M)"
    set -- "$@" "init=$kept/warm" algo.random_warmup=false "run_dir=$run" checkpoint_interval=25 video=false \
      progress=false  # the buffer refills with the kept policy's own actions, not uniform ones
  else
    set -- "$@" "run_dir=$run" checkpoint_interval=25 video=false progress=false
  fi
  OMP_NUM_THREADS=1 "${PRIORITY[@]}" .venv/bin/robolearn train "$@"
}
keep() {  # keep <run dir>: every 10 minutes, its networks and snapshots into the tracked folder (see above)
  local run=$1 dst=benchmarks/behaviour/in-progress/$(basename "$1")
  while sleep 600; do
    if [ -f "$run/checkpoints/latest/model.safetensors" ]; then
      mkdir -p "$dst/warm.tmp" && cp "$run/checkpoints/latest/"{config.json,model.safetensors} "$dst/warm.tmp/" \
        && rm -rf "$dst/warm" && mv "$dst/warm.tmp" "$dst/warm"
    fi
    [ -d "$run/snapshots" ] && cp -r "$run/snapshots" "$dst/"
  done
}
keep_bench() {  # keep_bench <bench out>: every 10 minutes, its unfinished packs' files into the tracked folder
  local out=$1 dst=benchmarks/in-progress/$(basename "$1")
  while sleep 600; do
    for pack in "$out"/runs/*/; do
      [ -d "$pack" ] || continue  # no pack yet: the glob stays as written
      local name
      name=$(basename "$pack")
      if compgen -G "$out/cells/${name}__seed*.json" > /dev/null; then rm -rf "${dst:?}/$name"; continue; fi  # done
      # hard links: an instant copy, so no checkpoint is caught half replaced (a save renames a new folder into place
      # and never rewrites a file)
      rm -rf "$dst/$name.tmp" && mkdir -p "$dst" && cp -al "$pack" "$dst/$name.tmp" || continue
      find "$dst/$name.tmp" -name tensorboard -prune -exec rm -rf {} +
      find "$dst/$name.tmp" -type f -size +32M -delete
      find "$dst/$name.tmp" -path '*/checkpoints/final' -type d 2>/dev/null |  # a finished phase: final suffices
        while read -r d; do rm -rf "$(dirname "$d")/latest"; done
      # a pack's seeds save one after another: a copy taken between two of them is not resumable, so keep the last one
      if [ "$(find "$dst/$name.tmp" -path '*/checkpoints/latest/trainer.json' -exec grep -h '"iteration"' {} + |
              sort -u | wc -l)" -gt 1 ]; then rm -rf "$dst/$name.tmp"; continue; fi
      [ -d "$dst/$name.tmp" ] && rm -rf "${dst:?}/$name" && mv "$dst/$name.tmp" "$dst/$name"
    done
  done
}
restore_bench() {  # restore_bench <bench out>: kept packs whose run folders a reset took go back in place
  local out=$1 src=benchmarks/in-progress/$(basename "$1") kept
  for kept in "$src"/*/; do
    [ -d "$kept" ] && [ ! -e "$out/runs/$(basename "$kept")" ] && mkdir -p "$out/runs" && cp -r "$kept" "$out/runs/"
  done
}
for b in runs/o2o_v5_cpu runs/o2o_antmaze_cpu runs/offline_fidelity_v5; do restore_bench $b; keep_bench $b & done
if ! grep -q '"ant-v5-full-replay-v0"' data/mujoco-v5/suite.json 2>/dev/null; then  # its last dataset
  OMP_NUM_THREADS=1 chrt -i 0 .venv/bin/robolearn collect suite=mujoco-v5 progress=false \
    > runs/collect-mujoco-v5.log 2>&1 &
fi
[ -f $REACHER ] || keep runs/behaviour/ant-goal-sac &
ANT_V5=benchmarks/behaviour/ant-v5-sac/behaviour.json  # committed: ant-v5's behaviour run is over
[ -f $ANT_V5 ] || keep runs/behaviour/ant-v5-sac &
(
  # the reacher trains until one of its snapshots is committed as ant-goal's reference (benchmarks/references/)
  [ -f $REACHER ] || train runs/behaviour/ant-goal-sac env=ant-goal algo=sac seed=0 algo.compile=true \
    runner.env_steps=3000000 runner.snapshot_every=100000 runner.eval_every=50000
  # then D4RL's six antmaze datasets from it (data/antmaze; resumes dataset by dataset)
  [ -f $REACHER ] && OMP_NUM_THREADS=1 "${PRIORITY[@]}" .venv/bin/robolearn collect suite=antmaze progress=false
  [ -f $ANT_V5 ] || train runs/behaviour/ant-v5-sac env=ant-v5 algo=sac seed=0 algo.compile=true \
    runner.env_steps=1000000 runner.snapshot_every=50000 runner.eval_every=50000
) >> runs/behaviour/background.log 2>&1 &
mkdir -p runs/o2o_v5_cpu/cells  # issue 35's O2O comparison at its CPU budget (configs/bench/o2o-v5.yaml's header)
cp -n benchmarks/results/o2o_v5_cpu/cells/*.json runs/o2o_v5_cpu/cells/ 2>/dev/null
(
  for d in halfcheetah-v5-medium hopper-v5-medium; do
    until grep -q "\"$d-v0\"" data/mujoco-v5/suite.json 2>/dev/null; do sleep 60; done
    OMP_NUM_THREADS=1 chrt -i 0 .venv/bin/robolearn bench suite=o2o-v5 pack_seeds=true workers=1 \
      out=runs/o2o_v5_cpu "datasets=[$d]" overrides="[offline_steps=10000,online_steps=20000,eval_every=2000,$O2O_CPU]"
  done
  # then the antmaze part (configs/bench/o2o-antmaze.yaml) at the same CPU budget, once the antmaze suite is made
  mkdir -p runs/o2o_antmaze_cpu/cells
  cp -n benchmarks/results/o2o_antmaze_cpu/cells/*.json runs/o2o_antmaze_cpu/cells/ 2>/dev/null
  until [ -f data/antmaze/suite.json ]; do sleep 60; done
  OMP_NUM_THREADS=1 chrt -i 0 .venv/bin/robolearn bench suite=o2o-antmaze pack_seeds=true workers=1 \
    out=runs/o2o_antmaze_cpu overrides="[offline_steps=10000,online_steps=20000,eval_every=2000,$O2O_CPU]"
) >> runs/o2o_v5_cpu.log 2>&1 &
mkdir -p runs/offline_fidelity_v5/cells  # the committed cells count as done: the bench skips them
cp -n benchmarks/results/offline_fidelity_v5/cells/*.json runs/offline_fidelity_v5/cells/
fidelity() {  # fidelity <algos> <dataset>: once the dataset is made
  until grep -q "\"$2-v0\"" data/mujoco-v5/suite.json 2>/dev/null; do sleep 60; done
  OMP_NUM_THREADS=1 "${PRIORITY[@]}" .venv/bin/robolearn bench suite=offline-fidelity-v5 pack_seeds=true workers=1 \
    "algos=[$1]" "datasets=[$2]" out=runs/offline_fidelity_v5
}
for d in halfcheetah-v5-medium halfcheetah-v5-medium-expert hopper-v5-medium-expert hopper-v5-medium-replay; do
  fidelity bc,td3_bc,iql $d
done
# then ReBRAC on halfcheetah-v5-medium (about 4.3 core-hours at 100K, 3 seeds packed; CQL's 20+ wait for a GPU)
fidelity rebrac halfcheetah-v5-medium
# then on the other datasets, one by one (the cells record which generation of the data they trained on: another CPU
# or engine build makes other bits with the same statistics, benchmarks/results/suite_cross_cpu.json)
for d in hopper-v5-medium halfcheetah-v5-medium-replay hopper-v5-medium-replay; do
  fidelity rebrac $d
done
wait
