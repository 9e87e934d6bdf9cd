#!/bin/bash
# 10 epochs with --order-out, the same dataset: OLD (the build before: the whole order in memory until the end)
# and NEW (this one: written as each epoch ends); then NEW in a memory cgroup of exactly its footprint.
# Output: ten-epochs.txt, in-its-footprint.txt
cd "$(git rev-parse --show-toplevel)"
: "${OLD:?the build before}" "${NEW:=bin/brandrt}" "${D:=/var/tmp/m46/chunks}" "${OUT:=/var/tmp/order-out}"
mkdir -p "$OUT"
for b in old new; do
  bin=$OLD; [ $b = new ] && bin=$NEW
  echo "== $b $(date +%T)"
  examples/bench/cgpeak.sh "$bin" serve --chunks "$D" --mem 25% --consume 1 --epochs 10 --order-out "$OUT/order10-$b.txt" --force 2>&1 | grep "cgpeak\|needs" | sed 's/of memory: .*//'
done
cmp "$OUT/order10-old.txt" "$OUT/order10-new.txt" && echo "the same bytes: $(stat -c %s "$OUT/order10-new.txt")"
# in a cgroup of exactly the footprint NEW prints (859889664 bytes here)
examples/bench/cgpeak.sh --limit 859889664 "$NEW" serve --chunks "$D" --mem 25% --consume 1 --epochs 10 --order-out "$OUT/order10-lim.txt" --force 2>&1 |
  grep "cgpeak\|exactly once\|brandrt:" | cut -c1-200
cmp "$OUT/order10-lim.txt" "$OUT/order10-old.txt" && echo same-bytes
