#!/bin/bash
# Pack every run's log under RUNS (metrics.csv, heldout_outcomes.csv, config.yaml, console.log) into ARCHIVE
# (.tar.gz), paths relative to RUNS: experiments/atlas/logs/ keeps them unpacked in git.
#   bash experiments/atlas/pack_logs.sh runs/atlas/pilot pilot.tar.gz
set -euo pipefail
runs=${1:?RUNS} archive=${2:?ARCHIVE}
archive=$(cd "$(dirname "$archive")" && pwd)/$(basename "$archive")
cd "$runs"
find . -path '*/version_*/*' \( -name metrics.csv -o -name heldout_outcomes.csv -o -name config.yaml -o -name console.log \) \
  -print0 | tar --null -czf "$archive" -T -
tar -tzf "$archive" | grep -c metrics.csv | sed 's/$/ metrics.csv packed/'
