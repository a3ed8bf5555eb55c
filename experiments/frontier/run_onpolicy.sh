#!/bin/bash
# The on-policy stability frontier (experiments/frontier/README.md, "The stability frontier"): 7 variants x
# the seeds given (default 0 1 2), 7 runs at a time sharing each GPU; each run's metrics.csv is copied into
# experiments/frontier/onpolicy/logs/, and the figures and table are made from those committed logs.
#   bash experiments/frontier/run_onpolicy.sh 0 1 2     # the runs (one H100: ~8 min per seed), then the report
#   bash experiments/frontier/run_onpolicy.sh --report  # the report again, from the committed logs alone
set -euo pipefail
source "$(dirname "$0")/wave.sh"
out=experiments/frontier/onpolicy
runs=${SAVE_DIR:-runs/frontier}
p=recipes/paper
variants=(""  # MiniRL: onpolicy_fp8; the others are named by their overlays
  "$p/r3.yaml" "$p/minirl_no_is.yaml" "$p/minirl_no_is.yaml $p/r3.yaml"
  "$p/minirl_length_norm.yaml" "$p/minirl_length_norm.yaml $p/r3.yaml" recipes/frontier/exact.yaml)
if [ "${1:-}" != "--report" ]; then
  recipes=()
  for v in "${variants[@]}"; do recipes+=("recipes/frontier/onpolicy_fp8.yaml${v:+ $v}"); done
  wave "$out" "$runs" "${PARALLEL:-7}" "${*:-0 1 2}" "${recipes[@]}"
fi
python3 -m stable_rl.analysis.report "$out"/logs/*/version_0 --frontier --out "$out" --pair \
  minirl_no_is:onpolicy_fp8 onpolicy_fp8:minirl_no_is \
  minirl_no_is+r3:r3 r3:minirl_no_is+r3 \
  minirl_length_norm:onpolicy_fp8 onpolicy_fp8:minirl_length_norm \
  onpolicy_fp8:r3 r3:onpolicy_fp8 \
  onpolicy_fp8:exact exact:onpolicy_fp8
