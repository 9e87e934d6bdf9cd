#!/bin/bash
# 3 nodes at a quarter, brandrt alone, labels inline (new) against before (old), alternating, 2 rounds; then 8 KB rounds 3 and 4 (LitData and new; old alone)
O=/var/tmp/m49/ab3; mkdir -p $O
B="/work/main/.venv/bin/python examples/bench/loaders.py --storage nas --mem 25% --brandrt /work/main/bin/brandrt"
run() { # name repo args...
  local n=$1 r=$2; shift 2
  echo "== $n $(date +%T)"; (cd $r && $B "$@" --out $O/$n > $O/$n.log 2>&1); echo "rc=$?"
}
K8="--work /var/tmp/brandrt-bench/sizes/size-8KB-400k --files 400000 --file-size 8KB"
K110="--work /var/tmp/brandrt-bench/loaders"
run 3n-new-r1 /work/main $K110 --nodes 3 --systems brandrt-window
run 3n-old-r1 /var/tmp/m49/old $K110 --nodes 3 --systems brandrt-window
run 3n-old-r2 /var/tmp/m49/old $K110 --nodes 3 --systems brandrt-window
run 3n-new-r2 /work/main $K110 --nodes 3 --systems brandrt-window
run 8KB-new-r3 /work/main $K8 --systems litdata,brandrt-window
run 8KB-old-r3 /var/tmp/m49/old $K8 --systems brandrt-window
run 8KB-old-r4 /var/tmp/m49/old $K8 --systems brandrt-window
run 8KB-new-r4 /work/main $K8 --systems litdata,brandrt-window
echo done $(date +%T)
