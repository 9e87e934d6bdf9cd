package rt

import (
	"io"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/proto"
)

// Site is what a rank finds where it runs and the services it is given,
// beside what the user chose (Config): rt/job fills it from the node,
// its memory cgroup, the launcher and the staged copies; a test, from
// its own stand-ins. Its zero value is usable: a nil Log logs nothing,
// a nil FS is the operating system's.
type Site struct {
	// ShardDirs, when set, are the directories that hold this rank's
	// shards, one per shard in order (staged copies; see chunk.OpenHome).
	ShardDirs []string
	// Source, when set, is the dataset that the copies the rank reads
	// (ShardDirs, or Chunks) were staged from, "{rank}" in it replaced by
	// the rank: a chunk that a copy holds damaged (read twice) is read
	// from there before it counts as damage (see fallback).
	Source string
	// NodeMemBytes is the node's memory in bytes. When positive, Open
	// refuses a rank whose own files in memory (Config.Mem, as far as its
	// shard fills it) and other ranks' files (Config.RemoteMemBytes) together
	// need more; 0 checks nothing.
	NodeMemBytes int64
	// MemLimitBytes is the memory limit of the rank's cgroup in bytes
	// (launch.MemCgroup), and MemLimitFrom the file that sets it, for
	// messages. When positive, Open refuses a rank whose memory
	// (Footprint) does not fit it; 0 checks nothing.
	MemLimitBytes int64
	MemLimitFrom  string
	// Nodes, when set, names each rank's node for the messages about a
	// peer that sends nothing (Config.PeerWarn).
	Nodes []string
	// Log receives messages about this rank (damaged files).
	Log io.Writer
	// FS is the file system the chunks are read through.
	FS chunk.FS
	// Memory, when set, lends the buffers chunks are read into and those
	// files of more than 32 KiB from other ranks are received into (memory
	// shared with the clients); by default the shard maps its own and
	// received files live in Go memory. It must lend the sizes asked for
	// exactly when they are powers of two of 64 KiB or more.
	Memory chunk.Memory
	// Order, when set on every rank, is called on rank 0 at the end of
	// each epoch with the file delivered at every position of every
	// rank's trace (proto.NoFile where none was), which every rank
	// records and the ranks gather to rank 0. It must not change files:
	// rank 0 measures the order from the same slices.
	Order func(epoch uint32, files [][]proto.FileID)
	// Report, when set, is called on every rank with each epoch's
	// statistics, summed over the ranks.
	Report func(EpochStats)
}

// withDefaults returns s with a log and a file system.
func (s Site) withDefaults() Site {
	if s.Log == nil {
		s.Log = io.Discard
	}
	if s.FS == nil {
		s.FS = chunk.OS
	}
	return s
}
