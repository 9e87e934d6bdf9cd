package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/cpuid/v2"
	"github.com/urfave/cli/v2"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/rt/job"
)

func packCommand() *cli.Command {
	return &cli.Command{
		Name:      "pack",
		Usage:     "pack a dataset into chunks of K files, in shards that the ranks of a job split",
		ArgsUsage: " ",
		Description: "Reads a directory tree (ImageFolder: one subdirectory per class, labels in\n" +
			"sorted order; or plain: every file, no labels) or a manifest (one file per\n" +
			"line: path, or path<TAB>label, or {\"path\": …, \"label\": …}). Shuffles the\n" +
			"files with --seed, cuts them into chunks of --chunk-files and splits the\n" +
			"chunks into --shards runs. Writes DIR/rank-NNNNN/ (shard NNNNN: its chunk\n" +
			"files and index) and DIR/manifest.json, which is written last. A job of M\n" +
			"ranks serves any number of shards S ≥ M: each rank a run of consecutive\n" +
			"shards, balanced by bytes (serve prints which). A pack that fails, or\n" +
			"is interrupted (SIGINT, SIGTERM; under mpirun, by a signal to mpirun),\n" +
			"removes everything it wrote, and DIR itself if it created it; a dataset\n" +
			"--force was replacing stays as it was.\n\n" +
			"--out may not lie inside --input (a later pack would take the output for\n" +
			"input), nor hold it, nor hold a file --manifest lists.\n\n" +
			"Hidden files are skipped. Symlinks to files are followed; symlinks to\n" +
			"directories, broken symlinks and special files are errors. Files may not\n" +
			"exceed 1 GiB; empty files are fine. Bad inputs are reported together, up\n" +
			"to ten (then how many more); a file that cannot be read stops the writing\n" +
			"but not the reading, so that every unreadable file is reported at once.\n\n" +
			"Under mpirun -np N, rank 0 lists the input and each process writes its\n" +
			"shards. With {rank} in --out (e.g. /scratch/chunks-{rank}), each process\n" +
			"writes its shard and a copy of the manifest into its own, node-local\n" +
			"directory; --shards must then equal N, and so must the ranks that serve it.\n\n" +
			"Example: brandrt pack --input /data/imagenet/train --out /scratch/chunks --chunk-files 64 --shards 240",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "input", Usage: "input directory (with --manifest: the root of its relative paths)"},
			&cli.StringFlag{Name: "manifest", Usage: "file listing the files to pack, instead of scanning --input"},
			&cli.StringFlag{Name: "out", Required: true, Usage: "output directory; {rank} makes it per process"},
			intFlag("chunk-files", 64, 1, chunk.MaxK, whyK, fmt.Sprintf("K, files per chunk: 1 to %d, and at most the dataset's files (a dataset smaller than the default gets K = its files)", chunk.MaxK)),
			withAliases(intFlag("shards", 0, 0, maxFiles, "each shard holds a chunk, each chunk a file", "shards to write; any job of at most as many ranks serves them, each rank a run of shards balanced by bytes (default, or 0: 240, at most one per chunk and at least one per MPI process; with {rank} in --out, one per process)"), "ranks"),
			seedFlag("seed", 1, "seed of the shuffle"),
			intFlag("workers", int64(defaultWorkers()), 1, maxWorkers, whyWorkers, "chunks written at once by each process"),
			&cli.StringFlag{Name: "layout", Value: string(chunk.LayoutAuto), Usage: "auto, imagefolder or plain"},
			&cli.BoolFlag{Name: "force", Usage: "replace a dataset already in --out (only brandrt's own files)"},
		},
		Action: runPack,
	}
}

// DefaultShards is pack's number of shards unless told: enough that a
// job of any size a user runs (up to that many nodes) splits them evenly
// by bytes, each rank a run of them, and that a job restarted on fewer
// or more nodes serves them without packing again. 240 divides by every
// count up to 6 and by 8, 10, 12, 15, 16, 20, 24, 30, …; a shard costs a
// directory and an index.
const DefaultShards = 240

// defaultShards is the number of shards pack writes without --shards:
// DefaultShards, at most one per chunk, at least one per process; with
// {rank} in out (a node-local directory per process), one per process.
func defaultShards(out string, procs, files, k int) int {
	if strings.Contains(out, chunk.RankPlaceholder) || k < 1 {
		return procs
	}
	return max(procs, min(DefaultShards, (files+k-1)/k))
}

// defaultWorkers: packing waits on storage more than on the CPU, so it
// keeps a few chunks in flight per physical core.
func defaultWorkers() int { return min(maxWorkers, 4*max(1, cpuid.CPU.PhysicalCores)) }

func runPack(c *cli.Context) (err error) {
	if err := noArgs(c, "(use --input)"); err != nil {
		return err
	}
	input, list := c.String("input"), c.String("manifest")
	if input == "" && list == "" {
		return fmt.Errorf("pack needs --input DIR or --manifest FILE")
	}
	g, done, err := job.Group()
	if err != nil {
		return err
	}
	defer job.Finish(c.App.ErrWriter, done, &err)
	start := time.Now()
	listing, err := chunk.Share(g, func() (chunk.Listing, error) {
		return chunk.Scan(chunk.OS, input, list, chunk.Layout(c.String("layout")))
	})
	if err != nil {
		return err
	}
	k := c.Int("chunk-files")
	if !c.IsSet("chunk-files") {
		k = min(k, len(listing.Inputs)) // the default fits a small dataset
	}
	ranks := c.Int("shards")
	if ranks == 0 {
		ranks = defaultShards(c.String("out"), g.Size(), len(listing.Inputs), k)
	}
	params := chunk.PackParams{Input: input, Manifest: list, Layout: string(listing.Layout), Workers: c.Int("workers"), Symlinks: "files followed, directories refused"}
	plan, err := chunk.NewPlan(listing.Inputs, listing.Classes, k, ranks, c.Uint64("seed"), params)
	if err != nil {
		return err
	}
	cfg := chunk.PackConfig{FS: chunk.OS, Out: c.String("out"), Input: input, Force: c.Bool("force"), Workers: c.Int("workers"), Group: g}
	if g.Rank() == 0 {
		bar := newProgress(c.App.ErrWriter, "pack:")
		cfg.Progress = func(files, totalFiles, b, totalBytes int64) {
			bar.update(b, totalBytes, ibytes, "", fmt.Sprintf(", %s of %s files", comma(files), comma(totalFiles)))
		}
	}
	m, err := packUntilSignal(cfg, plan, g.Rank())
	if err != nil {
		return err
	}
	if g.Rank() == 0 {
		took := time.Since(start)
		fmt.Fprintf(c.App.Writer, "packed %s files (%s) into %s chunks of %d in %d shards in %s (%s/s) → %s\n",
			comma(m.Files), ibytes(m.Bytes), comma(int64(plan.Chunks())), m.K, m.Ranks, took.Round(10*time.Millisecond),
			ibytes(int64(float64(m.Bytes)/took.Seconds())), c.String("out"))
	}
	return nil
}

// packUntilSignal packs, stopping on SIGINT or SIGTERM (mpirun forwards
// either as SIGTERM): the pack then removes what it wrote. A signal
// during the scan, before anything is written, ends the process as usual.
func packUntilSignal(cfg chunk.PackConfig, plan *chunk.Plan, rank int) (*chunk.Manifest, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.Stop = ctx.Done()
	m, err := chunk.Pack(cfg, plan)
	if errors.Is(err, chunk.ErrInterrupted) {
		return nil, fmt.Errorf("pack: interrupted; removed what it wrote in %s", chunk.ForRank(cfg.Out, rank))
	}
	return m, err
}
