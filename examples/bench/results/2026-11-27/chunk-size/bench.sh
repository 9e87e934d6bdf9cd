#!/usr/bin/env bash
# chunk-size read benchmark; writes raw/<storage>_<jobs>j_<size>_r<rep>.json
set -u
cd /var/tmp/chunksize-bench
REPS=${REPS:-3}
SIZES=(256k 1m 4m 16m 64m 256m)
dc(){ sync; echo 3 > /proc/sys/vm/drop_caches; sleep 1; }
run(){ # storage file jobs size rep
  local st=$1 f=$2 j=$3 s=$4 r=$5 extra iosz
  if [ "$j" = 1 ]; then extra=""; iosz=1536m; else extra="--group_reporting"; iosz=400m; fi
  local out=raw/${st}_${j}j_${s}_r${r}.json
  local cmd=(fio --name=cs --filename="$f" --rw=randread --bs="$s" --ioengine=psync --numjobs="$j" $extra
             --size=4g --io_size="$iosz" --runtime=20 --time_based=0 --direct=1 --randrepeat=0
             --output-format=json --output="$out")
  dc
  echo "$(date +%T) ${cmd[*]}" >> raw/commands.log
  "${cmd[@]}" || echo "$(date +%T) FAILED $st $j $s $r" >> raw/commands.log
  python3 - "$out" <<'PY'
import json,sys
d=json.load(open(sys.argv[1])); j=d["jobs"][0]["read"]
print(sys.argv[1], "%.1f MB/s" % (j["bw_bytes"]/1e6), "io %.0f MiB" % (j["io_bytes"]/2**20), "rt %d ms" % j["runtime"])
PY
}
for r in $(seq 1 "$REPS"); do
  for s in "${SIZES[@]}"; do
    for j in 1 4; do
      run local data/big.bin "$j" "$s" "$r"
      run nas /mnt/csnas/big.bin "$j" "$s" "$r"
    done
  done
  echo "$(date +%T) repeat $r done"
done
echo ALLDONE
