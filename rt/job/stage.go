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

// stageHome stages each shard that rank serves in a job of ranks ranks
// (chunk.Assign) with stageShard, and returns their copies' directories
// in order.
func stageHome(chunks string, rank, ranks int, local string, log io.Writer, stop <-chan struct{}) ([]string, error) {
	src := chunk.ForRank(chunks, rank)
	m, err := chunk.ReadManifest(chunk.OS, src)
	if err != nil {
		return nil, err
	}
	homes, err := chunk.AssignDir(chunks, m, ranks)
	if err != nil {
		return nil, err
	}
	lo, hi := homes[rank], homes[rank+1]
	each := hi-lo <= shardLines // a line per shard, else one for them all
	var dirs []string
	var sum stage.Result
	reused, replaced := 0, ""
	start := time.Now()
	for s := lo; s < hi; s++ {
		res, err := stageShard(chunks, rank, s, local, log, each, stop)
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, res.Dir)
		sum.CopiedBytes += res.CopiedBytes
		sum.VerifiedBytes += res.VerifiedBytes
		if res.Reused {
			reused++
		}
		if res.Replaced != "" && replaced == "" {
			replaced = fmt.Sprintf(" (shard %d's copy was not reused: %s)", s, res.Replaced)
		}
	}
	if !each {
		fmt.Fprintf(log, "brandrt: rank %d: staged shards %d–%d (%d) to %s in %s: copied %s, reused the copies of %d%s; verified %s\n",
			rank, lo, hi-1, hi-lo, local, time.Since(start).Round(time.Millisecond), humanize.IBytes(uint64(sum.CopiedBytes)), reused, replaced,
			humanize.IBytes(uint64(sum.VerifiedBytes)))
	}
	return dirs, nil
}

// shardLines is the most shards of a rank whose staging is told shard by
// shard; a rank with more (a dataset of a few hundred shards on a few
// nodes) says it in one line.
const shardLines = 4

// stageShard copies shard of the dataset in chunks (shared storage), one
// that rank serves, to the node-local directory local, or reuses a
// verified copy there (chunk/stage), and returns the copy's directory,
// which the rank then reads. It says what it did on log, and every
// stageEvery how far a copy has come. Closing stop (a signal) stops it;
// it then removes what it copied.
func stageShard(chunks string, rank, shard int, local string, log io.Writer, each bool, stop <-chan struct{}) (stage.Result, error) {
	cfg := stage.DefaultConfig()
	cfg.Source, cfg.Rank, cfg.Local = chunk.ForRank(chunks, rank), shard, local
	last := time.Now() // a first line after stageEvery: a short stage says nothing until it is done
	cfg.Progress = func(step stage.Step, done, total int64) {
		if step == stage.Wait {
			fmt.Fprintf(log, "brandrt: rank %d: waiting for another stage of shard %d on this node\n", rank, shard)
			return
		}
		if time.Since(last) >= stageEvery && done < total {
			last = time.Now()
			fmt.Fprintf(log, "brandrt: rank %d: staging shard %d: %s %s of %s\n", rank, shard, step, humanize.IBytes(uint64(done)), humanize.IBytes(uint64(total)))
		}
	}
	cfg.Stop = stop
	res, err := stage.Stage(cfg)
	if errors.Is(err, stage.ErrInterrupted) {
		return res, fmt.Errorf("interrupted while staging shard %d; removed what it copied to %s", shard, local)
	}
	if err != nil || !each {
		return res, err
	}
	verified := fmt.Sprintf("verified %s in %s", humanize.IBytes(uint64(res.VerifiedBytes)), res.VerifyTime.Round(time.Millisecond))
	switch {
	case res.Reused:
		fmt.Fprintf(log, "brandrt: rank %d: reusing its staged copy of shard %d, %s (read %s from %s: the manifest alone); %s\n",
			rank, shard, res.Dir, humanize.IBytes(uint64(res.SourceBytes)), cfg.Source, verified)
	default:
		if res.Replaced != "" {
			fmt.Fprintf(log, "brandrt: rank %d: its staged copy of shard %d was not reused: %s\n", rank, shard, res.Replaced)
		}
		fmt.Fprintf(log, "brandrt: rank %d: staged shard %d to %s: copied %s in %s; %s\n",
			rank, shard, res.Dir, humanize.IBytes(uint64(res.CopiedBytes)), res.CopyTime.Round(time.Millisecond), verified)
	}
	return res, nil
}
