#!/bin/bash
# The off-policy stability frontier at N = 8 (docs/paper-reproduction.md, "The stability frontier"): the
# paper's arms (no clip, no clip + R2, clip + R2, clip + R3), clip without replay, GRPO and CISPO, and the
# exact float32 control (clip, no replay), x the seeds given (default 0 1 2), sharing one GPU; each run's
# metrics.csv is copied into docs/paper/frontier/n8/logs/, and the report is made from those logs.
#   bash docs/paper/frontier/run_n8.sh 0 1 2     # the runs, then the report
#   bash docs/paper/frontier/run_n8.sh --report  # the report again, from the committed logs alone
set -euo pipefail
source "$(dirname "$0")/wave.sh"
out=docs/paper/frontier/n8
runs=${SAVE_DIR:-runs/frontier_n8}
p=recipes/paper
arms=("$p/noclip.yaml" "$p/noclip.yaml $p/r2.yaml" ""  # MiniRL (clip, no replay): named n8
  "$p/r2.yaml" "$p/r3.yaml" "$p/grpo.yaml" "$p/cispo.yaml" recipes/frontier/exact.yaml)
if [ "${1:-}" != "--report" ]; then
  recipes=()
  for a in "${arms[@]}"; do recipes+=("recipes/frontier/onpolicy_fp8.yaml${a:+ $a} recipes/frontier/n8.yaml"); done
  wave "$out" "$runs" "${PARALLEL:-8}" "${*:-0 1 2}" "${recipes[@]}"
fi
python3 -m stable_rl.report "$out"/logs/*/version_0 --frontier --out "$out" --pair \
  noclip+n8:r2+n8 noclip+r2+n8:r2+n8 n8:r2+n8 n8:r3+n8 r2+n8:r3+n8 r3+n8:r2+n8 \
  grpo+n8:r3+n8 cispo+n8:r3+n8 n8:exact+n8 exact+n8:n8
