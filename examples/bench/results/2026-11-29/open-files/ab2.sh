#!/bin/bash
# brandrt alone, the build before (old) and this one (new) alternating, with the CPU seconds of every process by name around each run
cd /work/main
C=examples/bench/results/2026-11-28/nas-reads/cpuout.py
for r in 1 2 3; do
  if [ $((r % 2)) = 1 ]; then order="new old"; else order="old new"; fi
  for b in $order; do
    echo "== round $r $b $(date +%T)"
    python3 $C > /var/tmp/m47/ab2/$b-r$r.cpu & cp=$!
    .venv/bin/python examples/bench/loaders.py --work /var/tmp/brandrt-bench/sizes/size-8KB-400k --files 400000 --file-size 8KB --storage nas --mem 25% --systems brandrt-window --brandrt /var/tmp/m47/$b-brandrt --out /var/tmp/m47/ab2/$b-r$r > /var/tmp/m47/ab2/$b-r$r.log 2>&1
    echo "rc=$?"
    kill -TERM $cp; wait $cp
  done
done
echo done
