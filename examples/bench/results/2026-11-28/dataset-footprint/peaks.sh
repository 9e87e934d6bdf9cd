#!/bin/bash
# peaks.sh NP BIN [serve args...] (WORK: a scratch directory): each rank in its own memory cgroup (no limit); prints each rank's footprint and kernel peak
mkdir -p "${WORK:-/var/tmp/m46}"
np=$1; bin=$2; shift 2
base=/sys/fs/cgroup/memory/m46
for r in $(seq 0 $((np-1))); do rmdir $base-$r 2>/dev/null; mkdir -p $base-$r; done
sync; echo 3 > /proc/sys/vm/drop_caches
export BRANDRT_ALLOW_SHARED_NODE=1
M="mpirun --allow-run-as-root --oversubscribe --bind-to none -x BRANDRT_ALLOW_SHARED_NODE -np $np"
$M $bin serve "$@" --footprint 2>&1 | grep -o 'rank [0-9]*: the rank needs.*' | sed 's/for its chunk reads.*rings/…/' | sort
( while :; do for r in $(seq 0 $((np-1))); do awk -v r=$r '$1=="total_rss"{a=$2} $1=="total_shmem"{s=$2} $1=="total_cache"{c=$2} END{print r, a, s, c}' $base-$r/memory.stat; done; sleep 0.2; done > ${WORK:-/var/tmp/m46}/samples.txt 2>/dev/null ) & sp=$!
/usr/bin/time -f "wall %e s" $M sh -c 'echo $$ > "$0-$OMPI_COMM_WORLD_RANK/cgroup.procs" && exec "$@"' $base $bin serve "$@" > ${WORK:-/var/tmp/m46}/last.log 2>&1
kill $sp; grep -c "exactly once" ${WORK:-/var/tmp/m46}/last.log; tail -1 ${WORK:-/var/tmp/m46}/last.log
for r in $(seq 0 $((np-1))); do
  echo "rank $r peak $(( $(cat $base-$r/memory.max_usage_in_bytes) / 1048576 )) MiB; anon max $(awk -v r=$r '$1==r && $2>m{m=$2} END{print int(m/1048576)}' ${WORK:-/var/tmp/m46}/samples.txt) MiB, shmem max $(awk -v r=$r '$1==r && $3>m{m=$3} END{print int(m/1048576)}' ${WORK:-/var/tmp/m46}/samples.txt) MiB, anon+shmem max $(awk -v r=$r '$1==r && $2+$3>m{m=$2+$3} END{print int(m/1048576)}' ${WORK:-/var/tmp/m46}/samples.txt) MiB"
  rmdir $base-$r
done
