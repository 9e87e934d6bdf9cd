package job

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/chunk/stage"
)

// stageEvery spaces a staging rank's progress lines.
const stageEvery = 10 * time.Second

// shardLines is the most shards of a rank whose staging is told shard by
// shard; a rank with more (a dataset of a few hundred shards on a few
// nodes) says it in one line.
const shardLines = 4

// stageHome copies the shards that rank serves in a job of ranks ranks
// (chunk.Assign) from the dataset in chunks (shared storage) to the
// node-local directory local, or reuses verified copies there
// (chunk/stage), and returns their copies' directories in order, which
// the rank then reads. It says what it did on log, and every stageEvery
// how far a copy has come. Closing stop (a signal) stops it; it then
// removes what it copied, as it does when it fails.
func stageHome(chunks string, rank, ranks int, local string, log io.Writer, stop <-chan struct{}) ([]string, error) {
	cfg := stage.DefaultConfig()
	cfg.Source, cfg.Local, cfg.Stop = chunk.ForRank(chunks, rank), local, stop
	m, err := chunk.ReadManifest(chunk.OS, cfg.Source)
	if err != nil {
		return nil, err
	}
	homes, err := chunk.AssignDir(chunks, m, ranks)
	if err != nil {
		return nil, err
	}
	lo, hi := homes[rank], homes[rank+1]
	cfg.Shards = chunk.Shards(homes, rank)
	cfg.Progress = stageProgress(log, rank)
	cfg.Replacing = func(shard int, why string) {
		fmt.Fprintf(log, "brandrt: rank %d: its staged copy of shard %d was not reused: %s; copying it again from %s\n", rank, shard, why, cfg.Source)
	}
	start := time.Now()
	res, err := stage.Stage(cfg)
	if errors.Is(err, stage.ErrInterrupted) {
		return nil, fmt.Errorf("interrupted while staging shards %d–%d; removed what it copied to %s", lo, hi-1, local)
	}
	if err != nil {
		return nil, err
	}
	if hi-lo <= shardLines {
		for _, r := range res {
			tellStaged(log, rank, cfg.Source, r)
		}
	} else {
		tellAllStaged(log, rank, local, res, time.Since(start))
	}
	dirs := make([]string, len(res))
	for i, r := range res {
		dirs[i] = r.Dir
	}
	return dirs, nil
}

// stageProgress says on log that rank waits for another stage, and, every
// stageEvery, how far a copy has come: a short stage says nothing until
// it is done.
func stageProgress(log io.Writer, rank int) func(int, stage.Step, int64, int64) {
	last := time.Now()
	return func(shard int, step stage.Step, done, total int64) {
		if step == stage.Wait {
			fmt.Fprintf(log, "brandrt: rank %d: waiting for another stage of shard %d on this node\n", rank, shard)
			return
		}
		if time.Since(last) >= stageEvery && done < total {
			last = time.Now()
			fmt.Fprintf(log, "brandrt: rank %d: staging shard %d: %s %s of %s\n", rank, shard, step, humanize.IBytes(uint64(done)), humanize.IBytes(uint64(total)))
		}
	}
}

// tellStaged says on log what the stage did with one shard of source.
func tellStaged(log io.Writer, rank int, source string, res stage.Result) {
	verified := fmt.Sprintf("verified %s in %s", humanize.IBytes(uint64(res.VerifiedBytes)), res.VerifyTime.Round(time.Millisecond))
	if res.Reused {
		read := fmt.Sprintf("read %s from %s: the manifest alone", humanize.IBytes(uint64(res.SourceBytes)), source)
		if res.SourceBytes == 0 { // the manifest was counted for an earlier shard
			read = "read nothing more from " + source
		}
		fmt.Fprintf(log, "brandrt: rank %d: reusing its staged copy of shard %d, %s (%s); %s\n", rank, res.Shard, res.Dir, read, verified)
		return
	}
	fmt.Fprintf(log, "brandrt: rank %d: staged shard %d to %s: copied %s in %s; %s\n",
		rank, res.Shard, res.Dir, humanize.IBytes(uint64(res.CopiedBytes)), res.CopyTime.Round(time.Millisecond), verified)
}

// tellAllStaged says on log, in one line, what the stage of many shards
// did, in took.
func tellAllStaged(log io.Writer, rank int, local string, res []stage.Result, took time.Duration) {
	var copied, verified int64
	reused, replaced := 0, ""
	for _, r := range res {
		copied, verified = copied+r.CopiedBytes, verified+r.VerifiedBytes
		if r.Reused {
			reused++
		}
		if r.Replaced != "" && replaced == "" {
			replaced = fmt.Sprintf(" (shard %d's copy was not reused: %s)", r.Shard, r.Replaced)
		}
	}
	lo, hi := res[0].Shard, res[len(res)-1].Shard
	fmt.Fprintf(log, "brandrt: rank %d: staged shards %d–%d (%d) to %s in %s: copied %s, reused the copies of %d%s; verified %s\n",
		rank, lo, hi, len(res), local, took.Round(time.Millisecond), humanize.IBytes(uint64(copied)), reused, replaced, humanize.IBytes(uint64(verified)))
}
