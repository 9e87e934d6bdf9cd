#!/bin/bash
# cgpeak.sh [--limit BYTES] COMMAND...: run COMMAND in a fresh cgroup v1
# memory group (page cache dropped first; no limit unless --limit), then
# print what the kernel counted: the group's peak (memory.max_usage_in_bytes)
# and the largest anonymous (total_rss), shared-memory (total_shmem) and
# page-cache (total_cache, which includes shmem) figures sampled every
# 0.1 s, the kernel's own memory at its peak (memory.kmem.max_usage_in_bytes,
# where the kernel counts it), and whether the OOM killer struck. Needs root.
#   examples/bench/cgpeak.sh bin/brandrt serve --chunks D --mem 100MiB --consume 4 --epochs 3
set -u
limit=0
if [ "${1:-}" = --limit ]; then limit=$2; shift 2; fi
if [ $# -eq 0 ]; then sed -n '2,8p' "$0"; exit 2; fi
root=/sys/fs/cgroup/memory
[ -w $root ] || { echo "cgpeak: $root is not a writable cgroup v1 memory hierarchy (run as root)" >&2; exit 2; }
d=$root/cgpeak-$$
mkdir "$d" || exit 2
trap 'rmdir "$d" 2>/dev/null' EXIT
[ "$limit" != 0 ] && echo "$limit" > "$d/memory.limit_in_bytes"
sync; echo 3 > /proc/sys/vm/drop_caches
( echo $BASHPID > "$d/cgroup.procs"; exec "$@" ) &
pid=$!
rss=0; shm=0; cache=0
stat() { awk -v k="$1" '$1==k {print $2}' "$d/memory.stat"; }
while kill -0 $pid 2>/dev/null; do
  r=$(stat total_rss); s=$(stat total_shmem); c=$(stat total_cache)
  [ "$r" -gt $rss ] && rss=$r; [ "$s" -gt $shm ] && shm=$s; [ "$c" -gt $cache ] && cache=$c
  sleep 0.1
done
wait $pid; rc=$?
mib() { echo "$(( $1 >> 20 )) MiB"; }
kmem=""
[ -r "$d/memory.kmem.max_usage_in_bytes" ] && kmem=", kernel $(mib $(cat "$d/memory.kmem.max_usage_in_bytes"))"
echo "cgpeak: exit $rc; peak $(mib $(cat "$d/memory.max_usage_in_bytes")) (anonymous $(mib $rss), shared $(mib $shm), cache with shared $(mib $cache)$kmem); $(grep oom_kill "$d/memory.oom_control" | tr '\n' ' ')"
# the group goes once its processes are gone
for _ in 1 2 3 4 5 6 7 8 9 10; do [ -s "$d/cgroup.procs" ] || break; sleep 0.2; done
exit $rc
