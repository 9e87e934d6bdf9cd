package proto

// Stats counts what one rank did in the current epoch.
type Stats struct {
	// Requests is the number of client requests.
	Requests int64
	// LocalHits counts client requests for local files answered from a
	// valid slot, without a read.
	LocalHits int64
	// PrefetchHits counts client requests for remote files answered by a
	// file prefetched into the buffer, without a message.
	PrefetchHits int64
	// Misses counts requests (of local clients or peers) that found no
	// valid file for their slot and waited for a read.
	Misses int64
	// ChunkReads, FilesRead and ChunkBytes count whole-chunk reads.
	ChunkReads, FilesRead, ChunkBytes int64
	// EarlyReads counts the chunk reads among them that were issued
	// while the previous epoch drained (the window policy's overlap).
	EarlyReads int64
	// FailedReads counts reads that completed with a failure.
	FailedReads int64
	// FilesLoaded and BytesLoaded count files that entered memory.
	FilesLoaded, BytesLoaded int64
	// Delivered and BytesDelivered count files handed to local clients.
	Delivered, BytesDelivered int64
	// RemoteRequests counts on-demand requests sent to owners.
	RemoteRequests int64
	// RemoteServed counts peers' requests answered with a file.
	RemoteServed int64
	// Redirects counts replies that pointed to a pushed file.
	Redirects int64
	// Prefetched and PrefetchedBytes count the files sent to a rank ahead
	// of its client's request: by the rank that pushed them (the papers'
	// policy), or by the rank that fetched them ahead (the window policy).
	// Summed over the ranks, each such file counts once.
	Prefetched, PrefetchedBytes int64
	// PushesReceived counts pushed files placed in this rank's buffer.
	PushesReceived int64
	// Grants counts the window policy's grants sent to homes (MsgGrant).
	Grants int64
	// PeakHeld and PeakBuffered are the most bytes held at once in local
	// VCs and in buffer VCs.
	PeakHeld, PeakBuffered int64
	// PeakMem is the most bytes held at once in both.
	PeakMem int64
	// Stale counts messages and read completions of an earlier epoch that
	// were dropped (not the window plan's answers and positions ahead,
	// which a rank that ended the epoch first may never have read).
	Stale int64
}

// Add returns the field-wise sum of s and t, with the peaks maximised.
func (s Stats) Add(t Stats) Stats {
	return Stats{
		Requests: s.Requests + t.Requests, LocalHits: s.LocalHits + t.LocalHits,
		PrefetchHits: s.PrefetchHits + t.PrefetchHits, Misses: s.Misses + t.Misses,
		ChunkReads: s.ChunkReads + t.ChunkReads, FilesRead: s.FilesRead + t.FilesRead,
		ChunkBytes: s.ChunkBytes + t.ChunkBytes, EarlyReads: s.EarlyReads + t.EarlyReads, FailedReads: s.FailedReads + t.FailedReads,
		FilesLoaded: s.FilesLoaded + t.FilesLoaded, BytesLoaded: s.BytesLoaded + t.BytesLoaded,
		Delivered: s.Delivered + t.Delivered, BytesDelivered: s.BytesDelivered + t.BytesDelivered,
		RemoteRequests: s.RemoteRequests + t.RemoteRequests, RemoteServed: s.RemoteServed + t.RemoteServed,
		Redirects: s.Redirects + t.Redirects, Prefetched: s.Prefetched + t.Prefetched,
		PrefetchedBytes: s.PrefetchedBytes + t.PrefetchedBytes, PushesReceived: s.PushesReceived + t.PushesReceived, Grants: s.Grants + t.Grants,
		PeakHeld: max(s.PeakHeld, t.PeakHeld), PeakBuffered: max(s.PeakBuffered, t.PeakBuffered),
		PeakMem: max(s.PeakMem, t.PeakMem),
		Stale:   s.Stale + t.Stale,
	}
}
