#!/bin/bash
# Pack every run's log under RUNS (metrics.csv, heldout_outcomes.csv, config.yaml) into ARCHIVE (.tar.xz), paths
# relative to RUNS, in a fixed order with fixed owners and times, so that the same logs give the same bytes:
# experiments/atlas/logs/ keeps the archives and analysis.py reads them (console.log stays with the run).
#   bash experiments/atlas/pack_logs.sh runs/atlas/pilot pilot.tar.xz
set -euo pipefail
runs=${1:?RUNS} archive=${2:?ARCHIVE}
archive=$(cd "$(dirname "$archive")" && pwd)/$(basename "$archive")
cd "$runs"
find . -path '*/version_*/*' \( -name metrics.csv -o -name heldout_outcomes.csv -o -name config.yaml \) -print0 \
  | tar --null --sort=name --owner=0 --group=0 --mtime=2026-01-01 -cJf "$archive" -T -
tar -tJf "$archive" | grep -c metrics.csv | sed 's/$/ metrics.csv packed/'
