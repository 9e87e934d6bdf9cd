#!/usr/bin/env bash
# An emulated NAS on this machine, for the loader benchmark (loaders.py
# --storage nas starts and stops it itself).
#
#   nas.sh up DIR MOUNT [DELAY] [RATE]   serve DIR read-only, mounted at MOUNT
#   nas.sh down                          unmount and remove everything, by PID
#   nas.sh status                        what is up
#
# A network namespace "brnas" holds the file server; a veth pair joins it to
# this namespace (10.213.7.1 here, 10.213.7.2 there), rate-limited in both
# directions by the kernel's tbf qdisc (RATE, default 3gbit: about the
# 0.38 GB/s NAS of the Redox evaluation). The server is sftp-server, one per
# connection, behind nasproxy (built from ./nasproxy), which adds DELAY
# (default 100us) each way: the round trip becomes ~0.3 ms, as on a LAN NAS
# (this kernel has no netem). The client is sshfs speaking raw SFTP to it
# (no ssh, no encryption: the CPU goes to the data path), with the kernel's
# page cache kept across opens as NFS keeps it for unchanged files.
# The server runs in its own memory cgroup of 256 MiB, so its page cache
# cannot serve the dataset again from memory; drop_caches clears both sides
# (one kernel).
#
# Traffic goes only to the namespace's own address; a route marks the subnet
# unreachable should the veth vanish, so nothing for it follows the default
# route. State (PIDs, the built proxy) lives in /run/brandrt-nas; "down"
# removes it all and is safe to run at any time.
set -euo pipefail

NS=brnas
HOST_IF=brnas-h
NS_IF=brnas-n
HOST_IP=10.213.7.1
NS_IP=10.213.7.2
PORT=7023
SUBNET=10.213.7.0/24
STATE=/run/brandrt-nas
CG=/sys/fs/cgroup/memory/brandrt-nas
SERVER_MEM=$((256 << 20))
here=$(cd "$(dirname "$0")" && pwd)

die() { echo "nas.sh: $*" >&2; exit 1; }

down() {
	if [ -f "$STATE/mount" ]; then
		mnt=$(cat "$STATE/mount")
		if mountpoint -q "$mnt" 2>/dev/null; then
			fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
		fi
	fi
	for f in "$STATE"/*.pid; do
		[ -f "$f" ] || continue
		kill "$(cat "$f")" 2>/dev/null || true
	done
	if ip netns list 2>/dev/null | grep -qw "$NS"; then
		for p in $(ip netns pids "$NS" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
		sleep 0.2
		for p in $(ip netns pids "$NS" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
		ip netns del "$NS" 2>/dev/null || true
	fi
	ip link del "$HOST_IF" 2>/dev/null || true
	ip route del unreachable "$SUBNET" metric 4000 2>/dev/null || true
	if [ -d "$CG" ]; then
		for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
		sleep 0.1
		rmdir "$CG" 2>/dev/null || true
	fi
	rm -rf "$STATE"
}

up() {
	local dir=$1 mnt=$2 delay=${3:-100us} rate=${4:-3gbit}
	[ "$(id -u)" = 0 ] || die "needs root (network namespace, tc, mount)"
	[ -d "$dir" ] || die "$dir: not a directory"
	for c in sshfs ip tc fusermount3; do command -v $c >/dev/null || die "$c missing (bash .ci/deps nas installs it)"; done
	[ -x /usr/lib/openssh/sftp-server ] || die "/usr/lib/openssh/sftp-server missing (bash .ci/deps nas installs it)"
	[ -d /sys/fs/cgroup/memory ] || die "no cgroup v1 memory controller at /sys/fs/cgroup/memory"
	down
	mkdir -p "$STATE" "$mnt"
	dir=$(cd "$dir" && pwd)
	echo "$(cd "$mnt" && pwd)" > "$STATE/mount"
	(cd "$here/nasproxy" && GOTOOLCHAIN=${GOTOOLCHAIN:-auto} go build -o "$STATE/nasproxy" .)

	ip route add unreachable "$SUBNET" metric 4000
	ip netns add "$NS"
	ip link add "$HOST_IF" type veth peer name "$NS_IF"
	ip link set "$NS_IF" netns "$NS"
	ip addr add "$HOST_IP/30" dev "$HOST_IF"
	ip link set "$HOST_IF" up
	ip netns exec "$NS" ip addr add "$NS_IP/30" dev "$NS_IF"
	ip netns exec "$NS" ip link set "$NS_IF" up
	ip netns exec "$NS" ip link set lo up
	tc qdisc add dev "$HOST_IF" root tbf rate "$rate" burst 256kb latency 20ms
	ip netns exec "$NS" tc qdisc add dev "$NS_IF" root tbf rate "$rate" burst 256kb latency 20ms

	mkdir -p "$CG"
	echo "$SERVER_MEM" > "$CG/memory.limit_in_bytes"
	ip netns exec "$NS" "$STATE/nasproxy" -listen "$NS_IP:$PORT" -delay "$delay" -- /usr/lib/openssh/sftp-server -R \
		2> "$STATE/server.log" &
	echo $! > "$STATE/server.pid"
	# Into the cgroup before the first connection: its sftp-servers follow.
	# (ip netns exec mounts its own /sys, so this is done from out here.)
	echo $! > "$CG/cgroup.procs"
	for _ in $(seq 50); do
		ip netns exec "$NS" bash -c "exec 3<>/dev/tcp/$NS_IP/$PORT" 2>/dev/null && break
		sleep 0.1
	done
	sshfs -o ro,max_conns=1,dir_cache=no,kernel_cache,directport=$PORT "$NS_IP:$dir" "$mnt" ||
		{ down; die "sshfs could not mount $NS_IP:$dir (server log: $(cat "$STATE/server.log" 2>/dev/null))"; }
	pgrep -f "sshfs .*$NS_IP:$dir" | head -1 > "$STATE/sshfs.pid" || true
	echo "nas.sh: $dir served at $mnt over $HOST_IF (rate $rate, +$delay each way; server memory $((SERVER_MEM >> 20)) MiB)"
}

status() {
	ip netns list | grep -w "$NS" || echo "no namespace $NS"
	[ -f "$STATE/mount" ] && mount | grep -F " $(cat "$STATE/mount") " || echo "nothing mounted"
	tc qdisc show dev "$HOST_IF" 2>/dev/null || true
}

case "${1:-}" in
up) [ $# -ge 3 ] || die "usage: nas.sh up DIR MOUNT [DELAY] [RATE]"; shift; up "$@" ;;
down) down ;;
status) status ;;
*) die "usage: nas.sh up DIR MOUNT [DELAY] [RATE] | down | status" ;;
esac
