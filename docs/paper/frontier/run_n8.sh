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
arms=("$p/minirl_n8_noclip.yaml" "$p/minirl_n8_noclip_r2.yaml" "$p/minirl_n8_clip.yaml" "$p/minirl_n8_clip_r2.yaml"
  "$p/minirl_n8_clip_r3.yaml" "$p/grpo.yaml" "$p/cispo.yaml" "$p/minirl_n8_clip.yaml recipes/frontier/exact.yaml")
if [ "${1:-}" != "--report" ]; then
  recipes=()
  for a in "${arms[@]}"; do recipes+=("recipes/frontier/onpolicy_fp8.yaml $a recipes/frontier/n8.yaml"); done
  wave "$out" "$runs" "${PARALLEL:-8}" "${*:-0 1 2}" "${recipes[@]}"
fi
python3 -m stable_rl.report "$out"/logs/*/version_0 --frontier --out "$out" --pair \
  minirl_n8_noclip+n8:minirl_n8_clip_r2+n8 minirl_n8_noclip_r2+n8:minirl_n8_clip_r2+n8 \
  minirl_n8_clip+n8:minirl_n8_clip_r2+n8 minirl_n8_clip+n8:minirl_n8_clip_r3+n8 \
  minirl_n8_clip_r2+n8:minirl_n8_clip_r3+n8 minirl_n8_clip_r3+n8:minirl_n8_clip_r2+n8 \
  grpo+n8:minirl_n8_clip_r3+n8 cispo+n8:minirl_n8_clip_r3+n8 \
  minirl_n8_clip+n8:minirl_n8_clip+exact+n8 minirl_n8_clip+exact+n8:minirl_n8_clip+n8
