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
		Usage:     "pack a dataset into chunks read whole, in shards that the ranks of a job split",
		ArgsUsage: " ",
		Description: "Reads a directory tree (ImageFolder: one subdirectory per class, labels in\n" +
			"sorted order; or plain: every file, no labels) or a manifest (one file per\n" +
			"line: path, or path<TAB>label, or {\"path\": …, \"label\": …}). Shuffles the\n" +
			"files with --seed, cuts them into chunks and splits the chunks into\n" +
			"--shards runs. A chunk is read whole, in one request: it holds files in\n" +
			"their shuffled order until the next would take it past --chunk-size or it\n" +
			"holds --chunk-files (by default 16 MiB or 64 files, whichever comes first;\n" +
			"a file larger than --chunk-size is a chunk of its own). --chunk-files\n" +
			"alone gives every chunk K files (the last fewer), whatever their bytes;\n" +
			"--chunk-size alone, chunks of up to that many bytes and 65,536 files.\n" +
			"Fewer files per chunk give a more random order.\n\n" +
			"Writes DIR/rank-NNNNN/ (shard NNNNN: its chunk files and index) and\n" +
			"DIR/manifest.json, which is written last. A job of M ranks serves any\n" +
			"number of shards S ≥ M: each rank a run of consecutive shards, balanced\n" +
			"by bytes (serve prints which). A pack that fails, or\n" +
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
			intFlag("chunk-files", 64, 1, chunk.MaxK, whyK, fmt.Sprintf("K, files per chunk (with --chunk-size: at most): 1 to %d, and at most the dataset's files (a dataset smaller than the default gets K = its files)", chunk.MaxK)),
			withDefault(&cli.GenericFlag{Name: "chunk-size", Value: chunkSize(), Usage: "the most bytes of a chunk (e.g. 16MiB, 64MB), unless it holds one larger file; with --chunk-files alone, not applied"}, "16MiB"),
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
func defaultShards(out string, procs, chunks int) int {
	if strings.Contains(out, chunk.RankPlaceholder) {
		return procs
	}
	return max(procs, min(DefaultShards, chunks))
}

// chunkWords says how m's chunks were cut: "of 64" files, or "of up to
// 16 MiB (at most 64 files)".
func chunkWords(m *chunk.Manifest) string {
	if m.Params.ChunkBytes == 0 {
		return fmt.Sprintf("of %d", m.K)
	}
	return fmt.Sprintf("of up to %s (at most %d files)", ibytes(m.Params.ChunkBytes), m.K)
}

// kWords is K for a summary: "K=64", or "chunks of up to 16 MiB, K≤64".
func kWords(m *chunk.Manifest) string {
	if m.Params.ChunkBytes == 0 {
		return fmt.Sprintf("K=%d", m.K)
	}
	return fmt.Sprintf("chunks of up to %s, K≤%d", ibytes(m.Params.ChunkBytes), m.K)
}

// chunkSize is pack's --chunk-size: chunk.DefaultChunkBytes unless set.
func chunkSize() *byteSize {
	return &byteSize{intValue{n: chunk.DefaultChunkBytes, lo: 1, hi: chunk.MaxChunkBytes, why: "a chunk is read whole into memory"}}
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
	params := chunk.PackParams{Input: input, Manifest: list, Layout: string(listing.Layout), Workers: c.Int("workers"), Symlinks: "files followed, directories refused"}
	k := c.Int("chunk-files")
	if c.IsSet("chunk-size") || !c.IsSet("chunk-files") { // --chunk-files alone: K files each
		params.ChunkBytes = c.Generic("chunk-size").(*byteSize).n
	}
	if c.IsSet("chunk-size") && !c.IsSet("chunk-files") { // --chunk-size alone: bytes decide
		k = chunk.MaxK
	}
	if !c.IsSet("chunk-files") {
		k = min(k, len(listing.Inputs)) // the default fits a small dataset
	}
	ranks := c.Int("shards")
	plan, err := chunk.NewPlan(listing.Inputs, listing.Classes, k, max(ranks, 1), c.Uint64("seed"), params)
	if err != nil {
		return err
	}
	if ranks == 0 {
		if err := plan.SetShards(defaultShards(c.String("out"), g.Size(), plan.Chunks())); err != nil {
			return err
		}
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
		fmt.Fprintf(c.App.Writer, "packed %s files (%s) into %s chunks %s in %d shards in %s (%s/s) → %s\n",
			comma(m.Files), ibytes(m.Bytes), comma(int64(plan.Chunks())), chunkWords(m), m.Ranks, took.Round(10*time.Millisecond),
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
