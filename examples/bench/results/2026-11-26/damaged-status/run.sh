#!/bin/bash
# run.sh OLD NEW: serve's fixed run of push-ab/identical (3 ranks of this host, /var/tmp/rs/chunks, 25 %,
# --consume 2, 2 epochs) with each build, twice, alternated; then the same on a copy with one byte flipped
# in a file of three shards (rank-00010, -00040, -00075: one per rank), --on-damage skip. Prints each run's
# order md5 and the statistics that differ between the builds (timings dropped), and, for the damaged copy,
# what each epoch delivered and left out.
set -e
OLD=$1 NEW=$2 HERE=$(dirname "$0")
if [ ! -d /var/tmp/rs-dmg ]; then
  cp -r /var/tmp/rs/chunks /var/tmp/rs-dmg
  for s in 00010 00040 00075; do
    python3 -c "import os,sys; p=sys.argv[1]; f=open(p,'r+b'); o=os.path.getsize(p)//2; f.seek(o); b=f.read(1); f.seek(o); f.write(bytes([b[0]^255]))" \
      /var/tmp/rs-dmg/rank-$s/chunk-00000000.brc
  done
fi
serve() { # BIN NAME CHUNKS [flags]
  BRANDRT_ALLOW_SHARED_NODE=1 timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 3 $1 serve \
    --chunks $3 --mem 25% --consume 2 --epochs 2 --order-out /tmp/ds-$2.order --stats-json /tmp/ds-$2.json "${@:4}" > /tmp/ds-$2.log 2>&1
  echo "$2: rc $? order md5 $(md5sum < /tmp/ds-$2.order | cut -c1-12)"
}
for round in 1 2; do serve $OLD old$round /var/tmp/rs/chunks; serve $NEW new$round /var/tmp/rs/chunks; done
serve $OLD old-dmg /var/tmp/rs-dmg --on-damage skip; serve $NEW new-dmg /var/tmp/rs-dmg --on-damage skip
python3 $HERE/compare.py
