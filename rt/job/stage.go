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

// stageShard copies the rank's shard of the dataset in chunks (shared
// storage) to the node-local directory local, or reuses a verified copy
// there (chunk/stage), and returns the copy's directory, which the rank
// then reads. It says what it did on log, and every stageEvery how far a
// copy has come. Closing stop (a signal) stops it; it then removes what
// it copied.
func stageShard(chunks string, rank int, local string, log io.Writer, stop <-chan struct{}) (string, error) {
	cfg := stage.DefaultConfig()
	cfg.Source, cfg.Rank, cfg.Local = chunk.ForRank(chunks, rank), rank, local
	last := time.Now() // a first line after stageEvery: a short stage says nothing until it is done
	cfg.Progress = func(step stage.Step, done, total int64) {
		if step == stage.Wait {
			fmt.Fprintf(log, "brandrt: rank %d: waiting for another stage of the same shard on this node\n", rank)
			return
		}
		if time.Since(last) >= stageEvery && done < total {
			last = time.Now()
			fmt.Fprintf(log, "brandrt: rank %d: staging: %s %s of %s\n", rank, step, humanize.IBytes(uint64(done)), humanize.IBytes(uint64(total)))
		}
	}
	cfg.Stop = stop
	res, err := stage.Stage(cfg)
	if errors.Is(err, stage.ErrInterrupted) {
		return "", fmt.Errorf("interrupted while staging its shard; removed what it copied to %s", local)
	}
	if err != nil {
		return "", err
	}
	verified := fmt.Sprintf("verified %s in %s", humanize.IBytes(uint64(res.VerifiedBytes)), res.VerifyTime.Round(time.Millisecond))
	switch {
	case res.Reused:
		fmt.Fprintf(log, "brandrt: rank %d: reusing its staged copy %s (read %s from %s: the manifest alone); %s\n",
			rank, res.Dir, humanize.IBytes(uint64(res.SourceBytes)), cfg.Source, verified)
	default:
		if res.Replaced != "" {
			fmt.Fprintf(log, "brandrt: rank %d: its staged copy was not reused: %s\n", rank, res.Replaced)
		}
		fmt.Fprintf(log, "brandrt: rank %d: staged its shard to %s: copied %s in %s; %s\n",
			rank, res.Dir, humanize.IBytes(uint64(res.CopiedBytes)), res.CopyTime.Round(time.Millisecond), verified)
	}
	return res.Dir, nil
}
