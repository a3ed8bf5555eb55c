#!/bin/bash
# Fixed learning rates on the long task (experiments/long-task/README.md, "Left for the next waves"): MiniRL with the
# frontier's settings and no ramp (recipes/long/fixed_lr.yaml), one run per RATE given (default 1e-6 2e-6 4e-6),
# or per RATE:OVERLAY (another arm at that rate, e.g. 2e-6:recipes/long/exact.yaml, the float32 control), dealt
# in turn to the GPUs CUDA_VISIBLE_DEVICES names (every GPU where unset: all the runs share one GPU only on a
# machine of one), seed SEED (default 0), each at most 15 minutes of training; after the cold start (experiments/long-task/run_cold_start.sh).
# Each run's metrics.csv as metrics.csv.xz (and its console.log as console.txt.gz, machine paths removed) is copied into
# OUT_DIR/logs/lrRATE[+overlay]/version_0/ (OUT_DIR: default experiments/long-task/fixed_lr; each
# wave on its own cold start has its own, e.g. experiments/long-task/fixed_lr/wave1), and the figures and table are made from
# those committed logs.
#   bash experiments/long-task/run_fixed_lr.sh 1e-6 2e-6 2e-6:recipes/long/exact.yaml   # the runs (start them with
#                                                     # tools/gpu-offline/detached.sh), then the report
#   FIT_ARGS="--trainer.max_time=00:00:12:00" bash experiments/long-task/run_fixed_lr.sh 4e-6   # extra fit arguments, every
#                                                     # run (split at spaces: no spaces or globs inside a value)
#   SEED=1 OUT_DIR=experiments/long-task/fixed_lr/wave3 bash experiments/long-task/run_fixed_lr.sh 8e-6   # another seed (default 0)
#   bash experiments/long-task/run_fixed_lr.sh --report [DIR]     # the report again, from the committed logs alone
#   bash experiments/long-task/run_fixed_lr.sh --report experiments/long-task/fixed_lr/wave1   # the first GPU wave's (experiments/long-task/README.md)
set -euo pipefail
out=${OUT_DIR:-experiments/long-task/fixed_lr}
[ "${1:-}" = "--report" ] && out=${2:-$out}  # a DIR only after --report: otherwise every argument is a RATE
runs=${SAVE_DIR:-runs/long_fixed_lr}
name() {  # RATE[:OVERLAY] -> lrRATE[+overlay stem]
  local overlay=${1#*:}
  [ "$overlay" = "$1" ] && echo "lr$1" || echo "lr${1%%:*}+$(basename "$overlay" .yaml)"
}
if [ "${1:-}" != "--report" ]; then
  specs=("${@:-1e-6 2e-6 4e-6}")
  pids=() started=() failed=() gpus=()
  if [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then  # set, even empty (no GPU): the GPUs it names
    IFS=, read -ra gpus <<< "${CUDA_VISIBLE_DEVICES// /}"
  elif command -v nvidia-smi > /dev/null; then  # unset: every GPU of the machine (an error prints no index)
    mapfile -t gpus < <(nvidia-smi --query-gpu=index --format=csv,noheader 2> /dev/null | grep -E '^[0-9]+$' || true)
  fi
  for spec in ${specs[*]}; do
    lr=${spec%%:*} overlay=${spec#"${spec%%:*}"}
    rm -rf "${runs:?}/$(name "$spec")"  # a run started again would log to version_1; version_0 is copied
    rm -rf "${out:?}/logs/$(name "$spec")"  # nor may a run that dies before logging be reported from an earlier one
    on_gpu=()  # each sweep runs one run, which its own sweep would put on the first GPU: the script deals them
    [ ${#gpus[@]} -eq 0 ] || on_gpu=(env "CUDA_VISIBLE_DEVICES=${gpus[${#pids[@]} % ${#gpus[@]}]}")
    "${on_gpu[@]}" python3 -m stable_rl.cli.sweep --seeds "${SEED:-0}" --save-dir "$runs/$(name "$spec")" \
      --recipes "recipes/long/minirl_smollm2_moe.yaml recipes/long/frontier.yaml recipes/long/fixed_lr.yaml${overlay:+ ${overlay#:}}" \
      -- "--model.init_args.optimizer.init_args.lr=$lr" ${FIT_ARGS:-} &  # FIT_ARGS: for every run
    pids+=($!) started+=("$(name "$spec")")
  done
  for i in "${!pids[@]}"; do  # (a bare wait returns 0 whatever the runs did)
    wait "${pids[$i]}" || failed+=("${started[$i]}")  # the others still count: logged, copied, reported
  done
  for spec in ${specs[*]}; do
    for run in "$runs/$(name "$spec")"/*/version_0; do
      if [ -f "$run/metrics.csv" ]; then
        dest="$out/logs/$(name "$spec")/version_0"
        mkdir -p "$dest" && python3 -m stable_rl.analysis.compact_log "$run/metrics.csv" --into "$dest/metrics.csv.xz" > /dev/null
        if [ -f "$run/console.log" ]; then  # the run's own console, without this machine's paths
          python3 "$(dirname "$0")/scrub_paths.py" < "$run/console.log" | gzip -9n > "$dest/console.txt.gz"
        fi
      fi
    done
  done
fi
python3 -m stable_rl.analysis.report "$out"/logs/*/version_0 --out "$out"
if [ -n "${failed[*]:-}" ]; then
  echo "run_fixed_lr.sh: failed runs: ${failed[*]} (the report has what they logged)" >&2
  exit 1
fi
