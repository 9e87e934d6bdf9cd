package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/chunk/stage"
	"github.com/brandrt/brandrt/launch"
)

func stageCommand() *cli.Command {
	return &cli.Command{
		Name:  "stage",
		Usage: "copy a rank's shard to node-local disk, verified, or reuse a verified copy",
		Description: "Copies the manifest of the dataset in --chunks (shared storage) and one rank's\n" +
			"directory into a directory of --to named after the dataset and the rank,\n" +
			"which it prints on its last line: serve --chunks reads it for that rank.\n" +
			"The copy is made under a temporary name, synced, read back and checked (the\n" +
			"index against the manifest, every chunk file's size, header and file\n" +
			"checksums), and only then renamed into place. A copy that does not fit in\n" +
			"the free space of --to is refused before anything is written.\n\n" +
			"A later stage of the same dataset reads only the manifest from --chunks: if\n" +
			"the copy was made from the same manifest, it checks the copy again (every\n" +
			"checksum, from local disk) and reuses it. A copy that is damaged, or whose\n" +
			"source was packed again, is copied again, and stage says why.\n\n" +
			"SIGINT or SIGTERM stops it; it then removes what it copied. Under mpirun or\n" +
			"srun each process stages the shard of its rank number: serve reads the copies\n" +
			"when it runs as many ranks as the dataset has shards. A job of fewer ranks,\n" +
			"each serving several shards, stages with serve --stage, which copies each\n" +
			"rank's shards.\n\n" +
			"Example (job prolog): brandrt stage --chunks /shared/chunks --to /local/scratch",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "chunks", Required: true, Usage: "the packed dataset on shared storage"},
			&cli.StringFlag{Name: "to", Required: true, Usage: "node-local directory to hold the copy (created if missing)"},
			&cli.IntFlag{Name: "rank", Usage: "the shard to copy", DefaultText: "the launcher's rank, or 0"},
			&cli.IntFlag{Name: "workers", Value: stage.DefaultConfig().Workers, Usage: "files copied, or chunk files checked, at once"},
		},
		Action: runStage,
	}
}

func runStage(c *cli.Context) error {
	if err := noArgs(c, "(use --chunks and --to)"); err != nil {
		return err
	}
	cfg := stage.DefaultConfig()
	cfg.Source, cfg.Local, cfg.Workers = c.String("chunks"), c.String("to"), c.Int("workers")
	if c.IsSet("rank") {
		cfg.Rank = c.Int("rank")
	} else {
		env, err := launch.FromEnv()
		if err != nil {
			return err
		}
		cfg.Rank = env.Rank
	}
	cfg.Progress = stageProgress(c.App.ErrWriter)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.Stop = ctx.Done()
	res, err := stage.Stage(cfg)
	if errors.Is(err, stage.ErrInterrupted) {
		return fmt.Errorf("stage: interrupted; removed what it copied to %s", cfg.Local)
	}
	if err != nil {
		return err
	}
	printStaged(c.App.Writer, cfg, res)
	return nil
}

// stageProgress draws a bar per step of the stage on w.
func stageProgress(w io.Writer) func(stage.Step, int64, int64) {
	var bar *progress
	var last stage.Step
	return func(step stage.Step, done, total int64) {
		if step == stage.Wait {
			fmt.Fprintln(w, "stage: waiting for another stage of the same dataset and rank on this node")
			return
		}
		if bar == nil || step != last {
			bar, last = newProgress(w, "stage: "+string(step)), step
		}
		bar.update(done, total, ibytes, "", "")
	}
}

func printStaged(w io.Writer, cfg stage.Config, res stage.Result) {
	verified := fmt.Sprintf("verified %s in %s (%s/s)", ibytes(res.VerifiedBytes), seconds(res.VerifyTime.Seconds()), rate(res.VerifiedBytes, res.VerifyTime))
	if res.Reused {
		fmt.Fprintf(w, "reused the copy of rank %d: read %s (%s alone) from %s; %s\n",
			cfg.Rank, ibytes(res.SourceBytes), chunk.ManifestName, cfg.Source, verified)
	} else {
		if res.Replaced != "" {
			fmt.Fprintf(w, "the copy was not reused: %s\n", res.Replaced)
		}
		fmt.Fprintf(w, "staged rank %d of %s: copied %s in %s (%s/s), read %s from it; %s\n",
			cfg.Rank, cfg.Source, ibytes(res.CopiedBytes), seconds(res.CopyTime.Seconds()), rate(res.CopiedBytes, res.CopyTime),
			ibytes(res.SourceBytes), verified)
	}
	fmt.Fprintf(w, "serve reads every rank's copy, each staged on its node into %s, with --chunks '%s'\n", cfg.Local, stage.Pattern(cfg.Local, cfg.Source))
	fmt.Fprintln(w, res.Dir)
}

// rate is n bytes over d, in binary units.
func rate(n int64, d time.Duration) string {
	return ibytes(int64(float64(n) / max(d.Seconds(), 1e-9)))
}
