package proto

import "math"

// Partial residency: the chunks a rank's memory carries from one epoch
// into the next.
//
// Each epoch ends with the chunks it read last still in memory, whole:
// the last of its read order, as many as fit Keep of the budget (all of
// them when the budget holds the shard). The next epoch begins with them
// (Resident), first in its order and without a read, and reads only the
// others from storage. Its own last chunks stay for the one after: some
// of those it began with, when its budget holds more than it reads, and
// the chunks it reads last. So memory is a pool of the whole budget all
// epoch long, as without residency, and storage gives the shard less
// what the budget keeps.

// KeepShare is WindowInput.Keep's default: with a quarter of the shard
// in memory, the bytes read per epoch fall from the shard's to 0.76 of
// it, the distinct chunks per batch by 2.8 % and the pairs of files that
// share a batch again in the next epoch rise by 16 % (simulate, 60,000
// files of 110 KB, 3 ranks, K=64, epoch 3; BENCHMARKS.md has the sweep).
const KeepShare = 0.95

// KeepBytes returns how many bytes of its chunks rank h carries into the
// next epoch at most: its whole shard when its budget holds it, else its
// budget less (1-Keep) of the budget or of what it lacks of the shard,
// whichever is less; nothing with Keep 0. The room left free lets the
// last chunks of an epoch in sooner (an epoch's end is less random as it
// shrinks); it shrinks as the budget nears the shard, so that the bytes
// read per epoch, the shard less KeepBytes, fall smoothly to 0 there.
func (in WindowInput) KeepBytes(h int) int64 {
	b, s := in.Budget[h], in.Mapping.ShardBytes(h)
	switch {
	case b >= s:
		return s
	case in.Keep <= 0:
		return 0
	}
	return b - int64(math.Ceil((1-in.Keep)*float64(min(b, s-b))))
}

// retained marks, in kept (per chunk), the chunks of pool order that
// stay in memory to the end of the epoch: the longest run at its end
// whose bytes fit KeepBytes. A run at the end keeps every chunk read
// before it free to leave as its files do, so the budget always has room
// for the next read (see PlanWindow).
func (in WindowInput) retained(h int, pl *pool, kept []bool) {
	room := in.KeepBytes(h)
	for i := len(pl.order) - 1; i >= 0; i-- {
		if pl.bytes[i] > room {
			return
		}
		room -= pl.bytes[i]
		kept[pl.order[i]] = true
	}
}
