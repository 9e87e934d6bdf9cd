#!/usr/bin/env bash
# An emulated cluster on this machine: N nodes, each a host of its own as
# far as brandrt, MPI, Slurm and PyTorch can tell, for trying the
# multi-node path (mpirun --host, sbatch -N) where there is one machine.
#
#   cluster.sh up N [options]     make the nodes (everything made before goes first)
#   cluster.sh down [--name NAME] remove everything, by PID and name; safe at any time
#   cluster.sh status [--name NAME]
#   cluster.sh exec NODE -- CMD…  run CMD on NODE (1…N, or its hostname), with this environment
#   cluster.sh agent HOST CMD…    the rsh agent mpirun uses: CMD as one shell line in a login
#                                 environment, as ssh runs it (mpirun -x passes variables on)
#
# Options of up:
#   --name NAME        the cluster's name (default bc): hosts NAME-n1…, state in /run/brandrt-cluster-NAME
#   --nic RATE         each node's link, both ways (tbf; default 10gbit)
#   --node-mem BYTES   each node's memory: its memory cgroup's limit, page cache counted (default: none)
#   --nas DIR          serve DIR read-only as the cluster's NAS, mounted on every node at $STATE/nas
#   --nas-rate RATE    the NAS's one link, shared by every node (default 3gbit)
#   --nas-delay D      added each way by the NAS server (default 100us)
#   --slurm            also run Slurm: slurmctld and munged here, a slurmd on each node
#   --subnet A.B.C     the cluster's /24 (default from the name: 10.216.X)
#
# Each node is
# - a network namespace NAME-nI with address A.B.C.I on a bridge NAME-br
#   that joins only the cluster's own namespaces and this host
#   (A.B.C.254: mpirun and slurmctld run here); its veth is rate-limited
#   both ways by tbf. (This kernel has no netem, so the links add no delay
#   beyond the veth's own.)
# - a UTS namespace (hostname NAME-nI) and a mount namespace of its own,
#   kept for the node's life: its own /dev/shm (tmpfs), an /etc/hosts that
#   names every node, its own mount of the NAS at $STATE/nas (two mounts of
#   one export share no page cache) and its node-local disk at
#   $STATE/scratch (/var/tmp/brandrt-cluster-NAME/nI);
# - a memory and a cpuacct cgroup (NAME-nI) that every process started on
#   the node joins, its NAS client (sshfs) apart in NAME-nI-fs; what
#   mpirun starts there through the agent (orted and the ranks) is in its
#   child NAME-nI/mpi, so that a rank's memory and CPU can be told from the
#   training processes' beside it (the node's limit holds them all).
# $STATE is /run/brandrt-cluster-NAME. On this host $STATE/nas and
# $STATE/scratch are empty: they are each node's.
#
# MPI between nodes: $STATE/mpirun is mpirun with the agent, the hosts
# (one slot each) and TCP on the cluster's subnet only:
#   /run/brandrt-cluster-bc/mpirun -np 3 bin/brandrt serve --chunks … -- python3 train.py …
# Slurm (--slurm): SLURM_CONF=$STATE/slurm/slurm.conf sbatch -N 3 …
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
die() { echo "cluster.sh: $*" >&2; exit 1; }

name=bc nic=10gbit mem="" nas="" nas_rate=3gbit nas_delay=100us slurm=0 subnet=""

# parse NAME=VALUE options common to every verb; sets the globals above.
parse() {
	while [ $# -gt 0 ]; do
		case $1 in
		--name) name=$2; shift 2 ;;
		--nic) nic=$2; shift 2 ;;
		--node-mem) mem=$2; shift 2 ;;
		--nas) nas=$2; shift 2 ;;
		--nas-rate) nas_rate=$2; shift 2 ;;
		--nas-delay) nas_delay=$2; shift 2 ;;
		--slurm) slurm=1; shift ;;
		--subnet) subnet=$2; shift 2 ;;
		*) die "unknown option $1 (cluster.sh --help)" ;;
		esac
	done
	[[ $name =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--name $name: want a letter, then up to 7 letters or digits"
	state=/run/brandrt-cluster-$name
	scratch=/var/tmp/brandrt-cluster-$name
	cg=/sys/fs/cgroup/memory
	cpu=/sys/fs/cgroup/cpuacct
	if [ -z "$subnet" ]; then
		subnet=10.216.$(($(printf %s "$name" | cksum | cut -d' ' -f1) % 250))
	fi
}

# node I's names
ns() { echo "$name-n$1"; }

down() {
	[ -d "$state" ] || [ -n "$(ip netns list 2>/dev/null | grep -E "^$name-(n[0-9]+|nas)( |$)" || true)" ] || {
		ip link del "$name-br" 2>/dev/null || true
		return 0
	}
	# Slurm's daemons first (they start jobs), then every process of a node
	# or the NAS: in its cgroup or its network namespace.
	local pids=() f p
	for f in "$state"/slurm/*.pid "$state"/*.pid; do
		[ -f "$f" ] && pids+=("$(cat "$f")")
	done
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for _ in $(seq 50); do # 5 s for them to exit, then SIGKILL
		local alive=0
		for p in "${pids[@]}"; do running "$p" && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.1
	done
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	local n
	for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-(n[0-9]+|nas)$" || true); do
		killall_in "$n" TERM
	done
	sleep 0.3
	for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-(n[0-9]+|nas)$" || true); do
		killall_in "$n" KILL
		ip netns del "$n" 2>/dev/null || true
	done
	for d in "$state"/n[0-9]*; do
		[ -d "$d" ] || continue
		umount "$d/mnt" 2>/dev/null || true
		umount "$d/uts" 2>/dev/null || true
	done
	local l
	for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^$name-h([0-9]+|nas)$" || true); do
		ip link del "$l" 2>/dev/null || true
	done
	ip link del "$name-br" 2>/dev/null || true
	for d in "$cg/$name"-*/mpi "$cpu/$name"-*/mpi "$cg/$name"-* "$cpu/$name"-*; do
		[ -d "$d" ] || continue
		rmdir "$d" 2>/dev/null || { sleep 0.5; rmdir "$d" 2>/dev/null; } || echo "cluster.sh: $d still has processes: $(cat "$d/cgroup.procs" | tr '\n' ' ')" >&2
	done
	if mountpoint -q "$state" 2>/dev/null; then umount -l "$state"; fi
	rm -rf "$state" "$scratch"
}

# running PID: whether the process runs (a zombie does not).
running() {
	local st
	st=$(ps -o stat= -p "$1" 2>/dev/null) && [ "${st#Z}" = "$st" ]
}

# killall_in NETNS SIGNAL: every process in the namespace, and in the
# cgroup of the same name.
killall_in() {
	local p
	for p in $(ip netns pids "$1" 2>/dev/null) $(cat "$cg/$1/cgroup.procs" "$cg/$1/mpi/cgroup.procs" "$cg/$1-fs/cgroup.procs" 2>/dev/null); do
		kill -s "$2" "$p" 2>/dev/null || true
	done
}

up() {
	local n=$1
	shift
	parse "$@"
	[[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "up $n: want 1 to 200 nodes"
	[ "$(id -u)" = 0 ] || die "needs root (namespaces, cgroups, tc, mounts)"
	for c in ip tc nsenter unshare mountpoint; do command -v $c >/dev/null || die "$c missing"; done
	[ -d "$cg" ] && [ -d "$cpu" ] || die "no cgroup v1 memory and cpuacct controllers at $cg and $cpu"
	if [ -n "$nas" ]; then
		[ -d "$nas" ] || die "--nas $nas: not a directory"
		for c in sshfs fusermount3; do command -v $c >/dev/null || die "$c missing (bash .ci/deps installs it)"; done
		[ -x /usr/lib/openssh/sftp-server ] || die "/usr/lib/openssh/sftp-server missing (bash .ci/deps installs it)"
		nas=$(cd "$nas" && pwd)
	fi
	down
	mkdir -p "$state" "$state/nas" "$state/scratch"
	# the namespaces' files are bind mounts: under a private mount of their own
	mount --bind "$state" "$state"
	mount --make-private "$state"
	echo "$n" > "$state/nodes"
	echo "$subnet" > "$state/subnet"

	ip link add "$name-br" type bridge
	ip addr add "$subnet.254/24" dev "$name-br"
	ip link set "$name-br" up

	{
		echo "127.0.0.1 localhost"
		echo "$subnet.254 $name-head"
		echo "$subnet.250 $name-nas"
		for i in $(seq "$n"); do echo "$subnet.$i $(ns "$i")"; done
	} > "$state/hosts"
	: > "$state/hostfile"
	for i in $(seq "$n"); do
		echo "$(ns "$i") slots=1" >> "$state/hostfile"
	done

	if [ -n "$nas" ]; then
		nas_up
	fi
	for i in $(seq "$n"); do
		node_up "$i"
	done
	write_tools
	if [ "$slurm" = 1 ]; then
		slurm_up "$n"
	fi
	echo "cluster.sh: $n node(s) $(ns 1)…$(ns "$n") on $subnet.0/24 (links $nic${mem:+, memory $mem each}${nas:+, NAS $nas at $nas_rate})"
	echo "cluster.sh: MPI: $state/mpirun -np $n …; a shell on node 1: $0 exec --name $name 1 -- bash"
	if [ "$slurm" = 1 ]; then
		echo "cluster.sh: Slurm: SLURM_CONF=$state/slurm/slurm.conf sbatch -N $n …"
	fi
}

# link NS IF RATE: rate-limit both ends of the veth IF (host side
# $name-hX, namespace side inside NS).
link() {
	local burst=1mb
	tc qdisc add dev "$name-h$2" root tbf rate "$3" burst $burst latency 20ms
	ip netns exec "$1" tc qdisc add dev "$name-p$2" root tbf rate "$3" burst $burst latency 20ms
}

# veth I ADDR: a namespace NAME-(nI|nas) joined to the bridge at ADDR.
veth() {
	local id=$1 addr=$2 netns
	netns=$name-$([ "$id" = nas ] && echo nas || echo "n$id")
	ip netns add "$netns"
	ip link add "$name-h$id" type veth peer name "$name-p$id"
	ip link set "$name-p$id" netns "$netns"
	ip link set "$name-h$id" master "$name-br"
	ip link set "$name-h$id" up
	ip netns exec "$netns" ip addr add "$addr/24" dev "$name-p$id"
	ip netns exec "$netns" ip link set "$name-p$id" up
	ip netns exec "$netns" ip link set lo up
}

node_up() {
	local i=$1 d="$state/n$1" node
	node=$(ns "$i")
	veth "$i" "$subnet.$i"
	link "$node" "$i" "$nic"
	mkdir -p "$d" "$scratch/n$i"
	touch "$d/mnt" "$d/uts"
	mkdir -p "$cg/$node/mpi" "$cpu/$node/mpi" "$cg/$node-fs" "$cpu/$node-fs"
	if [ -n "$mem" ]; then
		echo "$mem" > "$cg/$node/memory.limit_in_bytes"
	fi
	# The node's mount and UTS namespaces, kept by bind mounts on $d/mnt
	# and $d/uts: its hostname, /dev/shm, /etc/hosts and node-local disk.
	nsenter --net="/run/netns/$node" unshare --mount="$d/mnt" --uts="$d/uts" --propagation private sh -ec "
		hostname $node
		mount -t tmpfs -o mode=1777,size=50% tmpfs /dev/shm
		mount --bind $state/hosts /etc/hosts
		mount --bind $scratch/n$i $state/scratch"
	if [ -n "$nas" ]; then
		(FS=1 on "$i" sshfs -o ro,max_conns=1,dir_cache=no,kernel_cache,directport=7023 "$subnet.250:$nas" "$state/nas" </dev/null >>"$state/sshfs.log" 2>&1) ||
			die "$node: sshfs could not mount the NAS: $(cat "$state/sshfs.log") (server log: $(cat "$state/nas.log" 2>/dev/null))"
	fi
}

# on I CMD…: run CMD (argv) on node I: in its cgroup and namespaces.
on() {
	local i=$1 node
	shift
	node=$(ns "$i")
	[ -f "$state/n$i/uts" ] || die "no node $i in cluster $name (cluster.sh status)"
	# its NAS client (FS=1) in a cgroup of its own, so that what the
	# node's jobs use can be measured and ended apart from it; what the
	# agent starts (MPI=1) in the node's child group mpi
	local group=$node${FS:+-fs}${MPI:+/mpi}
	echo $BASHPID > "$cg/$group/cgroup.procs"
	echo $BASHPID > "$cpu/$group/cgroup.procs"
	exec nsenter --net="/run/netns/$node" --mount="$state/n$i/mnt" --uts="$state/n$i/uts" --wd="$PWD" -- "$@"
}

nas_up() {
	veth nas "$subnet.250"
	link "$name-nas" nas "$nas_rate"
	(cd "$repo/examples/bench/nasproxy" && GOTOOLCHAIN=${GOTOOLCHAIN:-auto} go build -o "$state/nasproxy" .)
	mkdir -p "$cg/$name-nas"
	echo $((256 << 20)) > "$cg/$name-nas/memory.limit_in_bytes" # its page cache cannot hold the dataset
	(
		echo $BASHPID > "$cg/$name-nas/cgroup.procs"
		# a session of its own, as a daemon's: what ends the caller's
		# process group does not end the NAS
		exec setsid ip netns exec "$name-nas" "$state/nasproxy" -listen "$subnet.250:7023" -delay "$nas_delay" -- /usr/lib/openssh/sftp-server -R
	) </dev/null >"$state/nas.log" 2>&1 &
	echo $! > "$state/nas.pid"
	for _ in $(seq 50); do
		ip netns exec "$name-nas" bash -c "exec 3<>/dev/tcp/$subnet.250/7023" 2>/dev/null && return 0
		sleep 0.1
	done
	die "the NAS server did not listen: $(cat "$state/nas.log")"
}

# write_tools writes the rsh agent and the mpirun of the cluster.
write_tools() {
	cat > "$state/agent" <<EOF
#!/bin/sh
# rsh agent of the emulated cluster $name (examples/cluster/cluster.sh):
# HOST CMD… runs CMD on node HOST, as ssh would, through its shell.
exec "$here/cluster.sh" agent --name $name "\$@"
EOF
	cat > "$state/mpirun" <<EOF
#!/bin/sh
# mpirun across the emulated cluster $name: one slot per node, the agent
# above instead of ssh, TCP between the nodes on $subnet.0/24 only.
exec mpirun --allow-run-as-root --hostfile $state/hostfile --bind-to none \\
	--mca plm_rsh_agent $state/agent --mca plm_rsh_no_tree_spawn 1 \\
	--mca btl tcp,self --mca btl_tcp_if_include $subnet.0/24 --mca oob_tcp_if_include $subnet.0/24 "\$@"
EOF
	chmod +x "$state/agent" "$state/mpirun"
}

slurm_up() {
	local n=$1 s="$state/slurm" i
	for c in munged munge slurmctld slurmd; do
		command -v $c >/dev/null || [ -x /usr/sbin/$c ] || die "$c missing (bash .ci/deps installs slurm-wlm and munge)"
	done
	export PATH=$PATH:/usr/sbin
	mkdir -p "$s/munge" "$s/state"
	chmod 755 "$state" "$s"
	head -c 1024 /dev/urandom > "$s/munge/key"
	chmod 400 "$s/munge/key"
	munged --socket "$s/munge/socket" --key-file "$s/munge/key" --pid-file "$s/munged.pid" --seed-file "$s/munge/seed" \
		--log-file "$s/munged.log" </dev/null >/dev/null 2>&1
	local ctld=6917 slurmd=6918
	{
		cat <<EOF
# Slurm of the emulated cluster $name (examples/cluster/cluster.sh).
ClusterName=brandrt-$name
SlurmctldHost=$(hostname -s)($subnet.254)
SlurmctldPort=$ctld
SlurmdPort=$slurmd
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$s/munge/socket
StateSaveLocation=$s/state
SlurmdSpoolDir=$s/spool-%n
SlurmctldPidFile=$s/slurmctld.pid
SlurmdPidFile=$s/slurmd-%n.pid
SlurmctldLogFile=$s/slurmctld.log
SlurmdLogFile=$s/slurmd-%n.log
TmpFS=$state/scratch
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0
MpiDefault=none
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=4
KillWait=5
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
EOF
		for i in $(seq "$n"); do
			echo "NodeName=$(ns "$i") NodeAddr=$subnet.$i NodeHostname=$(ns "$i") CPUs=4 RealMemory=1024 State=UNKNOWN"
		done
		echo "PartitionName=brandrt Nodes=$name-n[1-$n] Default=YES MaxTime=INFINITE State=UP"
	} > "$s/slurm.conf"
	export SLURM_CONF=$s/slurm.conf
	slurmctld -f "$s/slurm.conf" </dev/null >/dev/null 2>&1
	for i in $(seq "$n"); do
		mkdir -p "$s/spool-$(ns "$i")"
		("$0" exec --name "$name" "$i" -- slurmd -f "$s/slurm.conf" -N "$(ns "$i")" </dev/null >/dev/null 2>&1)
	done
	for _ in $(seq 150); do
		if [ "$(timeout 5 sinfo --noheader --format %T 2>/dev/null | sort -u)" = idle ]; then return 0; fi
		kill -0 "$(cat "$s/slurmctld.pid" 2>/dev/null)" 2>/dev/null || die "slurmctld is not running: $(tail -3 "$s/slurmctld.log" 2>/dev/null)"
		sleep 0.2
	done
	die "Slurm's nodes are not idle after 30 s: $(timeout 5 sinfo 2>&1); logs in $s"
}

status() {
	parse "$@"
	[ -d "$state" ] || { echo "cluster $name: down"; return 0; }
	echo "cluster $name: $(cat "$state/nodes") node(s) on $(cat "$state/subnet").0/24, state in $state"
	ip netns list | grep -E "^$name-" || true
	local d i
	for d in "$state"/n[0-9]*; do
		i=${d##*/n}
		echo "$(ns "$i"): $(ip netns pids "$(ns "$i")" | wc -l) processes, memory $(numfmt --to=iec "$(cat "$cg/$(ns "$i")/memory.usage_in_bytes")") (limit $(numfmt --to=iec "$(cat "$cg/$(ns "$i")/memory.limit_in_bytes")"))"
	done
}

case "${1:-}" in
up) [ $# -ge 2 ] || die "usage: cluster.sh up N [options]"; shift; up "$@" ;;
down) shift; parse "$@"; down ;;
status) shift; status "$@" ;;
exec)
	shift
	args=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
	[ $# -ge 2 ] || die "usage: cluster.sh exec [--name NAME] NODE -- CMD…"
	shift
	node=${args[-1]}
	unset 'args[-1]'
	parse "${args[@]}"
	node=${node#"$name-n"}
	[[ $node =~ ^[0-9]+$ ]] || die "exec: node $node: want its number or its hostname"
	on "$node" "$@"
	;;
agent)
	shift
	args=()
	while [ "${1:-}" = --name ]; do args+=("$1" "$2"); shift 2; done
	parse "${args[@]}"
	host=$1
	shift
	node=${host#"$name-n"}
	[[ $node =~ ^[0-9]+$ ]] || die "agent: host $host is not a node of cluster $name"
	# as sshd would: a login environment, not this one
	MPI=1 on "$node" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME="${HOME:-/root}" USER="$(id -un)" \
		LOGNAME="$(id -un)" SHELL=/bin/sh LANG="${LANG:-C.UTF-8}" /bin/sh -c "$*"
	;;
-h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
*) die "usage: cluster.sh up N [options] | down | status | exec NODE -- CMD… | agent HOST CMD… (--help)" ;;
esac
