#!/bin/bash
# The stability frontier on the long task (experiments/long-task/README.md): MiniRL, w/o train-infer IS and the exact
# control (recipes/long/frontier.yaml and its overlays) x the seeds given, three runs sharing each GPU, each
# at most 10 minutes of training; after the cold start (experiments/long-task/run_cold_start.sh). Each run's metrics.csv is copied
# into experiments/long-task/frontier/logs/, and the figures and table are made from those committed logs.
#   bash experiments/long-task/run_frontier.sh 0              # one wave (~14 min: start it with tools/gpu-offline/detached.sh), then the report
#   bash experiments/long-task/run_frontier.sh --report       # the report again, from the committed logs alone
#   bash experiments/long-task/run_frontier.sh --report experiments/long-task/frontier/preview   # the first wave's (an earlier protocol)
set -euo pipefail
source experiments/frontier/wave.sh
out=experiments/long-task/frontier
[ "${1:-}" = "--report" ] && out=${2:-$out}  # a DIR only after --report: otherwise every argument is a seed
runs=${SAVE_DIR:-runs/long_frontier}
l=recipes/long
variants=("" recipes/paper/minirl_no_is.yaml "$l/exact.yaml")
if [ "${1:-}" != "--report" ]; then
  recipes=()
  for v in "${variants[@]}"; do recipes+=("$l/minirl_smollm2_moe.yaml $l/frontier.yaml${v:+ $v}"); done
  wave "$out" "$runs" "${PARALLEL:-3}" "${*:-0}" "${recipes[@]}" ${FIT_ARGS:+-- $FIT_ARGS}  # FIT_ARGS: for every run
fi
python3 -m stable_rl.analysis.report "$out"/logs/*/version_0 --frontier --steps 48 --out "$out" --pair \
  frontier+minirl_no_is:frontier frontier:frontier+minirl_no_is frontier:frontier+exact frontier+exact:frontier
