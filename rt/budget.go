package rt

import (
	"fmt"
)

// How much memory a rank uses beside its budget, and what fits its node
// (fitsNode) and its cgroup (fitsCgroup).

// MemAllowance is the memory a rank with budget (its --mem) takes beyond
// its files (the budget, and --remote-mem with other ranks) and its chunk
// reads in flight (--read-mem), in bytes:
// what the kernel counts against the rank's memory cgroup is at most
// Node.Footprint. It is HandCap(budget), the files DataLoader workers handed on
// to their training processes that those still hold (beyond it they get
// copies), and processAllowance: from 96 MiB to 320 MiB.
//
// Not in it: the arena lends each file its pages, and a file of more
// than 32 KiB up to an eighth more (about 4 % of the files kept, with
// 110 KB files), and the files a training process holds while it reads
// them (a DataLoader's prefetched batches).
func MemAllowance(budget int64) int64 { return HandCap(budget) + processAllowance }

// processAllowance is what the rank's process takes beside its files and
// its chunk reads in flight: Go's runtime and heap, the binary and MPI's
// libraries, mpirun's share, and the arena's slack (its free places
// between files). Measured at 30–60 MiB with 110 KB files.
const processAllowance = 64 << 20

// HandCap bounds the bytes of the files handed on by DataLoader workers
// that the training processes of a rank with budget hold, all together
// (shm.Options.HandCap): an eighth of the budget, at least 32 MiB and at
// most 256 MiB. A few batches in flight fit (the loader benchmark's held
// at most 150 MiB).
func HandCap(budget int64) int64 { return min(max(budget/8, 32<<20), 256<<20) }

// Footprint is the most memory this rank costs, what its memory cgroup
// must allow: its own files, other ranks', its chunk reads in flight
// (footprint) and MemAllowance, reckoned on the whole budget.
func (n *Node) Footprint() int64 {
	budget, own, remote, reads := n.footprint()
	return own + remote + reads + MemAllowance(budget)
}

// footprint returns the rank's budget, its own files' memory (as far as
// its shard fills the budget), other ranks' (none without them), and the
// chunk reads in flight: an I/O worker's buffer each, as large as the
// shard's largest chunk (see chunk's buffer pool), rounded up to a MiB.
// The files of a chunk kept in memory are copied out of its buffer into
// the budget's (ioPool.keep).
func (n *Node) footprint() (budget, own, remote, reads int64) {
	budget = n.data.m.MemBytes(n.me)
	own, remote = min(budget, n.data.m.ShardBytes(n.me)), n.remoteBytes()
	if n.size == 1 {
		remote = 0 // no other rank pushes it anything
	}
	return budget, own, remote, n.readBytes()
}

// readBytes is what the chunk reads in flight take at most: their
// bound (readMem), or the largest chunk, which may go alone.
func (n *Node) readBytes() int64 { return max(n.readMem(), mibUp(n.data.maxChunk)) }

// readMem bounds the bytes of the chunk reads in flight (ioPool.flush):
// Config.ReadMemBytes, or IOWorkers buffers of the largest chunk, at most
// DefaultReadMem. A read's buffer is its chunk rounded up to a MiB (see
// chunk's buffer pool).
func (n *Node) readMem() int64 {
	if n.cfg.ReadMemBytes > 0 {
		return n.cfg.ReadMemBytes
	}
	return min(int64(n.cfg.IOWorkers)*mibUp(n.data.maxChunk), DefaultReadMem)
}

// mibUp rounds n bytes up to a MiB.
func mibUp(n int64) int64 { return (n + 1<<20 - 1) >> 20 << 20 }

// fitsCgroup refuses a rank whose memory (Footprint) exceeds its memory
// cgroup's limit (Config.MemLimitBytes): the kernel would kill it later.
func (n *Node) fitsCgroup() error {
	limit := n.cfg.MemLimitBytes
	budget, own, remote, reads := n.footprint()
	need := n.Footprint()
	if limit <= 0 || need <= limit {
		return nil
	}
	do := fmt.Sprintf("give it --mem %s or less (--mem 100%%cgroup takes what the cgroup leaves), or run it with more memory", mib(fitBudget(limit-remote-reads)))
	if least := remote + reads + MemAllowance(0); limit <= least {
		do = fmt.Sprintf("that leaves nothing for its files: run it with more memory than %s", mib(least))
	}
	return fmt.Errorf("rt: the rank needs %s of memory: %s of its own files (--mem %s), %s of other ranks' (--remote-mem), %s for its chunk reads in flight (--read-mem %s; chunks up to %s) and %s beside them (brandrt's allowance: the runtime and files handed on to training processes); "+
		"its memory cgroup allows %s (%s): %s",
		mib(need), mib(own), mib(budget), mib(remote), mib(reads), mib(n.readMem()), mib(n.data.maxChunk), mib(MemAllowance(budget)), mib(limit), n.cfg.MemLimitFrom, do)
}

// cgroupBudget is the budget that Config.MemCgroupFraction gives the rank
// in its memory cgroup (Config.MemLimitBytes): that share of what the
// cgroup leaves beside MemAllowance, the chunk reads in flight and the
// files of other ranks (RemoteMemBytes, or a tenth of the budget when it
// is −1), so that 100 % just fits (fitsCgroup).
func (n *Node) cgroupBudget() (int64, error) {
	frac, limit := n.cfg.MemCgroupFraction, n.cfg.MemLimitBytes
	if limit <= 0 {
		return 0, fmt.Errorf("rt: --mem %g%%cgroup: the rank's memory cgroup sets no limit: give --mem in bytes or as a share of its shard", 100*frac)
	}
	avail := limit - n.readBytes()
	switch remote := n.cfg.RemoteMemBytes; {
	case n.size > 1 && remote >= 0:
		avail -= remote
	case n.size > 1:
		avail = avail * 10 / 11
	}
	b := int64(frac * float64(fitBudget(avail)))
	if b <= 0 {
		return 0, fmt.Errorf("rt: --mem %g%%cgroup: the rank's memory cgroup allows %s, which leaves nothing beside the allowance (%s), its chunk reads in flight (%s) and --remote-mem",
			100*frac, mib(limit), mib(MemAllowance(0)), mib(n.readBytes()))
	}
	return b, nil
}

// fitBudget is the largest budget b with b + MemAllowance(b) ≤ room, or
// a negative number when none fits.
func fitBudget(room int64) int64 {
	// b + max(b/8, 32 MiB) capped at 256 MiB, + 64 MiB: piecewise linear in b
	b := room - MemAllowance(0)
	if b/8 > 32<<20 {
		b = (room - processAllowance) * 8 / 9
	}
	if b/8 > 256<<20 {
		b = room - MemAllowance(1<<62)
	}
	return b
}

// fitsNode refuses a budget larger than the node's memory
// (Config.NodeMemBytes): the kernel would end the rank instead, later.
func (n *Node) fitsNode() error {
	node := n.cfg.NodeMemBytes
	own, shard, remote := n.data.m.MemBytes(n.me), n.data.m.ShardBytes(n.me), n.remoteBytes()
	held := min(own, shard)
	if node <= 0 || held+remote <= node {
		return nil
	}
	return fmt.Errorf("rt: the rank's memory would hold %s of its own files (--mem %s, its shard has %s) and up to %s of other ranks' (--remote-mem), %s in all, "+
		"but its node has %s of memory: lower --mem or --remote-mem", mib(held), mib(own), mib(shard), mib(remote), mib(held+remote), mib(node))
}
