#!/bin/bash
# old (374e554, whole plan on every rank) against new (plan per rank), alternated, 3 emulated nodes, NAS, a quarter
cd /work/main
for r in "$@"; do
  for v in old new; do
    .venv/bin/python examples/bench/loaders.py --work /var/tmp/brandrt-bench/loaders --storage nas --nodes 3 --mem 25% --systems brandrt-window --brandrt /var/tmp/m45/$v/brandrt --out /var/tmp/m45/ab3-$v-$r > /var/tmp/m45/ab3-$v-$r.log 2>&1
    echo "$v $r rc=$?"
  done
done
