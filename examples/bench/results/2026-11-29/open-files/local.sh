#!/bin/bash
# serve alone on the local disk, 400,000 files of 8 KB, --open-files 0 and the default alternating, in a cgroup (kernel memory peak too); run from the repository
for r in 1 2 3; do
  for o in 0 default; do
    a=""; [ $o = 0 ] && a="--open-files 0"
    echo "== round $r, --open-files $o"
    bash examples/bench/cgpeak.sh bin/brandrt serve --chunks /var/tmp/brandrt-bench/sizes/size-8KB-400k/chunks-k64 --mem 25% --consume 2 --epochs 3 --batch 0 $a 2>&1 | grep -E 'cgpeak|^epoch' | cut -c1-200
  done
done
