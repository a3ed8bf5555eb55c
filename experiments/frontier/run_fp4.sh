#!/bin/bash
# The on-policy frontier one rung up the mismatch ladder (experiments/frontier/README.md): MiniRL and w/o
# train-infer IS, each with and without R3, with the HF engine's NVFP4-like rollouts (recipes/frontier/
# hf_fp4.yaml), x the seeds given (default 0 1 2); logs into experiments/frontier/fp4/logs/, then the report
# with the exact control of the FP8 frontier (experiments/frontier/onpolicy/logs/exact-s*).
#   bash experiments/frontier/run_fp4.sh 0 1 2     # the runs, then the report
#   bash experiments/frontier/run_fp4.sh --report  # the report again, from the committed logs alone
set -euo pipefail
source "$(dirname "$0")/wave.sh"
out=experiments/frontier/fp4
runs=${SAVE_DIR:-runs/frontier_fp4}
p=recipes/paper
variants=("" "$p/r3.yaml" "$p/minirl_no_is.yaml" "$p/minirl_no_is.yaml $p/r3.yaml")
if [ "${1:-}" != "--report" ]; then
  recipes=()
  for v in "${variants[@]}"; do recipes+=("recipes/frontier/onpolicy_fp8.yaml${v:+ $v} recipes/frontier/hf_fp4.yaml"); done
  wave "$out" "$runs" "${PARALLEL:-12}" "${*:-0 1 2}" "${recipes[@]}"
fi
python3 -m stable_rl.analysis.report "$out"/logs/*/version_0 experiments/frontier/onpolicy/logs/exact-s*/version_0 --frontier \
  --out "$out" --pair hf_fp4:exact minirl_no_is+hf_fp4:hf_fp4 hf_fp4:minirl_no_is+hf_fp4 \
  minirl_no_is+r3+hf_fp4:r3+hf_fp4 hf_fp4:r3+hf_fp4 r3+hf_fp4:hf_fp4
