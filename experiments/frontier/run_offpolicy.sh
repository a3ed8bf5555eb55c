#!/bin/bash
# The off-policy stability frontier at N = 2, 4, 8 or 16 (experiments/frontier/README.md, "The stability frontier"):
# mini-batches of 128 / N, the paper's arms (no clip, no clip + R2, clip + R2, clip + R3), clip without
# replay and the exact float32 control (clip, no replay), at N = 8 also GRPO and CISPO, x the seeds given
# (default 0 1 2), sharing each GPU; each run's metrics.csv is copied into experiments/frontier/nN/logs/, and
# the report is made from those logs.
#   bash experiments/frontier/run_offpolicy.sh 4 0 1 2     # the runs, then the report
#   bash experiments/frontier/run_offpolicy.sh 4 --report  # the report again, from the committed logs alone
set -euo pipefail
source "$(dirname "$0")/wave.sh"
n=${1:-}
case $n in 2 | 4 | 8 | 16) shift ;; *) echo "usage: $0 N [SEEDS... | --report], N = 2, 4, 8 or 16 (got '$n')" >&2 && exit 2 ;; esac
out=experiments/frontier/n$n
runs=${SAVE_DIR:-runs/frontier_n$n}
p=recipes/paper
arms=("$p/noclip.yaml" "$p/noclip.yaml $p/r2.yaml" ""  # MiniRL (clip, no replay): named n$n
  "$p/r2.yaml" "$p/r3.yaml")
pairs=("noclip+n$n:r2+n$n" "noclip+r2+n$n:r2+n$n" "n$n:r2+n$n" "n$n:r3+n$n" "r2+n$n:r3+n$n" "r3+n$n:r2+n$n")
if [ "$n" = 8 ]; then  # the baselines, at the paper's N only
  arms+=("$p/grpo.yaml" "$p/cispo.yaml")
  pairs+=("grpo+n8:r3+n8" "cispo+n8:r3+n8")
fi
arms+=(recipes/frontier/exact.yaml)  # last, as the N = 8 wave ran: the sweep starts the runs in this order
pairs+=("n$n:exact+n$n" "exact+n$n:n$n")
if [ "${1:-}" != "--report" ]; then
  recipes=()
  for a in "${arms[@]}"; do recipes+=("recipes/frontier/onpolicy_fp8.yaml${a:+ $a} recipes/frontier/n$n.yaml"); done
  wave "$out" "$runs" "${PARALLEL:-8}" "${*:-0 1 2}" "${recipes[@]}"
fi
python3 -m stable_rl.analysis.report "$out"/logs/*/version_0 --frontier --out "$out" --pair "${pairs[@]}"
