#!/bin/bash
# run.sh BIN NAME: a fixed run (3 ranks of this host, /var/tmp/rs/chunks from the README's session, 25 %,
# 2 epochs) with BIN; its order file /tmp/id-NAME.order (md5 printed) and statistics /tmp/id-NAME.json
BIN=$1; N=$2
rm -f /tmp/id-$N.order /tmp/id-$N.json
BRANDRT_ALLOW_SHARED_NODE=1 timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 3 $BIN serve --chunks /var/tmp/rs/chunks --mem 25% --consume 2 --epochs 2 --order-out /tmp/id-$N.order --stats-json /tmp/id-$N.json > /tmp/id-$N.log 2>&1
echo "$N rc $? order $(md5sum < /tmp/id-$N.order | cut -c1-12) lines $(wc -l < /tmp/id-$N.order)"
