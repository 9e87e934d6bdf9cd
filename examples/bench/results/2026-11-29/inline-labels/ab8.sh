#!/bin/bash
# 8 KB, one node, NAS, a quarter: LitData and brandrt with labels inline (new) in one run, brandrt as before (old) in the next; alternating, 2 rounds
C=/work/main/examples/bench/results/2026-11-28/nas-reads/cpuout.py
O=/var/tmp/m49/ab8
for r in 1 2; do
  if [ $r = 1 ]; then order="new old"; else order="old new"; fi
  for b in $order; do
    if [ $b = new ]; then R=/work/main; S=litdata,brandrt-window; else R=/var/tmp/m49/old; S=brandrt-window; fi
    echo "== round $r $b $(date +%T)"
    python3 $C > $O/$b-r$r.cpu & cp=$!
    (cd $R && /work/main/.venv/bin/python examples/bench/loaders.py --work /var/tmp/brandrt-bench/sizes/size-8KB-400k --files 400000 --file-size 8KB --storage nas --mem 25% --systems $S --brandrt /work/main/bin/brandrt --out $O/$b-r$r > $O/$b-r$r.log 2>&1)
    echo "rc=$?"
    kill -TERM $cp; wait $cp
  done
done
echo done $(date +%T)
