#!/bin/bash
# The paper's grid (its earlier outputs are withdrawn: experiments/frontier/README.md) under simulated FP8 inference, 200 global steps, seed 0.
# On one GPU (H100, 7-8 runs at a time, ~6-7 min per wave of 7-8); on CPU drop --per-gpu (hours).
set -e
# Each entry: overlays of recipes/paper/ stacked on recipes/minirl.yaml + recipes/paper/fp8.yaml (named fp8-s0 for
# none, else fp8+<overlays joined by +>-s0).
overlays=("" r3 minirl_length_norm "minirl_length_norm r3" minirl_no_is "minirl_no_is r3" grpo cispo cold_start_a cold_start_b)
for n in n2 n4 n8; do overlays+=("$n noclip" "$n noclip r2" "$n r2" "$n r3"); done
recipes=()
for o in "${overlays[@]}"; do
  stack="recipes/minirl.yaml recipes/paper/fp8.yaml"
  for x in $o; do stack+=" recipes/paper/$x.yaml"; done
  recipes+=("$stack")
done
stable-rl-sweep --parallel 8 --per-gpu 8 --seeds 0 --save-dir runs/paper --recipes "${recipes[@]}" -- \
  --trainer.val_check_interval=50 --trainer.enable_progress_bar=false
R=runs/paper; v=version_0
report() { out=$1; shift; stable-rl-report "${@/%//$v}" --out "experiments/paper-grid/$out"; }
report fig1 $R/fp8-s0 $R/fp8+r3-s0 $R/fp8+minirl_length_norm-s0 $R/fp8+minirl_length_norm+r3-s0 $R/fp8+minirl_no_is-s0 $R/fp8+minirl_no_is+r3-s0
for n in 2 4 8; do
  report n$n $R/fp8-s0 $R/fp8+n$n+noclip-s0 $R/fp8+n$n+noclip+r2-s0 $R/fp8+n$n+r2-s0 $R/fp8+n$n+r3-s0
done
report baselines $R/fp8-s0 $R/fp8+grpo-s0 $R/fp8+cispo-s0
report cold_starts $R/fp8-s0 $R/fp8+cold_start_a-s0 $R/fp8+cold_start_b-s0
