#!/bin/bash
# serve with and without --order-out, 1.6 M files of ~60 B (8 shards, K=64), one rank, 3 epochs, 2 rounds:
# the kernel-counted peaks (examples/bench/cgpeak.sh). NEW is this build's binary, D the packed dataset.
# Output: three-epochs.txt
cd "$(git rev-parse --show-toplevel)"
: "${NEW:=bin/brandrt}" "${D:=/var/tmp/m46/chunks}" "${OUT:=/var/tmp/order-out}"
mkdir -p "$OUT"
for r in 1 2; do
  for mode in with without; do
    extra=""; [ $mode = with ] && extra="--order-out $OUT/order.txt --force"
    echo "== $mode round $r $(date +%T)"
    examples/bench/cgpeak.sh "$NEW" serve --chunks "$D" --mem 25% --consume 1 --epochs 3 $extra 2>&1 | grep -v "^  \|^epoch" | tail -4
  done
done
