#!/bin/bash
# The pilot's first wave (PROTOCOL.md Parts 1 and 1a) on one GPU: the control (dial L0, MiniRL) at 3e-4 and 1e-4,
# seeds 0-5, to 1,000 steps; every dial level L0-L7 at 1e-4, seeds 0 and 1, for 50 steps; 20 runs share the GPU.
# Runs log under SAVE_DIR (default runs/atlas/pilot); experiments/atlas/pack_logs.sh packs what they wrote.
#   FIT_ARGS="--trainer.max_time=00:00:19:00" bash experiments/atlas/run_pilot.sh
set -euo pipefail
r=experiments/atlas/recipes
runs=${SAVE_DIR:-runs/atlas/pilot}
export OMP_NUM_THREADS=1  # the update runs on the GPU; the verifier has its own processes
read -ra fit <<< "${FIT_ARGS:-}"
control=("$r/atlas.yaml $r/dial/l0_exact.yaml $r/lr/lr3e-4.yaml" "$r/atlas.yaml $r/dial/l0_exact.yaml $r/lr/lr1e-4.yaml")
dial=()
for level in "$r"/dial/*.yaml; do dial+=("$r/atlas.yaml $level $r/lr/lr1e-4.yaml"); done
python3 -m stable_rl.sweep --per-gpu 12 --seeds 0 1 2 3 4 5 --save-dir "$runs/control" --recipes "${control[@]}" \
  -- "${fit[@]}" &
python3 -m stable_rl.sweep --per-gpu 8 --seeds 0 1 --save-dir "$runs/dial" --recipes "${dial[@]}" \
  -- --trainer.max_steps=50 "${fit[@]}" &
wait
