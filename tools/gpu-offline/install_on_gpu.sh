#!/bin/bash
# On a GPU machine without network, after vLLM's parts were appended into /tmp/w/vllm.whl and its other wheels copied
# into /tmp/w/wheels (../shared/tools/vllm-gpu/README.md): install everything into /tmp/site, with .gpu/parts/NAME,
# .gpu/parts/SHA256 and whichever of .gpu/extra, .gpu/sig, .gpu/trl, .gpu/gguf, .gpu/mfu the work needs copied
# into the checkout (tools/gpu-offline/fetch_offline.sh makes them on a machine with network).
#   bash tools/gpu-offline/install_on_gpu.sh && export PYTHONPATH=/tmp/site:$PWD/src HF_HUB_OFFLINE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0
# W and SITE move /tmp/w and /tmp/site. The project's own wheels go in first and alone: vLLM's set brings
# some of the same packages (antlr4), and one pip command with both refuses the duplicate.
set -euo pipefail
w=${W:-/tmp/w} site=${SITE:-/tmp/site}
install() {  # pip's own failure stops the script; its notes on packages already there are left out
  local log
  log=$(python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$@" 2>&1) || { echo "$log" >&2 && return 1; }
  grep -v "^WARNING: Target directory" <<< "$log" || true
}
shopt -s nullglob
own=(.gpu/extra/*.whl .gpu/sig/*.whl .gpu/trl/*.whl .gpu/gguf/*.whl .gpu/mfu/*.whl)
[ ${#own[@]} -eq 0 ] || install "${own[@]}"
[ ! -f .gpu/extra/pycosat-0.6.6.tar.gz ] || install --no-build-isolation .gpu/extra/pycosat-0.6.6.tar.gz
if [ -f "$w/vllm.whl" ]; then
  got=$(sha256sum < "$w/vllm.whl" | cut -d' ' -f1)
  if [ "$got" != "$(cat .gpu/parts/SHA256)" ]; then
    echo "$w/vllm.whl: SHA256 $got is not the parts' (a part missing, sent twice or out of order): send them again from p000" >&2
    exit 1
  fi
  cp "$w/vllm.whl" "$w/$(cat .gpu/parts/NAME)"
  install "$w/$(cat .gpu/parts/NAME)" "$w"/wheels/*.whl
fi
PYTHONPATH=$site python3 -c "import importlib.util as u; print({m: bool(u.find_spec(m)) for m in ('vllm', 'math_verify', 'jsonargparse', 'trl', 'gguf', 'liger_kernel')})"
