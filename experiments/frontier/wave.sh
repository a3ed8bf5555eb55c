# Sourced by run_*.sh. wave OUT SAVE_DIR PER_GPU "SEEDS" RECIPE...: the recipes x seeds, PER_GPU runs sharing
# each GPU that CUDA_VISIBLE_DEVICES shows (every GPU where unset), then each run's metrics.csv copied into
# OUT/logs/<run>/version_0/ as metrics.csv.xz in its shortest exact form (stable_rl.analysis.compact_log), where git
# keeps it (stable_rl.analysis.report reads either). (A GPU
# machine's: without a GPU the runs go one at a time.)
wave() {
  local out=$1 runs=$2 per_gpu=$3 seeds=$4
  shift 4
  python3 -m stable_rl.cli.sweep --per-gpu "$per_gpu" --seeds $seeds --save-dir "$runs" \
    --recipes "$@" || true  # a failed run is named by the sweep; the others still count
  for csv in "$runs"/*/version_0/metrics.csv; do
    [ -f "$csv" ] || continue  # no run wrote a log: not a run named '*'
    local name
    name=$(basename "$(dirname "$(dirname "$csv")")")
    mkdir -p "$out/logs/$name/version_0" && rm -f "$out/logs/$name/version_0"/metrics.csv{,.gz}
    python3 -m stable_rl.analysis.compact_log "$csv" --into "$out/logs/$name/version_0/metrics.csv.xz" > /dev/null
  done
}
