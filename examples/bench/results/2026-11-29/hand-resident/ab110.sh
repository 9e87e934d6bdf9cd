#!/bin/bash
# A/B: one node holding the dataset, 110 KB files, old vs new
cd /work/main
for r in 1 2; do for v in old new; do
  .venv/bin/python examples/bench/loaders.py --work /var/tmp/brandrt-bench/plangrid --storage nas --systems brandrt-window \
    --files 12000 --file-size 110KB --nodes 1 --mem 100% --workers 4 --brandrt /var/tmp/s64/brandrt-$v --out /var/tmp/s64/ab110-$v-$r > /var/tmp/s64/ab110-$v-$r.log 2>&1
  echo "$v $r rc=$?"
done; done
