package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/chunk/chunkbench"
)

func rates(xs []float64) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprintf("%.0f", x/1e6))
	}
	return strings.Join(s, "/") + " MB/s"
}

func benchCommand() *cli.Command {
	d := chunkbench.DefaultConfig()
	files := fileCount(d.Files)
	size := fileSize(d.MeanSize)
	return &cli.Command{
		Name:  "bench",
		Usage: "measure brandrt against the machine's own baselines, in one run",
		Description: "Against the loaders people use instead (a plain DataLoader, CoorDL's cache,\n" +
			"WebDataset, Mosaic Streaming, LitData), in the same memory, on the local disk\n" +
			"and an emulated NAS: examples/bench/loaders.py in the source tree (make\n" +
			"bench-loaders; BENCHMARKS.md); those loaders are Python libraries.",
		Subcommands: []*cli.Command{{
			Name:  "storage",
			Usage: "pack and whole-chunk reads against fio, cold page cache",
			Description: "Generates an ImageNet-like dataset in --dir (kept for later runs), then,\n" +
				"dropping the page cache before each step:\n" +
				"  1. fio sequential write (O_DIRECT, 1 MiB): the disk's write rate;\n" +
				"  2. brandrt pack of the dataset (scan included): bytes / seconds;\n" +
				"  3. the inputs alone read as pack reads them, writing nothing: the most\n" +
				"     pack's reading side gets from this disk;\n" +
				"  4. three alternating trials of: brandrt reading every chunk whole, one at a\n" +
				"     time (O_DIRECT, checksums verified), in storage order, then fio reading\n" +
				"     its file sequentially in blocks of the mean chunk (O_DIRECT, queue depth\n" +
				"     1); brandrt in random chunk order, then fio reading random blocks.\n" +
				"Prints each ratio and the commands. Needs root (drop_caches) and fio.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "dir", Required: true, Usage: "scratch directory on the disk to measure"},
				&cli.GenericFlag{Name: "files", Value: files, Usage: "files in the generated dataset"},
				&cli.GenericFlag{Name: "file-size", Value: size, Usage: "their mean size (lognormal, σ 0.6)"},
				intFlag("chunk-files", int64(d.K), 1, chunk.MaxK, whyK, "K"),
				intFlag("ranks", int64(d.Ranks), 1, maxFiles, "each shard holds a chunk, each chunk a file", "shards"),
				intFlag("workers", int64(defaultWorkers()), 1, maxWorkers, whyWorkers, "pack workers"),
			},
			Action: func(c *cli.Context) error { return runBenchStorage(c, int(files.n), size.n) },
		}, benchServeCommand()},
	}
}

// runBenchStorage runs brandrt bench storage on a dataset of files files
// of mean size bytes, and prints its ratios.
func runBenchStorage(c *cli.Context, files int, size int64) error {
	if err := noArgs(c, ""); err != nil {
		return err
	}
	cfg := chunkbench.DefaultConfig()
	cfg.Dir, cfg.Files, cfg.MeanSize = c.String("dir"), files, size
	cfg.K, cfg.Ranks, cfg.Workers = c.Int("chunk-files"), c.Int("ranks"), c.Int("workers")
	cfg.Log = func(s string) { fmt.Fprintln(c.App.ErrWriter, s) }
	r, err := chunkbench.Run(cfg)
	if err != nil {
		return err
	}
	w := c.App.Writer
	mb := func(v float64) string { return fmt.Sprintf("%.0f MB/s", v/1e6) }
	fmt.Fprintf(w, "dataset        %s files, %s, %d chunks of K=%d (mean chunk %s)\n",
		comma(int64(cfg.Files)), ibytes(r.DatasetBytes), r.Chunks, cfg.K, ibytes(r.MeanChunk))
	fmt.Fprintf(w, "pack           %s (%.1f s) = %.0f%% of the disk's sequential write, %s\n",
		mb(r.Pack), r.PackSeconds, 100*r.Pack/r.DiskWrite, mb(r.DiskWrite))
	fmt.Fprintf(w, "               = %.0f%% of reading the inputs alone as pack does, writing nothing, %s\n",
		100*r.Pack/r.InputRead, mb(r.InputRead))
	med := chunkbench.Median
	fmt.Fprintf(w, "chunk reads    storage order: %s = %.0f%% of fio sequential read at %s blocks, %s\n",
		mb(med(r.SeqReads)), 100*med(r.SeqReads)/med(r.FioSeq), ibytes(r.FioBlock), mb(med(r.FioSeq)))
	fmt.Fprintf(w, "               random order:  %s = %.0f%% of fio random read at %s blocks, %s\n",
		mb(med(r.RandReads)), 100*med(r.RandReads)/med(r.FioRand), ibytes(r.FioBlock), mb(med(r.FioRand)))
	fmt.Fprintf(w, "               medians of %d alternating trials: brandrt %s and %s; fio %s and %s\n",
		chunkbench.Trials, rates(r.SeqReads[:]), rates(r.RandReads[:]), rates(r.FioSeq[:]), rates(r.FioRand[:]))
	return nil
}
