#!/bin/bash
# Pack every run's log under RUNS (metrics.csv, heldout_outcomes.csv, config.yaml) into ARCHIVE (.tar.xz), paths
# relative to RUNS, in a fixed order with fixed owners and times, so that the same logs give the same bytes;
# metrics.csv goes in its shortest exact form (stable_rl.analysis.compact_log: the same float32 numbers, half the
# size); into logs/atlas/, thinned first (stable_rl.analysis.thin_log: the collapse rule's columns and validations
# whole, the rest every 10th step, timings but time/step left out). experiments/atlas/logs/ keeps the archives and
# analysis.py reads them (console.log stays with the run).
#   bash experiments/atlas/pack_logs.sh runs/atlas/pilot/control experiments/atlas/logs/pilot/control.tar.xz
# RUNS may also be an archive this script wrote (packed again, e.g. after the compaction changed).
set -euo pipefail
runs=${1:?RUNS} archive=${2:?ARCHIVE}
archive=$(cd "$(dirname "$archive")" && pwd)/$(basename "$archive")
copy=$(mktemp -d) && trap 'rm -rf "$copy"' EXIT
if [ -f "$runs" ]; then
  tar -C "$copy" -xJf "$runs"
else
  (cd "$runs" && find . -path '*/version_*/*' \( -name metrics.csv -o -name heldout_outcomes.csv -o -name config.yaml \) \
    -print0 | tar --null -cf - -T -) | tar -C "$copy" -xf -
fi
case $archive in  # the atlas's own archives (~600 runs): the collapse rule's columns whole, the others thinned
  */logs/atlas/*) find "$copy" -name metrics.csv -print0 | xargs -0 python3 -m stable_rl.analysis.thin_log --every 10 \
    --keep train/reward,train/entropy,train/skipped_updates ;;  # endpoints.SIGNS (PROTOCOL Part 2c)
esac
find "$copy" -name metrics.csv -print0 | xargs -0 python3 -m stable_rl.analysis.compact_log > /dev/null
cd "$copy"
find . -type f -print0 | LC_ALL=C sort -z | tar --null --owner=0 --group=0 --mtime=2026-01-01 -cJf "$archive.tmp" -T -
mv "$archive.tmp" "$archive"
tar -tJf "$archive" | grep -c metrics.csv | sed 's/$/ metrics.csv packed/'
