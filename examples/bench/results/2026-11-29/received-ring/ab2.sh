#!/bin/bash
# ./ab2.sh SIZE FILES MEM NAME NODES: brandrt-old (b74250b) against brandrt-new, alternated, one round
size=$1 files=$2 mem=$3 name=$4 nodes=${5:-2}
cd /work/main
for r in ${ROUNDS:-1}; do for v in old new; do
  .venv/bin/python examples/bench/loaders.py --work /var/tmp/brandrt-bench/plangrid --storage nas --systems brandrt-window \
    --files "$files" --file-size "$size" --nodes $nodes --mem "$mem" --workers 4 --epochs ${EPOCHS:-3} --brandrt ${BUILDS:-/var/tmp/s66}/brandrt-$v --out ${OUT:-/var/tmp/s66/ab}/$name-$v-$r > ${OUT:-/var/tmp/s66/ab}/$name-$v-$r.log 2>&1
  echo "$name $v $r rc=$?"
done; done
