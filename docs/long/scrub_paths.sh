#!/bin/bash
# Copies standard input to standard output without this machine's paths, for a console log about to be
# committed: the working directory's prefix is dropped (the directory alone becomes .), each other absolute
# PYTHONPATH entry (a --target install folder) and any .../site-packages/ become <site-packages>/, the home
# folder ~, an interpreter's path (.../bin/python3) python3.
#   bash docs/long/scrub_paths.sh < /tmp/detached/lr.log | gzip -9n > docs/long/fixed_lr/wave3/console.txt.gz
set -euo pipefail
seds=(-e "s|$PWD/||g" -e "s|$PWD\\b|.|g")
IFS=: read -ra entries <<< "${PYTHONPATH:-}"
for entry in "${entries[@]}"; do
  if [[ $entry == /* && $entry != "$PWD"* ]]; then seds+=(-e "s|${entry%/}/|<site-packages>/|g"); fi
done
[[ ${HOME:-/} == / ]] || seds+=(-e "s|${HOME%/}/|~/|g")
exec sed "${seds[@]}" -e 's|/[^ :"]*/site-packages/|<site-packages>/|g' -e "s|/[^ :\"']*/bin/python|python|g"
