#!/bin/bash
# usage: onehost.sh BIN OUT.json: serve Fashion-MNIST (K=64, packed by examples/pytorch/fashion_mnist.py and
# brandrt pack into /var/tmp/brandrt-bench/fashion-mnist-chunks-k64) on 3 ranks of this host for 3 epochs
# with BIN, and print each epoch's files/s and messages from its --stats-json
BIN=$1; OUT=$2
BRANDRT_ALLOW_SHARED_NODE=1 timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 3 $BIN serve --chunks /var/tmp/brandrt-bench/fashion-mnist-chunks-k64 --mem 25% --consume 2 --epochs 3 --stats-json $OUT > $OUT.log 2>&1
python3 - $OUT <<'PY'
import json,sys
for l in open(sys.argv[1]):
    s=json.loads(l)
    rf=s["remote_files"]; rq=s["remote_requests"]; g=s.get("grants",0); pf=s.get("prefetched",s.get("prefetch_pushes"))
    print("epoch %d: %d files/s, remote files %d, requests %d (%.3f per remote file), grants %d (%.3f), pushed/fetched ahead %d, prefetch hits %d, ok %s" % (s["epoch"], s["files_per_second"], rf, rq, rq/rf, g, g/rf, pf, s["prefetch_hits"], s["files_delivered"]==s["files_expected"]))
PY
