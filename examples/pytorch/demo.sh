#!/usr/bin/env bash
# Trains examples/pytorch/train.py through brandrt: NP ranks serve the
# packed dataset in CHUNKS under mpirun, and beside each rank one training
# process reads from it through shared memory; the NP processes train one
# model together (DistributedDataParallel). Everything it starts is stopped
# when it ends.
#   demo.sh BRANDRT CHUNKS NP CLASSES EPOCHS [serve flags…] [-- train.py flags…]
set -euo pipefail
bin=$1 chunks=$2 np=$3 classes=$4 epochs=$5
shift 5
serve_flags=() train_flags=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do serve_flags+=("$1"); shift; done
[ $# -gt 0 ] && shift
train_flags=("$@")
here=$(cd "$(dirname "$0")" && pwd)
export BRANDRT_ATTACH
BRANDRT_ATTACH=$(mktemp -d /dev/shm/brandrt-demo-XXXXXX)
mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
	"$bin" serve --chunks "$chunks" --consume 0 --epochs "$epochs" ${serve_flags[@]+"${serve_flags[@]}"} &
serve=$!
trap 'kill $serve 2>/dev/null; wait $serve 2>/dev/null; rm -rf "$BRANDRT_ATTACH"' EXIT
port=$((20000 + RANDOM % 20000))
trainers=()
for ((r = 0; r < np; r++)); do
	/usr/bin/python3 -W ignore "$here/train.py" --num-classes "$classes" --epochs "$epochs" --local-rank "$r" \
		--world-size "$np" --rank "$r" --master "127.0.0.1:$port" ${train_flags[@]+"${train_flags[@]}"} &
	trainers+=($!)
done
status=0
for p in "${trainers[@]}"; do wait "$p" || status=1; done
wait $serve || status=1
trap - EXIT
rm -rf "$BRANDRT_ATTACH"
exit $status
