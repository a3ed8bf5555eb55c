#!/bin/bash
# The tiny model's frontier across N (experiments/frontier/README.md): each arm's collapse learning rate at
# N = 1 (on-policy), 2, 4, 8 and 16, from the waves' committed logs (no runs: run_onpolicy.sh, run_offpolicy.sh 2,
# 4 and 16 and run_n8.sh make them). On-policy, clipping and R2 change nothing (pi_old = pi_theta at each update).
#   bash experiments/frontier/run_across.sh
set -euo pipefail
f=experiments/frontier
python3 -m stable_rl.analysis.frontier_across --out "$f/across" \
  --wave 1 "$f/onpolicy/logs" --wave 2 "$f/n2/logs" --wave 4 "$f/n4/logs" --wave 8 "$f/n8/logs" \
  --wave 16 "$f/n16/logs" \
  --arm "control: exact engine, clip" exact exact+n2 exact+n4 exact+n8 exact+n16 \
  --arm "MiniRL: clip, no replay" onpolicy_fp8 n2 n4 n8 n16 \
  --arm "no clip" - noclip+n2 noclip+n4 noclip+n8 noclip+n16 \
  --arm "clip + R2" - r2+n2 r2+n4 r2+n8 r2+n16 \
  --arm "clip + R3" r3 r3+n2 r3+n4 r3+n8 r3+n16
