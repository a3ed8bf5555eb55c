#!/bin/bash
# The pilot's waves on one GPU (PROTOCOL.md Parts 1 and 1a), each run logging under SAVE_DIR (default
# runs/atlas/pilot/<wave>); experiments/atlas/pack_logs.sh packs what they wrote for logs/pilot/<wave>.tar.xz.
#   bash experiments/atlas/run_pilot.sh dial          # every dial level L0-L7 at 1e-4, seeds 0 and 1, 50 steps (16 runs)
#   bash experiments/atlas/run_pilot.sh control       # the control (L0, MiniRL) at 3e-4 and 1e-4, seeds 0-5 (12 runs)
#   bash experiments/atlas/run_pilot.sh power 3e-4    # MiniRL and w/o train-infer IS at L3 and L7, seeds 0-2 (12 runs)
# FIT_ARGS (e.g. "--trainer.max_time=00:00:19:00") go to every run: a run stopped by max_time keeps its log.
set -euo pipefail
wave=${1:?usage: run_pilot.sh dial | control | power RATE}
r=experiments/atlas/recipes
runs=${SAVE_DIR:-runs/atlas/pilot/$wave}
export OMP_NUM_THREADS=1  # the update runs on the GPU; the verifier has its own processes
read -ra fit <<< "${FIT_ARGS:-}"
recipes=() seeds=(0 1) steps=()
case $wave in
  dial)
    for level in "$r"/dial/*.yaml; do recipes+=("$r/atlas.yaml $level $r/lr/lr1e-4.yaml"); done
    steps=(--trainer.max_steps=50)
    ;;
  control)
    recipes=("$r/atlas.yaml $r/dial/l0_exact.yaml $r/lr/lr3e-4.yaml" "$r/atlas.yaml $r/dial/l0_exact.yaml $r/lr/lr1e-4.yaml")
    seeds=(0 1 2 3 4 5)
    ;;
  power)
    rate=${2:?usage: run_pilot.sh power RATE (the rate Part 1 chose: 3e-4, Part 1c)}
    seeds=(0 1 2)
    [ -f "$r/lr/lr$rate.yaml" ] || { echo "no $r/lr/lr$rate.yaml: the rate is one of the candidates" >&2 && exit 2; }
    for level in l3_fp8_kv l7_noise0.3; do
      for method in "" recipes/paper/minirl_no_is.yaml; do
        recipes+=("$r/atlas.yaml $r/dial/$level.yaml $r/lr/lr$rate.yaml${method:+ $method}")
      done
    done
    ;;
  *) echo "unknown wave '$wave': dial, control or power RATE" >&2 && exit 2 ;;
esac
python3 -m stable_rl.cli.sweep --per-gpu "$(( ${#recipes[@]} * ${#seeds[@]} ))" --seeds "${seeds[@]}" --save-dir "$runs" \
  --recipes "${recipes[@]}" -- "${steps[@]}" "${fit[@]}"
