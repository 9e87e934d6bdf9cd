package rt

import "fmt"

// What fits the rank's memory cgroup (fitsCgroup) and its node
// (fitsNode): the footprint (budget.go) against the cgroup's limit less
// --leave, the budget --mem N%cgroup gives (cgroupBudget), and the bound
// on files handed on lowered to fit (fitHanded).

// fitsCgroup says the rank's footprint and what its memory cgroup
// allows (Site.MemLimitBytes) less what it leaves for the other
// processes in it (Config.MemLeaveBytes), and refuses a rank whose
// footprint exceeds that: the kernel would kill it, or reclaim the
// training processes' pages over and over, later.
func (n *Node) fitsCgroup() error {
	f := n.Footprint()
	limit, err := n.cgroupRoom()
	if err != nil {
		return fmt.Errorf("%w: %s", err, f)
	}
	if limit <= 0 {
		fmt.Fprintf(n.site.Log, "brandrt: rank %d: %s; its memory cgroup sets no limit%s\n", n.me, f, n.leaveUnused())
		return nil
	}
	allows := n.allows()
	if f.Total() <= limit {
		fmt.Fprintf(n.site.Log, "brandrt: rank %d: %s; %s%s\n", n.me, f, allows, n.leaves(limit-f.Total()))
		return nil
	}
	if fit, ok := n.fitHanded(f, limit); ok {
		fmt.Fprintf(n.site.Log, "brandrt: rank %d: %s; %s%s: the files handed on are bounded at %s to fit it, not %s (beyond it the training processes get copies; --hand-mem sets it)\n",
			n.me, fit, allows, n.leaves(limit-fit.Total()), mib(n.HandCap()), mib(n.handRule(f.Budget)))
		return nil
	}
	do := "that leaves nothing for its files: run it with more memory than " + mib(n.footprintAt(0, n.remoteAt(0)).Total()+n.cfg.MemLeaveBytes)
	if s, ok := n.shardFits(limit); ok && f.Budget < s {
		do = fmt.Sprintf("give it --mem %s or more, its whole shard, whose files then stay in memory and take nothing more when handed on (--mem 100%%cgroup takes it), or run it with more memory", mib(s))
	} else if b := n.fitBudget(limit); b > 0 {
		do = fmt.Sprintf("give it --mem %s or less (--mem 100%%cgroup takes what the cgroup leaves), or run it with more memory", mib(b))
	}
	if n.cfg.MemLeaveBytes > 0 {
		do += " or a smaller --leave"
	}
	return fmt.Errorf("rt: %s; %s: %s", f, allows, do)
}

// cgroupRoom is what the rank's memory cgroup allows it: its limit less
// --leave; 0 when the cgroup sets no limit. A --leave that takes all of
// the limit is an error.
func (n *Node) cgroupRoom() (int64, error) {
	limit, leave := n.site.MemLimitBytes, n.cfg.MemLeaveBytes
	if limit <= 0 {
		return 0, nil
	}
	if leave >= limit {
		return 0, fmt.Errorf("rt: --leave %s leaves the rank nothing: its memory cgroup allows %s in all (%s)", mib(leave), mib(limit), n.site.MemLimitFrom)
	}
	return limit - leave, nil
}

// allows says what the rank's memory cgroup allows it: "its memory
// cgroup allows 1.5 GiB (FILE)", and "less 620 MiB left for the other
// processes in it (--leave)".
func (n *Node) allows() string {
	s := fmt.Sprintf("its memory cgroup allows %s (%s)", mib(n.site.MemLimitBytes), n.site.MemLimitFrom)
	if n.cfg.MemLeaveBytes > 0 {
		s += fmt.Sprintf(", less %s it leaves for the other processes in it (--leave)", mib(n.cfg.MemLeaveBytes))
	}
	return s
}

// leaveUnused says that --leave, when given, has no limit to take from.
func (n *Node) leaveUnused() string {
	if n.cfg.MemLeaveBytes > 0 {
		return fmt.Sprintf(" (--leave %s has nothing to leave from)", mib(n.cfg.MemLeaveBytes))
	}
	return ""
}

// leaves says what a memory cgroup leaves beside the rank's footprint
// for the other processes in it: training processes that share the
// cgroup need theirs there, or the kernel reclaims the rank's pages and
// theirs over and over (400,000 files of 8 KB, BENCHMARKS.md); rest is
// what the footprint leaves of the cgroup's room (beyond --leave).
func (n *Node) leaves(rest int64) string {
	if n.cfg.MemLeaveBytes > 0 {
		return fmt.Sprintf(", and %s more beside the footprint", mib(rest))
	}
	return fmt.Sprintf(", which leaves %s for the other processes in it (training processes in the same cgroup need room: in the loader benchmark a training process with 4 DataLoader workers reading from the rank held 267-361 MiB, 498 MiB with 400,000 files; --leave sets it aside)", mib(rest))
}

// fitHanded lowers the default bound on the files handed on (handCapAt)
// so that footprint f fits limit bytes, as far as it can (to 8 MiB), and
// returns the footprint then; false, and the bound as it was, when even
// that does not fit or the bound was given (--hand-mem).
func (n *Node) fitHanded(f Footprint, limit int64) (Footprint, bool) {
	if n.cfg.HandMemBytes >= 0 || f.Handed == 0 {
		return f, false
	}
	over := f.Total() - limit
	h := n.handCapAt(f.Budget) - int64(float64(over)/f.OwnRatio) - 1<<20 // the default: within handableBytes
	if h < 8<<20 {
		return f, false
	}
	n.data.handFit = h
	if fit := n.Footprint(); fit.Total() <= limit {
		return fit, true
	}
	n.data.handFit = 0
	return f, false
}

// fitBudget is the largest budget whose footprint fits limit bytes, or 0
// when none does.
func (n *Node) fitBudget(limit int64) int64 {
	fits := func(b int64) bool { return n.fitsAt(b, limit) }
	if _, ok := n.shardFits(limit); ok { // and so does any budget above it
		return limit
	}
	if !fits(1) {
		return 0
	}
	lo, hi := int64(1), limit // fits(lo), and no budget above limit fits
	for hi-lo > 1<<10 {
		mid := lo + (hi-lo)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// fitsAt reports whether the footprint of a budget of b bytes fits limit
// bytes.
func (n *Node) fitsAt(b, limit int64) bool { return n.footprintAt(b, n.remoteAt(b)).Total() <= limit }

// shardFits is a single rank's shard, and whether a budget that holds it
// fits limit bytes. Its footprint grows with the budget up to the shard,
// falls there (the files handed on then take nothing: holdsShard) and
// stays flat above, so a budget below a shard that fits may not fit.
func (n *Node) shardFits(limit int64) (int64, bool) {
	s := n.data.facts.bytes
	return s, n.holdsShard(s) && n.fitsAt(s, limit)
}

// cgroupBudget is the budget that Config.Mem.Cgroup gives the rank
// in its memory cgroup (cgroupRoom: Site.MemLimitBytes less --leave):
// that share of the largest budget whose footprint fits it, so that
// 100 % just fits (fitsCgroup). A share that falls below a single
// rank's shard that fits, where its footprint does not, is the shard.
func (n *Node) cgroupBudget() (int64, error) {
	frac := n.cfg.Mem.Cgroup
	limit, err := n.cgroupRoom()
	if err != nil {
		return 0, err
	}
	if limit <= 0 {
		return 0, fmt.Errorf("rt: --mem %g%%cgroup: the rank's memory cgroup sets no limit: give --mem in bytes or as a share of its shard", 100*frac)
	}
	b := int64(frac * float64(n.fitBudget(limit)))
	if s, ok := n.shardFits(limit); ok && b < s && !n.fitsAt(b, limit) {
		// the share falls below a shard that fits, where the files
		// handed on count again (holdsShard): the shard, then
		b = s
	}
	if b <= 0 {
		return 0, fmt.Errorf("rt: --mem %g%%cgroup: %s, which leaves nothing for its files beside the rest of its footprint (%s)",
			100*frac, n.allows(), n.footprintAt(0, n.remoteAt(0)))
	}
	return b, nil
}

// fitsNode refuses a budget larger than the node's memory
// (Site.NodeMemBytes): the kernel would end the rank instead, later.
func (n *Node) fitsNode() error {
	node := n.site.NodeMemBytes
	own, shard, remote := n.data.m.MemBytes(n.me), n.data.m.ShardBytes(n.me), n.remoteBytes()
	held := min(own, shard)
	if node <= 0 || held+remote <= node {
		return nil
	}
	return fmt.Errorf("rt: the rank's memory would hold %s of its own files (--mem %s, its shard has %s) and up to %s of other ranks' (--remote-mem), %s in all, "+
		"but its node has %s of memory: lower --mem or --remote-mem", mib(held), mib(own), mib(shard), mib(remote), mib(held+remote), mib(node))
}
