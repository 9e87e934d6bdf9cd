#!/usr/bin/env bash
# Trains examples/pytorch/train.py through brandrt: NP ranks serve the
# packed dataset in CHUNKS under mpirun, and each starts one training
# process beside it (brandrt serve -- train.py …), which reads from it
# through shared memory; the NP processes train one model together
# (DistributedDataParallel: brandrt gives them RANK, WORLD_SIZE and
# MASTER_ADDR/MASTER_PORT). The job ends when the training ends, with its
# status. The ranks share this one machine (--allow-shared-node).
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
trap 'rm -rf "$BRANDRT_ATTACH"' EXIT
mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np" \
	"$bin" serve --chunks "$chunks" --allow-shared-node ${serve_flags[@]+"${serve_flags[@]}"} \
	-- /usr/bin/python3 -W ignore "$here/train.py" --num-classes "$classes" --epochs "$epochs" ${train_flags[@]+"${train_flags[@]}"}
