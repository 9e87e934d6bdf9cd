package proto

// Stats counts what one rank did in the current epoch.
type Stats struct {
	// Requests is the number of client requests.
	Requests int64
	// LocalHits counts client requests for local files answered from a
	// valid slot, without a read.
	LocalHits int64
	// BufferHits counts client requests for remote files answered from the
	// buffer, without a message.
	BufferHits int64
	// Misses counts requests (of local clients or peers) that found no
	// valid file for their slot and waited for a read.
	Misses int64
	// ChunkReads, FilesRead and BytesRead count whole-chunk reads.
	ChunkReads, FilesRead, BytesRead int64
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
	// Pushed and PushedBytes count files this rank pushed to peers.
	Pushed, PushedBytes int64
	// PushesReceived counts pushed files placed in this rank's buffer.
	PushesReceived int64
	// PeakHeld and PeakBuffered are the most bytes held at once in local
	// VCs and in buffer VCs.
	PeakHeld, PeakBuffered int64
	// PeakMem is the most bytes held at once in both.
	PeakMem int64
	// Stale counts messages and read completions of an earlier epoch that
	// were dropped.
	Stale int64
}

// Add returns the field-wise sum of s and t, with the peaks maximised.
func (s Stats) Add(t Stats) Stats {
	return Stats{
		Requests: s.Requests + t.Requests, LocalHits: s.LocalHits + t.LocalHits,
		BufferHits: s.BufferHits + t.BufferHits, Misses: s.Misses + t.Misses,
		ChunkReads: s.ChunkReads + t.ChunkReads, FilesRead: s.FilesRead + t.FilesRead,
		BytesRead: s.BytesRead + t.BytesRead, EarlyReads: s.EarlyReads + t.EarlyReads, FailedReads: s.FailedReads + t.FailedReads,
		FilesLoaded: s.FilesLoaded + t.FilesLoaded, BytesLoaded: s.BytesLoaded + t.BytesLoaded,
		Delivered: s.Delivered + t.Delivered, BytesDelivered: s.BytesDelivered + t.BytesDelivered,
		RemoteRequests: s.RemoteRequests + t.RemoteRequests, RemoteServed: s.RemoteServed + t.RemoteServed,
		Redirects: s.Redirects + t.Redirects, Pushed: s.Pushed + t.Pushed,
		PushedBytes: s.PushedBytes + t.PushedBytes, PushesReceived: s.PushesReceived + t.PushesReceived,
		PeakHeld: max(s.PeakHeld, t.PeakHeld), PeakBuffered: max(s.PeakBuffered, t.PeakBuffered),
		PeakMem: max(s.PeakMem, t.PeakMem),
		Stale:   s.Stale + t.Stale,
	}
}
