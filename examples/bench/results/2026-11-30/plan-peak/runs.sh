#!/bin/bash
# plan's likely peak against the ranks' cgroup peaks (BENCHMARKS.md, "The likely peak"), in this directory's layout:
#   runs/grid, runs/step3-SIZE  new runs (2026-11-30): the grid (1-4 nodes, 25 % and 100 %, 8 KB, 110 KB, 1 MB) and
#                               a training step on 3 nodes; plancheck.txt in each is the run's own log
#   fit-all, fit-1and2          the memory fills (and CPU costs) fitted on 2026-11-29's runs (plan-split/grid and the
#                               runs with a step, plan-split/step-*), on all their nodes or on 1 and 2 only: costs.json,
#                               calibrate.txt, and each fit's report of the new runs (report-*.txt, plancheck-grid.png)
# The recorded runs' logs hold them against fit-1and2's costs (then at another path); here they run without costs,
# since the fits need the grid's packed datasets, which the grid run makes (WORK/size-SIZE). The step runs pack
# into WORK itself (one size at a time); their reports read WORK/size-SIZE, the same files (gendata's seed is fixed).
# Usage: examples/bench/results/2026-11-30/plan-peak/runs.sh OUT [BUILD]   (needs root, as loaders.py does)
set -e
cd "$(dirname "$0")/../../../../.."
OUT=${1:?where the new runs and reports go}; BUILD=${2:-bin/brandrt}
P=examples/bench/results/2026-11-29/plan-split; G=/var/tmp/brandrt-bench/plangrid
mkdir -p "$OUT/runs" "$OUT/fit-all" "$OUT/fit-1and2"
.venv/bin/python examples/bench/plancheck.py --work $G --out "$OUT/runs/grid" --files 60000,12000,1300 --file-size 8KB,110KB,1MB \
  --nodes 1,2,3,4 --mem 25%,100% --brandrt "$BUILD" > "$OUT/runs/grid.txt" 2>&1
mv "$OUT/runs/grid.txt" "$OUT/runs/grid/plancheck.txt"
for spec in "1MB 1300 0.5" "110KB 12000 0.1" "8KB 60000 0.02"; do
  set -- $spec
  .venv/bin/python examples/bench/plancheck.py --work $G --out "$OUT/runs/step3-$1" --files $2 --file-size $1 --nodes 3 \
    --mem 25%,100% --step $3 --brandrt "$BUILD" > "$OUT/runs/step3-$1.txt" 2>&1
  mv "$OUT/runs/step3-$1.txt" "$OUT/runs/step3-$1/plancheck.txt"
done
IN="$P/grid/8KB/results.jsonl=$G/size-8KB $P/grid/110KB/results.jsonl=$G/size-110KB $P/grid/1MB/results.jsonl=$G/size-1MB
    $P/step-8KB/results.jsonl=$G/size-8KB $P/step-110KB/results.jsonl=$G/size-110KB $P/step-1MB/results.jsonl=$G/size-1MB"
.venv/bin/python examples/bench/calibrate.py --brandrt "$BUILD" --out "$OUT/fit-all/costs.json" $IN > "$OUT/fit-all/calibrate.txt"
.venv/bin/python examples/bench/calibrate.py --brandrt "$BUILD" --nodes 1,2 --out "$OUT/fit-1and2/costs.json" $IN > "$OUT/fit-1and2/calibrate.txt"
for fit in fit-1and2 fit-all; do
  .venv/bin/python examples/bench/plancheck.py --report "$OUT/runs/grid" --file-size 8KB,110KB,1MB --work $G \
    --cpu-costs "$OUT/$fit/costs.json" --brandrt "$BUILD" > "$OUT/$fit/report-grid.txt"
  mv "$OUT/runs/grid/plancheck.png" "$OUT/$fit/plancheck-grid.png"
  for s in 8KB 110KB 1MB; do
    .venv/bin/python examples/bench/plancheck.py --report "$OUT/runs/step3-$s" --work $G/size-$s \
      --cpu-costs "$OUT/$fit/costs.json" --brandrt "$BUILD" > "$OUT/$fit/report-step3-$s.txt"
  done
done
grep -H "likely peak:" "$OUT"/fit-*/report-*.txt
