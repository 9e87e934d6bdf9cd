#!/bin/bash
# cg.sh CHUNKS INPUT MEM HANDMEM LOADERFLAGS... : serve in a cgroup of its footprint, loader outside
cd /work/main
C=$1; I=$2; M=$3; H=$4; shift 4
fp=$(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 1 bin/brandrt serve --chunks $C --mem $M --epochs 3 --hand-mem $H --footprint 2>&1 | grep -o '(\([0-9]*\) bytes) of memory' | grep -o '[0-9]*')
CG=/sys/fs/cgroup/memory/s65; rmdir $CG 2>/dev/null; mkdir -p $CG; echo ${LIMIT:-$fp} > $CG/memory.limit_in_bytes
sync; echo 3 > /proc/sys/vm/drop_caches
A=$(mktemp -d); export BRANDRT_ATTACH=$A
sh -c "echo \$\$ > $CG/tasks; exec mpirun --allow-run-as-root --oversubscribe --bind-to none -np 1 -x BRANDRT_ATTACH bin/brandrt serve --chunks $C --mem $M --epochs 3 --hand-mem $H" > /var/tmp/s65/cg-serve.log 2>&1 &
timeout 300 /usr/bin/python3 -W ignore python/tests/loader.py --local-rank 0 --input $I --out /var/tmp/s65/out.json --workers 4 --batch-size 64 --epochs 3 "$@" > /var/tmp/s65/cg-loader.log 2>&1
echo loader rc=$?
wait
echo "footprint $fp peak $(cat $CG/memory.max_usage_in_bytes) oom $(grep oom_kill $CG/memory.oom_control)"
tail -3 /var/tmp/s65/cg-serve.log | cut -c1-300
