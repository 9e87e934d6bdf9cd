#!/bin/bash
# The plan against a training slower than its DataLoader (loaders.py --step): 1 and 2 nodes, a quarter of
# the dataset in memory and all of it, 3 epochs, with the CPU costs the grid of this directory fitted
# (grid/costs.json; it ran with the same file at /var/tmp/s67/grid/costs.json and BUILD=/var/tmp/s67/brandrt,
# a copy of 40af26e's bin/brandrt).
# Usage: examples/bench/results/2026-11-29/plan-split/steps.sh OUT [BUILD]
set -e
cd "$(dirname "$0")/../../../../.."
OUT=${1:?where the runs go}; BUILD=${2:-bin/brandrt}
for spec in "1MB 1300 0.5" "110KB 12000 0.1" "8KB 60000 0.02"; do
  set -- $spec
  .venv/bin/python examples/bench/plancheck.py --work /var/tmp/brandrt-bench/plangrid --out "$OUT/step-$1" \
    --files $2 --file-size $1 --nodes 1,2 --mem 25%,100% --step $3 \
    --cpu-costs examples/bench/results/2026-11-29/plan-split/grid/costs.json --brandrt "$BUILD" > "$OUT/step-$1.log" 2>&1
  echo "$1 rc=$?"
done
