#!/bin/bash
# A/B: one node holding the dataset, 1 MB files, old (hand cap 512 MB) vs new (every file handed on)
cd /work/main
for r in 1 2; do for v in old new; do
  .venv/bin/python examples/bench/loaders.py --work /var/tmp/brandrt-bench/plangrid --storage nas --systems brandrt-window \
    --files 1300 --file-size 1MB --nodes 1 --mem 100% --workers 4 --brandrt /var/tmp/s64/brandrt-$v --out /var/tmp/s64/ab-$v-$r > /var/tmp/s64/ab-$v-$r.log 2>&1
  echo "$v $r rc=$?"
done; done
