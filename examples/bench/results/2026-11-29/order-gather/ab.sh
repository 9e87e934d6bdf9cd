#!/bin/bash
# ab.sh BIN LABEL: 4 ranks on this host, 1.6 M files of ~61 B (8 shards), a quarter in memory, 3 epochs, --batch 256;
# per rank: max RSS (KB), user and system CPU seconds (/usr/bin/time); rank 0's footprint line, epoch lines and order lines
bin=$1; label=$2
out=/var/tmp/s63/ab-$label.log
sync; echo 3 > /proc/sys/vm/drop_caches
mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 -x BRANDRT_ALLOW_SHARED_NODE=1 \
  sh -c 'exec /usr/bin/time -f "time: rank $OMPI_COMM_WORLD_RANK: %M KB max RSS, %U s user, %S s system, %e s" "$0" serve --chunks /var/tmp/m46/chunks --mem 25% --consume 2 --epochs 3 --batch 256' $bin > $out 2>&1
echo "rc=$?" >> $out
echo "== $label"; grep -E '^time:|^epoch |  order|rc=' $out | cut -c1-200 | sort -s -k1,1
grep -o 'rank 0: the rank needs [^(]*' $out
