package chunk

// PoolFree returns the read buffers the home's pool keeps for reuse, and
// those its shards' own pools keep.
func PoolFree(h *Home) (home, shards int) {
	for _, s := range h.shards {
		shards += len(s.pool.free)
	}
	return len(h.pool.free), shards
}
