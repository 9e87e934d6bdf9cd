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
		Usage: "copy a rank's shards to node-local disk, verified, or reuse a verified copy",
		Description: "Copies the manifest of the dataset in --chunks (shared storage) and the\n" +
			"shards one rank of a job of --ranks ranks serves (each rank a run of shards,\n" +
			"balanced by bytes, as serve splits them) into directories of --to named\n" +
			"after the dataset and the shard. Each copy is made under a temporary name,\n" +
			"synced, read back and checked (the index against the manifest, every chunk\n" +
			"file's size, header and file checksums), and only then renamed into place.\n" +
			"Before it writes anything, stage adds up what all the shards it copies need,\n" +
			"and refuses if the free space of --to is less, saying how much they need\n" +
			"and how much is free; then it sets that space aside, so that other ranks of\n" +
			"the node staging into --to at the same time find only what is left (the one\n" +
			"that does not fit is refused up front). A stage that fails or is stopped\n" +
			"removes everything it wrote, the shards it had finished too, and its locks.\n\n" +
			"A later stage of the same dataset reads only the manifest from --chunks: if\n" +
			"the copy was made from the same manifest, it checks the copy again (every\n" +
			"checksum, from local disk) and reuses it. A copy that is damaged, or whose\n" +
			"source was packed again, is copied again, and stage says why. serve --stage\n" +
			"with the same --to reuses the copies the same way, so a job prolog can stage\n" +
			"ahead of serve; with one shard per rank, serve --chunks may also read the\n" +
			"copies directly (the pattern stage prints).\n\n" +
			"SIGINT or SIGTERM stops it; it then removes what it copied. Under mpirun or\n" +
			"srun each process stages the shards of its rank, in a job of as many ranks\n" +
			"as the launcher started; by hand, --rank and --ranks say which.\n\n" +
			"Example (job prolog): srun --ntasks-per-node=1 brandrt stage --chunks /shared/chunks --to /local/scratch",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "chunks", Required: true, Usage: "the packed dataset on shared storage"},
			&cli.StringFlag{Name: "to", Required: true, Usage: "node-local directory to hold the copies (created if missing)"},
			withDefault(intFlag("rank", 0, 0, maxRanks-1, whyRanks, "the rank whose shards to copy"), "the launcher's rank, or 0"),
			withDefault(intFlag("ranks", 0, 1, maxRanks, whyRanks, "the ranks of the job that will serve the copies"), "the launcher's number of ranks, or one per shard"),
			intFlag("workers", int64(stage.DefaultConfig().Workers), 1, maxWorkers, whyWorkers, "files copied, or chunk files checked, at once"),
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
	rank, ranks, m, err := stageRank(c, cfg.Source)
	if err != nil {
		return err
	}
	homes, err := chunk.AssignDir(cfg.Source, m, ranks)
	if err != nil {
		return err
	}
	cfg.Progress = stageProgress(c.App.ErrWriter)
	cfg.Replacing = func(shard int, why string) {
		fmt.Fprintf(c.App.Writer, "the copy of shard %d was not reused: %s; copying it again from %s\n", shard, why, cfg.Source)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.Stop = ctx.Done()
	lo, hi := homes[rank], homes[rank+1]
	cfg.Shards = chunk.Shards(homes, rank)
	res, err := stage.Stage(cfg)
	if errors.Is(err, stage.ErrInterrupted) {
		return fmt.Errorf("stage: interrupted; removed what it copied to %s", cfg.Local)
	}
	if err != nil {
		return err
	}
	for _, r := range res {
		printStaged(c.App.Writer, cfg.Source, r)
	}
	if hi-lo == 1 && ranks == len(m.Shards) {
		fmt.Fprintf(c.App.Writer, "serve reads every rank's copy, each staged on its node into %s, with --chunks '%s'\n", cfg.Local, stage.Pattern(cfg.Local, cfg.Source))
		fmt.Fprintln(c.App.Writer, res[0].Dir)
		return nil
	}
	fmt.Fprintf(c.App.Writer, "rank %d of %d serves shards %d–%d of %d; serve --chunks %s --stage %s on %d ranks reuses these copies\n",
		rank, ranks, lo, hi-1, len(m.Shards), cfg.Source, cfg.Local, ranks)
	fmt.Fprintln(c.App.Writer, cfg.Local)
	return nil
}

// stageRank returns the rank stage copies for, of how many ranks (from
// the launcher, or --rank and --ranks; one per shard by hand), and the
// manifest of the dataset at source.
func stageRank(c *cli.Context, source string) (rank, ranks int, m *chunk.Manifest, err error) {
	env, err := launch.FromEnv()
	if err != nil {
		return 0, 0, nil, err
	}
	rank, ranks = env.Rank, env.Size
	if env.Launcher == "" {
		ranks = 0 // by hand: one shard per rank, unless --ranks
	}
	if c.IsSet("rank") {
		rank = c.Int("rank")
	}
	if c.IsSet("ranks") {
		ranks = c.Int("ranks")
	}
	if m, err = chunk.ReadManifest(chunk.OS, chunk.ForRank(source, rank)); err != nil {
		return 0, 0, nil, err
	}
	if ranks <= 0 { // not under a launcher: one shard per rank, as packed
		ranks = len(m.Shards)
	}
	if rank < 0 || rank >= ranks {
		return 0, 0, nil, fmt.Errorf("--rank %d of a job of %d ranks (--ranks)", rank, ranks)
	}
	return rank, ranks, m, nil
}

// stageProgress draws a bar per shard and step of the stage on w.
func stageProgress(w io.Writer) func(int, stage.Step, int64, int64) {
	var bar *progress
	var last stage.Step
	lastShard := -1
	return func(shard int, step stage.Step, done, total int64) {
		if step == stage.Wait {
			fmt.Fprintf(w, "stage: waiting for another stage of shard %d of the same dataset on this node\n", shard)
			return
		}
		if bar == nil || step != last || shard != lastShard {
			bar, last, lastShard = newProgress(w, fmt.Sprintf("stage: shard %d: %s", shard, step)), step, shard
		}
		bar.update(done, total, ibytes, "", "")
	}
}

// printStaged says what the stage did with one shard of source.
func printStaged(w io.Writer, source string, res stage.Result) {
	verified := fmt.Sprintf("verified %s in %s (%s/s)", ibytes(res.VerifiedBytes), seconds(res.VerifyTime.Seconds()), rate(res.VerifiedBytes, res.VerifyTime))
	switch {
	case res.Reused && res.SourceBytes > 0:
		fmt.Fprintf(w, "reused the copy of shard %d: read %s (%s alone) from %s; %s\n",
			res.Shard, ibytes(res.SourceBytes), chunk.ManifestName, source, verified)
		return
	case res.Reused:
		fmt.Fprintf(w, "reused the copy of shard %d: read nothing more from %s; %s\n", res.Shard, source, verified)
		return
	}
	fmt.Fprintf(w, "staged shard %d of %s: copied %s in %s (%s/s), read %s from it; %s\n",
		res.Shard, source, ibytes(res.CopiedBytes), seconds(res.CopyTime.Seconds()), rate(res.CopiedBytes, res.CopyTime),
		ibytes(res.SourceBytes), verified)
}

// rate is n bytes over d, in binary units.
func rate(n int64, d time.Duration) string {
	return ibytes(int64(float64(n) / max(d.Seconds(), 1e-9)))
}
