#!/usr/bin/env bash
# The GPU tests on a CUDA machine with vLLM installed: `bash tests/gpu/run.sh [pytest args]` from the project
# root (on a GPU machine without network, after vLLM's wheels are installed into /tmp/site:
# tools/gpu-offline/README.md). Warnings are shown, not raised: vLLM 0.26 on torch 2.11 emits
# deprecation warnings that the CPU suite's filterwarnings=error would turn into failures.
set -euo pipefail
export PYTHONPATH="${SITE:-/tmp/site}:$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 PYTHONUNBUFFERED=1
python3 -c "import vllm, torch; print('vLLM', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name())"
exec python3 -m pytest -m "gpu and vllm" -W default -p no:cacheprovider -rA -s "${@:-tests/gpu}"
