#!/bin/bash
# The tiny model's frontier across N (docs/paper-reproduction.md): each arm's collapse learning rate at
# N = 1 (on-policy), 4 and 8, from the waves' committed logs (no runs: run_onpolicy.sh, run_offpolicy.sh 4 and
# run_n8.sh make them). On-policy, clipping and R2 change nothing (pi_old = pi_theta at each update).
#   bash docs/paper/frontier/run_across.sh
set -euo pipefail
f=docs/paper/frontier
python3 -m stable_rl.frontier_across --out "$f/across" \
  --wave 1 "$f/onpolicy/logs" --wave 4 "$f/n4/logs" --wave 8 "$f/n8/logs" \
  --arm "control: exact engine, clip" exact exact+n4 exact+n8 \
  --arm "MiniRL: clip, no replay" onpolicy_fp8 n4 n8 \
  --arm "no clip" - noclip+n4 noclip+n8 \
  --arm "clip + R2" - r2+n4 r2+n8 \
  --arm "clip + R3" r3 r3+n4 r3+n8
