#!/bin/bash
# cg2.sh BIN TAG [MEM]: two ranks on this host (--allow-shared-node), each in a memory cgroup of its own
# without a limit; a DataLoader of 4 workers beside each that checks every file where it lies (--hand-mem 0);
# prints each rank's start-up footprint and its cgroup's peak. CAP=1: each cgroup limited to exactly its
# rank's footprint (serve --footprint). SLOW=S [STALL=T]: slowread.py's readers instead of the DataLoader.
# EXTRA: more serve flags. CHUNKS, INPUT: the dataset (packed, and its files); OUT: where runs go.
cd /work/main
BIN=$1; TAG=$2; M=${3:-100%}
C=${CHUNKS:-/var/tmp/s65/c1m}; I=${INPUT:-/var/tmp/s65/in1m}; O=${OUT:-/var/tmp/s66}/$TAG; mkdir -p $O
MPI="mpirun --allow-run-as-root --oversubscribe --bind-to none"
$MPI -np 2 $BIN serve --chunks $C --mem $M --epochs 3 --hand-mem 0 --allow-shared-node $EXTRA --footprint > $O/fp.log 2>&1
for r in 0 1; do CG=/sys/fs/cgroup/memory/s66-$r; rmdir $CG 2>/dev/null; mkdir -p $CG
  lim=-1; [ -n "$CAP" ] && lim=$(grep "rank $r: the rank needs" $O/fp.log | grep -o '(\([0-9]*\) bytes) of memory' | grep -o '[0-9]*')
  echo $lim > $CG/memory.limit_in_bytes; done
sync; echo 3 > /proc/sys/vm/drop_caches
A=$(mktemp -d); export BRANDRT_ATTACH=$A
$MPI -np 2 -x BRANDRT_ATTACH sh -c "echo \$\$ > /sys/fs/cgroup/memory/s66-\$OMPI_COMM_WORLD_RANK/tasks; exec $BIN serve --chunks $C --mem $M --epochs 3 --hand-mem 0 --allow-shared-node $EXTRA" > $O/serve.log 2>&1 &
for r in 0 1; do
  if [ -n "$SLOW" ]; then timeout 600 /usr/bin/python3 $(dirname $(readlink -f $0))/slowread.py $r 4 3 $SLOW $STALL > $O/loader$r.log 2>&1 & else timeout 600 /usr/bin/python3 -W ignore python/tests/loader.py --local-rank $r --input $I --out $O/out$r.json --workers 4 --batch-size 64 --epochs 3 > $O/loader$r.log 2>&1 & fi
done
wait
for r in 0 1; do
  fp=$(grep "rank $r: the rank needs" $O/serve.log | grep -o '(\([0-9]*\) bytes) of memory' | grep -o '[0-9]*')
  pk=$(cat /sys/fs/cgroup/memory/s66-$r/memory.max_usage_in_bytes)
  oom=$(grep "^oom_kill " /sys/fs/cgroup/memory/s66-$r/memory.oom_control)
  echo "$TAG rank $r ($oom): footprint $((fp>>20)) MiB, the kernel's peak $((pk>>20)) MiB ($((100*pk/fp))%)"
done
grep -h "peaked\|exactly\|Error\|error" $O/serve.log $O/loader*.log | cut -c1-250 | head -8
rm -rf $A
