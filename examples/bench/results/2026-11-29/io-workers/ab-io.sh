#!/bin/bash
cd /work/main
C=examples/bench/results/2026-11-28/nas-reads/cpuout.py
mkdir -p /var/tmp/m48/abio
for r in 1 2; do
  if [ $((r % 2)) = 1 ]; then order="16 4"; else order="4 16"; fi
  for b in $order; do
    echo "== round $r io$b $(date +%T)"
    python3 $C > /var/tmp/m48/abio/io$b-r$r.cpu & cp=$!
    .venv/bin/python examples/bench/loaders.py --work /var/tmp/brandrt-bench/sizes/size-8KB-400k --files 400000 --file-size 8KB --storage nas --mem 25% --systems brandrt-window --brandrt /var/tmp/m48/brandrt-io$b --out /var/tmp/m48/abio/io$b-r$r > /var/tmp/m48/abio/io$b-r$r.log 2>&1
    echo "rc=$?"
    kill -TERM $cp; wait $cp
  done
done
echo done
