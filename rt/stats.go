package rt

import (
	"time"

	"github.com/brandrt/brandrt/proto"
)

// tally is what a rank counts of an epoch beside its loop's statistics
// (Node.tally): its deliveries per file id (files left out as damaged
// count too), summed across the ranks for duplicates and files missing
// (Node.perFile); and rank 0's record of the last epoch's order
// (Config.MixBatch, mix.go).
type tally struct {
	counts []int32
	mix    mixer
}

// EpochStats is one epoch's statistics, summed (or, for peaks and time,
// maximised) over all ranks.
type EpochStats struct {
	Epoch int `json:"epoch"`
	Ranks int `json:"ranks"`
	// FilesExpected is the number of trace positions of all ranks: every
	// file of the dataset once (DatasetFiles) unless the clients supplied
	// traces that cover only part of it. FilesDelivered counts files
	// handed to clients; DuplicateDeliveries the deliveries of a file
	// beyond its first; FilesMissing how many fewer distinct files were
	// delivered than expected (with traces covering the dataset, the files
	// never delivered); FailedDeliveries the positions answered with an
	// error.
	//
	// In an epoch resumed mid-way (Config.Resume), FilesBefore counts the
	// positions delivered before the restart, which are not expected.
	DatasetFiles        int64 `json:"dataset_files"`
	FilesBefore         int64 `json:"files_before_restart,omitempty"`
	FilesExpected       int64 `json:"files_expected"`
	FilesDelivered      int64 `json:"files_delivered"`
	DuplicateDeliveries int64 `json:"duplicate_deliveries"`
	FilesMissing        int64 `json:"files_missing"`
	FailedDeliveries    int64 `json:"failed_deliveries"`
	// FilesSkipped counts the positions answered with a file left out as
	// damaged on storage (Config.OnDamage "skip"); they count as answered
	// and distinct, not as delivered. SkippedCRCSum and SkippedLabelSum
	// are their sums as below.
	FilesSkipped    int64 `json:"files_skipped"`
	SkippedCRCSum   int64 `json:"skipped_crc_sum"`
	SkippedLabelSum int64 `json:"skipped_label_sum"`
	// ChecksumErrors counts delivered files whose CRC32C differs from the
	// index (checked by the in-process readers; shared-memory clients
	// check their own).
	ChecksumErrors int64 `json:"checksum_errors"`
	BytesDelivered int64 `json:"bytes_delivered"`
	// ChunkReads counts whole chunks loaded into memory and ChunkBytes
	// their bytes (proto.Stats'). StorageReads and StorageBytes count the
	// loads that went to storage: when a rank's budget holds its whole
	// shard, its chunks stay in memory after their first read.
	// ReadAmplification is StorageBytes / BytesDelivered: what storage
	// paid per byte delivered.
	ChunkReads        int64   `json:"chunk_reads"`
	ChunkBytes        int64   `json:"chunk_bytes"`
	ReadAmplification float64 `json:"read_amplification"`
	StorageReads      int64   `json:"storage_reads"`
	StorageBytes      int64   `json:"storage_bytes"`
	// EarlyReads counts the chunk reads made while the previous epoch
	// drained, into the memory its last files freed (the window policy
	// with the seed's traces).
	EarlyReads int64 `json:"early_reads"`
	// LocalHits counts requests answered from memory without a read;
	// Misses the requests that waited for their chunk's read (proto.Stats').
	LocalHits int64 `json:"local_hits"`
	Misses    int64 `json:"misses"`
	// Grants counts the window policy's grants: a rank telling the home
	// of files the plan pushes to it how far it may push them.
	Grants int64 `json:"grants"`
	// RemoteRequests counts requests sent to other ranks; RemoteFiles and
	// RemoteBytes the delivered files that came from other ranks (on
	// request or pushed ahead); NetworkBytes all bytes sent between ranks.
	RemoteRequests int64 `json:"remote_requests"`
	RemoteFiles    int64 `json:"remote_files"`
	RemoteBytes    int64 `json:"remote_bytes"`
	NetworkBytes   int64 `json:"network_bytes"`
	// Prefetched counts the files sent to a rank ahead of its client's
	// request, and PrefetchHits the requests such a file answered
	// (proto.Stats').
	Prefetched   int64 `json:"prefetched"`
	PrefetchHits int64 `json:"prefetch_hits"`
	// PeakMemBytes is the most any rank held at once, as proto accounts.
	PeakMemBytes int64 `json:"peak_mem_bytes"`
	// StallSeconds is the time clients spent waiting for deliveries,
	// summed over clients.
	StallSeconds float64 `json:"client_stall_seconds"`
	// IdleSeconds is how long the ranks waited for the first request of
	// the epoch (see Config.Pause), and IdleCPUSeconds the most CPU time
	// a rank's process used meanwhile.
	IdleSeconds    float64 `json:"idle_seconds"`
	IdleCPUSeconds float64 `json:"idle_cpu_seconds"`
	// FirstWaitSeconds is how long the epoch's first request waited for
	// its answer on the slowest rank: the start-up wait a training job
	// sees, which reading ahead of the epoch shortens.
	FirstWaitSeconds float64 `json:"first_wait_seconds"`
	// Seconds is the slowest rank's time to serve the epoch, from its
	// first request.
	Seconds        float64 `json:"seconds"`
	FilesPerSecond float64 `json:"files_per_second"`
	BytesPerSecond float64 `json:"bytes_per_second"`
	// Sums of the CRC32C and labels the owners' indexes keep for the
	// delivered files, and for all files: with no duplicate, no missing
	// file and no checksum error, every file arrived once with its bytes
	// and label.
	DeliveredCRCSum   int64 `json:"delivered_crc_sum"`
	IndexCRCSum       int64 `json:"index_crc_sum"`
	DeliveredLabelSum int64 `json:"delivered_label_sum"`
	IndexLabelSum     int64 `json:"index_label_sum"`
	// Verified says that in-process readers checked every delivered
	// file's bytes (ChecksumErrors counts what they found) and measured
	// their waits (StallSeconds); shared-memory clients do their own.
	Verified bool `json:"verified"`
	// EndedEarly says that a client ended the epoch on some rank before
	// all its positions were asked for.
	EndedEarly bool `json:"ended_early"`
	// FilesLeft counts files still held when the epoch ended: loaded but
	// never asked for when it ended early, else a leak.
	FilesLeft int64 `json:"files_left_in_memory"`
	// RanksTrainingOver counts the ranks whose training had ended
	// (Node.TrainingOver) when the epoch ended.
	RanksTrainingOver int `json:"ranks_training_over"`
	// Order is how random the epoch's order was beside a shuffle of the
	// same files, measured by rank 0 from the order the ranks delivered
	// (Config.MixBatch); nil on other ranks and where nothing is measured:
	// an epoch resumed in its middle (its first files were delivered
	// before the restart, unrecorded) or ended early.
	Order *proto.Mix `json:"order,omitempty"`
}

// epochCounts is one rank's raw counts of an epoch.
type epochCounts struct {
	proto   proto.Stats
	loop    loopStats
	cons    consumerStats
	left    int64
	seconds float64
	idle    float64
	idleCPU time.Duration
	// firstWait: seconds the epoch's first request waited
	firstWait float64
	expected  int64
	before    int64
	verified  bool
	ended     bool
	over      int64 // 1 when the rank's training is over
}

// reduce sums the ranks' counts and checks the per-file delivery counts.
func (n *Node) reduce(e uint32, c epochCounts) (EpochStats, error) {
	ps, ls, cs := c.proto, c.loop, c.cons
	sums := []int64{ls.delivered, ls.failed, cs.checksumErrors, ls.deliveredBytes, ps.ChunkReads, ps.ChunkBytes,
		ps.LocalHits, ps.RemoteRequests, ls.remoteFiles, ls.remoteBytes, ls.bytesOut, ps.Prefetched, ps.PrefetchHits,
		int64(cs.stall), ls.crcSum, n.data.crcSum, ls.labelSum, n.data.labelSum, c.left, ls.storageReads, ls.storageBytes, ps.Misses, ps.EarlyReads,
		ls.skipped, ls.skippedCRC, ls.skippedLabel, c.over, ps.Grants}
	s, err := n.comm.AllreduceSum(sums)
	if err != nil {
		return EpochStats{}, err
	}
	ended := int64(0)
	if c.ended {
		ended = 1
	}
	mx, err := n.comm.AllreduceMax([]int64{ps.PeakMem, int64(c.seconds * 1e9), int64(c.idle * 1e9), int64(c.idleCPU), ended, int64(c.firstWait * 1e9)})
	if err != nil {
		return EpochStats{}, err
	}
	dup, distinct, err := n.perFile()
	if err != nil {
		return EpochStats{}, err
	}
	st := EpochStats{Epoch: int(e), Ranks: n.size, DatasetFiles: int64(len(n.tally.counts)), FilesExpected: c.expected, FilesBefore: c.before,
		FilesDelivered: s[0], FailedDeliveries: s[1], ChecksumErrors: s[2], BytesDelivered: s[3],
		ChunkReads: s[4], ChunkBytes: s[5], StorageReads: s[19], StorageBytes: s[20], EarlyReads: s[22], LocalHits: s[6], Misses: s[21], RemoteRequests: s[7], RemoteFiles: s[8],
		RemoteBytes: s[9], NetworkBytes: s[10], Prefetched: s[11], PrefetchHits: s[12],
		StallSeconds: float64(s[13]) / 1e9, DeliveredCRCSum: s[14], IndexCRCSum: s[15],
		DeliveredLabelSum: s[16], IndexLabelSum: s[17], FilesLeft: s[18], FilesSkipped: s[23], SkippedCRCSum: s[24], SkippedLabelSum: s[25], RanksTrainingOver: int(s[26]), Grants: s[27],
		DuplicateDeliveries: dup, FilesMissing: max(0, c.expected-distinct), PeakMemBytes: mx[0], Seconds: float64(mx[1]) / 1e9,
		IdleSeconds: float64(mx[2]) / 1e9, IdleCPUSeconds: float64(mx[3]) / 1e9, FirstWaitSeconds: float64(mx[5]) / 1e9, Verified: c.verified, EndedEarly: mx[4] != 0}
	if st.BytesDelivered > 0 {
		st.ReadAmplification = float64(st.StorageBytes) / float64(st.BytesDelivered)
	}
	if st.Seconds > 0 {
		st.FilesPerSecond = float64(st.FilesDelivered) / st.Seconds
		st.BytesPerSecond = float64(st.BytesDelivered) / st.Seconds
	}
	return st, nil
}

// perFile sums every rank's deliveries per file and counts the extra
// deliveries of files delivered more than once, and the distinct files
// delivered. It sums perFilePiece files at a time, so that what it
// holds beside the counts (its buffers and MPI's) stays the same
// whatever the dataset's size.
func (n *Node) perFile() (dup, distinct int64, err error) {
	counts := n.tally.counts
	v := make([]int64, min(len(counts), perFilePiece))
	for lo := 0; lo < len(counts); lo += perFilePiece {
		piece := counts[lo:min(lo+perFilePiece, len(counts))]
		v = v[:len(piece)]
		for i, c := range piece {
			v[i] = int64(c)
		}
		all, err := n.comm.AllreduceSum(v)
		if err != nil {
			return 0, 0, err
		}
		for _, c := range all {
			if c > 0 {
				distinct++
			}
			if c > 1 {
				dup += c - 1
			}
		}
	}
	return dup, distinct, nil
}

// perFilePiece is the files whose deliveries perFile sums at once
// (8 MiB of counts). A variable so that tests can lower it.
var perFilePiece = 1 << 20

// OK reports whether the epoch answered every trace position with a
// distinct file. When the traces cover the dataset, it also checks that
// each file came with its label and, when Verified, its bytes as its
// index records them (the sums are over the whole index), and that no
// file was left in memory undelivered (with partial traces, chunk reads
// load files nobody asks for).
//
// Files left out as damaged (FilesSkipped) count as answered: OK then
// says that every other file was delivered exactly once.
func (s EpochStats) OK() bool {
	whole := s.FilesExpected != s.DatasetFiles ||
		s.DeliveredCRCSum+s.SkippedCRCSum == s.IndexCRCSum && s.DeliveredLabelSum+s.SkippedLabelSum == s.IndexLabelSum && s.FilesLeft == 0
	return s.FilesDelivered+s.FilesSkipped == s.FilesExpected && s.DuplicateDeliveries == 0 && s.FilesMissing == 0 &&
		s.FailedDeliveries == 0 && s.ChecksumErrors == 0 && whole
}

// loopStats counts what the loop itself sees.
type loopStats struct {
	bytesOut                   int64 // bytes sent to peers
	remoteFiles, remoteBytes   int64 // delivered files other ranks sent
	storageReads, storageBytes int64 // chunk reads that went to storage
	// files delivered to clients, their bytes, and the sums of their
	// checksums and labels as their owners' indexes have them
	delivered, deliveredBytes, failed int64
	crcSum, labelSum                  int64
	// files left out as damaged, and the sums of their checksums and
	// labels
	skipped, skippedCRC, skippedLabel int64
}
