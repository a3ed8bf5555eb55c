#!/bin/bash
# The long task's frontier off-policy at N = 8 (experiments/long-task/README.md): no clip, clip without replay, clip + R2,
# clip + R3 and the exact float32 control (clip, no replay), x the seeds given, three runs sharing each GPU,
# each at most 10 minutes of training; after the cold start (experiments/long-task/run_cold_start.sh). Each run's
# metrics.csv is copied into experiments/long-task/n8/logs/, and the report is made from those committed logs.
#   bash experiments/long-task/run_n8.sh 0            # the runs (~14 min per three: start them with tools/gpu-offline/detached.sh), then the report
#   ARMS="noclip clip r2 r3" bash experiments/long-task/run_n8.sh 1   # some of the arms (of noclip clip r2 r3 exact)
#   bash experiments/long-task/run_n8.sh --report     # the report again, from the committed logs alone
set -euo pipefail
source experiments/frontier/wave.sh
out=experiments/long-task/n8
runs=${SAVE_DIR:-runs/long_n8}
p=recipes/paper
declare -A arm=([noclip]=$p/noclip.yaml [clip]="" [r2]=$p/r2.yaml [r3]=$p/r3.yaml [exact]=recipes/long/exact.yaml)
# clip is clip without replay, named frontier+n8
if [ "${1:-}" != "--report" ]; then
  recipes=()
  declare -A chosen=()
  for name in ${ARMS-noclip clip r2 r3 exact}; do
    [ -v "arm[$name]" ] || { echo "ARMS: no arm '$name' (noclip clip r2 r3 exact)" >&2 && exit 2; }
    [ ! -v "chosen[$name]" ] || { echo "ARMS: '$name' twice (its runs would share one log)" >&2 && exit 2; }
    chosen[$name]=1
    a=${arm[$name]}
    recipes+=("recipes/long/minirl_smollm2_moe.yaml recipes/long/frontier.yaml${a:+ $a} recipes/long/n8.yaml")
  done
  [ ${#recipes[@]} -gt 0 ] || { echo "ARMS: no arm named (of noclip clip r2 r3 exact)" >&2 && exit 2; }
  wave "$out" "$runs" "${PARALLEL:-3}" "${*:-0}" "${recipes[@]}" ${FIT_ARGS:+-- $FIT_ARGS}  # FIT_ARGS: for every run
fi
python3 -m stable_rl.analysis.report "$out"/logs/*/version_0 --frontier --steps 48 --out "$out" --pair \
  frontier+noclip+n8:frontier+r2+n8 frontier+n8:frontier+r2+n8 frontier+n8:frontier+r3+n8 \
  frontier+r2+n8:frontier+r3+n8 frontier+n8:frontier+exact+n8 frontier+exact+n8:frontier+n8
