#!/bin/bash
# ./ab.sh SIZE FILES MEM NAME: HEAD (e808f4f) against the build that counts
# a client's unanswered reads as the largest file, alternated, two rounds
size=$1 files=$2 mem=$3 name=$4
cd /work/main
for r in 1 2; do for v in head room; do
  .venv/bin/python examples/bench/loaders.py --work /var/tmp/brandrt-bench/plangrid --storage nas --systems brandrt-window \
    --files "$files" --file-size "$size" --nodes 1 --mem "$mem" --workers 4 --brandrt ${BUILDS:-/var/tmp/s65}/brandrt-$v --out ${OUT:-/var/tmp/s65}/$name-$v-$r > ${OUT:-/var/tmp/s65}/$name-$v-$r.log 2>&1
  echo "$v $r rc=$?"
done; done
