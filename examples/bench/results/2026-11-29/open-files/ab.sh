#!/bin/bash
# A/B: the build before (old) and this one (new), each with LitData in the same run, alternating
cd /work/main
for r in 1 2; do
  if [ $r = 1 ]; then order="new old"; else order="old new"; fi
  for b in $order; do
    echo "== round $r $b $(date +%T)"
    .venv/bin/python examples/bench/loaders.py --work /var/tmp/brandrt-bench/sizes/size-8KB-400k --files 400000 --file-size 8KB --storage nas --mem 25% --systems litdata,brandrt-window --brandrt /var/tmp/m47/$b-brandrt --out /var/tmp/m47/ab/$b-r$r > /var/tmp/m47/ab/$b-r$r.log 2>&1
    echo "rc=$?"
  done
done
echo done
