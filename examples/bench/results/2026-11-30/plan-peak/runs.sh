#!/bin/bash
# plan's likely peak against the ranks' cgroup peaks (BENCHMARKS.md, "The likely peak").
# 1. The memory fills (and CPU costs) fitted on 2026-11-29's runs: the grid of plan-split/grid and the runs
#    with a training step (plan-split/step-*), on all their nodes (fit-all) or on 1 and 2 only (fit-1and2).
# 2. New runs on 2026-11-30 (runs/): the grid (1-4 nodes, 25 % and 100 %, 8 KB, 110 KB, 1 MB) and a training
#    step on 3 nodes; they ran with fit-1and2's costs (runs/*/plancheck.txt: the plan's time and likely peak
#    against them), and each fit's report holds them against its costs (fit-*/report-*.txt).
# Usage: examples/bench/results/2026-11-30/plan-peak/runs.sh OUT [BUILD]   (OUT: where new runs go)
set -e
cd "$(dirname "$0")/../../../../.."
OUT=${1:?where the new runs go}; BUILD=${2:-bin/brandrt}
D=examples/bench/results/2026-11-30/plan-peak; P=examples/bench/results/2026-11-29/plan-split
G=/var/tmp/brandrt-bench/plangrid
IN="$P/grid/8KB/results.jsonl=$G/size-8KB $P/grid/110KB/results.jsonl=$G/size-110KB $P/grid/1MB/results.jsonl=$G/size-1MB
    $P/step-8KB/results.jsonl=$G/size-8KB $P/step-110KB/results.jsonl=$G/size-110KB $P/step-1MB/results.jsonl=$G/size-1MB"
mkdir -p "$OUT/fit-all" "$OUT/fit-1and2"
.venv/bin/python examples/bench/calibrate.py --brandrt "$BUILD" --out "$OUT/fit-all/costs.json" $IN
.venv/bin/python examples/bench/calibrate.py --brandrt "$BUILD" --nodes 1,2 --out "$OUT/fit-1and2/costs.json" $IN
.venv/bin/python examples/bench/plancheck.py --work $G --out "$OUT/grid" --files 60000,12000,1300 --file-size 8KB,110KB,1MB \
  --nodes 1,2,3,4 --mem 25%,100% --cpu-costs "$OUT/fit-1and2/costs.json" --brandrt "$BUILD" > "$OUT/grid.txt" 2>&1
for spec in "1MB 1300 0.5" "110KB 12000 0.1" "8KB 60000 0.02"; do
  set -- $spec
  .venv/bin/python examples/bench/plancheck.py --work $G --out "$OUT/step3-$1" --files $2 --file-size $1 --nodes 3 \
    --mem 25%,100% --step $3 --cpu-costs "$OUT/fit-1and2/costs.json" --brandrt "$BUILD" > "$OUT/step3-$1.txt" 2>&1
done
for fit in fit-1and2 fit-all; do
  .venv/bin/python examples/bench/plancheck.py --report "$OUT/grid" --file-size 8KB,110KB,1MB --work $G \
    --cpu-costs "$OUT/$fit/costs.json" --brandrt "$BUILD" > "$OUT/$fit/report-grid.txt"
  for s in 8KB 110KB 1MB; do
    .venv/bin/python examples/bench/plancheck.py --report "$OUT/step3-$s" --work $G/size-$s \
      --cpu-costs "$OUT/$fit/costs.json" --brandrt "$BUILD" > "$OUT/$fit/report-step3-$s.txt"
  done
done
grep -h "likely peak:" "$OUT"/fit-*/report-*.txt
