#!/bin/bash
# A/B on one emulated node holding the dataset: the old build against the
# new, alternated, two rounds. ./ab.sh 1MB 1300 ab (1,300 files of ~1 MB),
# ./ab.sh 110KB 12000 ab110 (12,000 of ~110 KB).
size=$1 files=$2 name=$3
cd /work/main
for r in 1 2; do for v in old new; do
  .venv/bin/python examples/bench/loaders.py --work /var/tmp/brandrt-bench/plangrid --storage nas --systems brandrt-window \
    --files "$files" --file-size "$size" --nodes 1 --mem 100% --workers 4 --brandrt /var/tmp/s64/brandrt-$v --out /var/tmp/s64/$name-$v-$r > /var/tmp/s64/$name-$v-$r.log 2>&1
  echo "$v $r rc=$?"
done; done
