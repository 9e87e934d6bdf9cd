package rt

import (
	"fmt"
	"io"

	"github.com/brandrt/brandrt/internal/human"
)

// Report prints the epoch's statistics for people, as serve does after
// each epoch: what was delivered and how fast, the chunks read, memory,
// the order's randomness, the network, and the verdict (Verdict) on its
// last line. epochs is the job's number of epochs (0: not known).
func (s EpochStats) Report(w io.Writer, epochs int) {
	of := ""
	if epochs > 0 {
		of = fmt.Sprintf("/%d", epochs)
	}
	fmt.Fprintf(w, "epoch %d%s: %s files, %s delivered by %d ranks in %.2fs: %s files/s, %s/s\n",
		s.Epoch, of, human.Comma(s.FilesDelivered), human.IBytes(s.BytesDelivered), s.Ranks, s.Seconds,
		human.Comma(int64(s.FilesPerSecond)), human.IBytes(int64(s.BytesPerSecond)))
	early := ""
	if s.EarlyReads > 0 {
		early = fmt.Sprintf(", %s of them while the previous epoch drained", human.Comma(s.EarlyReads))
	}
	fmt.Fprintf(w, "  chunks   %s read from storage, %s (%.2f× what was delivered)%s; %s loaded whole into memory (%s)\n",
		human.Comma(s.StorageReads), human.IBytes(s.StorageBytes), s.ReadAmplification, early, human.Comma(s.ChunkReads), human.IBytes(s.ChunkBytes))
	if s.FilesSkipped > 0 {
		fmt.Fprintf(w, "  damaged  %s left out: damaged on storage (--on-damage skip; each named in the log when first found)\n", human.Plural(s.FilesSkipped, "file"))
	}
	fmt.Fprintf(w, "  memory   %s local hits, %s requests waited for their chunk's read; at most %s held by one rank\n",
		human.Comma(s.LocalHits), human.Comma(s.Misses), human.IBytes(s.PeakMemBytes))
	fmt.Fprintf(w, "  first    the epoch's first request waited %s for its file (the slowest rank)\n", human.Seconds(s.FirstWaitSeconds))
	if x := s.Order; x != nil {
		again := ""
		if x.PairsAgain != nil {
			again = fmt.Sprintf("; %s of the pairs in a batch meet again (%s)", human.Percent(x.PairsAgain), human.Percent(x.PairsAgainShuffle))
		}
		fmt.Fprintf(w, "  order    %.1f distinct chunks per batch of %d (a shuffle: %.1f), %.1f (%.1f) in the first 1%%; chunk span %.2f (%.2f)%s\n",
			x.DistinctChunksPerBatch, x.Batch, x.DistinctChunksPerBatchShuffle, x.DistinctFirst, x.DistinctFirstShuffle,
			x.ChunkSpan, x.ChunkSpanShuffle, again)
	}
	grants := ""
	if s.Grants > 0 {
		grants = fmt.Sprintf(" (%s grants)", human.Comma(s.Grants))
	}
	fmt.Fprintf(w, "  network  %s remote requests, %s files pushed ahead%s, %s prefetch hits; %s files (%s) from other ranks, %s sent\n",
		human.Comma(s.RemoteRequests), human.Comma(s.Prefetched), grants, human.Comma(s.PrefetchHits), human.Comma(s.RemoteFiles), human.IBytes(s.RemoteBytes), human.IBytes(s.NetworkBytes))
	if s.Verified {
		fmt.Fprintf(w, "  clients  waited %.2fs in all\n", s.StallSeconds)
	}
	if s.IdleSeconds >= 0.1 {
		fmt.Fprintf(w, "  idle     %.2fs before the first request, using at most %.1f%% of a core on any rank\n",
			s.IdleSeconds, 100*s.IdleCPUSeconds/s.IdleSeconds)
	}
	fmt.Fprintf(w, "  %s\n", s.Verdict())
}

// Verdict is the epoch's last line: "check" and what was proved (every
// file delivered exactly once, or every position from a restart on, or
// every position of the clients' traces), "ended" when a client ended the
// epoch early, or "CHECK FAILED" with the counts that failed it.
func (s EpochStats) Verdict() string {
	switch {
	case s.OK() && s.FilesBefore > 0:
		return fmt.Sprintf("check    resumed: every position from the restart on answered, no file twice (%s delivered before the restart)",
			human.Comma(s.FilesBefore))
	case s.OK() && s.FilesExpected != s.DatasetFiles:
		return fmt.Sprintf("check    every position of the clients' traces answered, no file twice (they cover %s of %s files; %s loaded and never asked for)",
			human.Comma(s.FilesExpected), human.Comma(s.DatasetFiles), human.Comma(s.FilesLeft))
	case s.OK() && s.FilesSkipped > 0:
		return fmt.Sprintf("check    every file delivered exactly once but the %s left out as damaged", human.Comma(s.FilesSkipped))
	case s.OK() && s.Verified:
		return "check    every file delivered exactly once; bytes and labels match the index"
	case s.OK():
		return "check    every file delivered exactly once (the clients check the bytes)"
	}
	if s.EndedEarly {
		return fmt.Sprintf("ended    early, by a client: %s of %s files delivered; %s loaded and never asked for",
			human.Comma(s.FilesDelivered), human.Comma(s.FilesExpected), human.Comma(s.FilesLeft))
	}
	return fmt.Sprintf("CHECK FAILED: %s expected, %s delivered, %s duplicates, %s missing, %s failed, %s checksum errors, %s left in memory",
		human.Comma(s.FilesExpected), human.Comma(s.FilesDelivered), human.Comma(s.DuplicateDeliveries), human.Comma(s.FilesMissing),
		human.Comma(s.FailedDeliveries), human.Comma(s.ChecksumErrors), human.Comma(s.FilesLeft))
}
