#!/bin/bash
# after ab8: LitData with the same inline labels (8 KB); 110 KB and 1 MB new against old; then 3 nodes at a quarter, 2 rounds
O=/var/tmp/m49/ab2; mkdir -p $O
B="/work/main/.venv/bin/python examples/bench/loaders.py --storage nas --mem 25% --brandrt /work/main/bin/brandrt"
run() { # name repo args...
  local n=$1 r=$2; shift 2
  echo "== $n $(date +%T)"; (cd $r && $B "$@" --out $O/$n > $O/$n.log 2>&1); echo "rc=$?"
}
K8="--work /var/tmp/brandrt-bench/sizes/size-8KB-400k --files 400000 --file-size 8KB"
K110="--work /var/tmp/brandrt-bench/loaders"
M1="--work /var/tmp/brandrt-bench/sizes/size-1MB --files 3300 --file-size 1MB"
run 8KB-peers-inline /work/main $K8 --systems litdata,brandrt-window --peers-inline
run 110KB-new-r1 /work/main $K110 --systems litdata,brandrt-window
run 110KB-old-r1 /var/tmp/m49/old $K110 --systems brandrt-window
run 1MB-old-r1 /var/tmp/m49/old $M1 --systems brandrt-window
run 1MB-new-r1 /work/main $M1 --systems brandrt-window
run 110KB-old-r2 /var/tmp/m49/old $K110 --systems brandrt-window
run 110KB-new-r2 /work/main $K110 --systems litdata,brandrt-window
run 3nodes-25 /work/main $K110 --nodes 3 --repeat 2 --systems random,litdata,brandrt-window
echo done $(date +%T)
