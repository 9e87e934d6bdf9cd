package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

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
	files := count(d.Files)
	size := byteSize(d.MeanSize)
	return &cli.Command{
		Name:  "bench",
		Usage: "measure brandrt against the machine's own baselines, in one run",
		Subcommands: []*cli.Command{{
			Name:  "storage",
			Usage: "pack and whole-chunk reads against fio, cold page cache",
			Description: "Generates an ImageNet-like dataset in --dir (kept for later runs), then,\n" +
				"dropping the page cache before each step:\n" +
				"  1. fio sequential write (O_DIRECT, 1 MiB): the disk's write rate;\n" +
				"  2. brandrt pack of the dataset (scan included): bytes / seconds;\n" +
				"  3. three alternating trials of: brandrt reading every chunk whole, one at a\n" +
				"     time, in random order (O_DIRECT, checksums verified), and fio reading its\n" +
				"     file sequentially in blocks of the mean chunk (O_DIRECT, queue depth 1).\n" +
				"Prints each ratio and the commands. Needs root (drop_caches) and fio.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "dir", Required: true, Usage: "scratch directory on the disk to measure"},
				&cli.GenericFlag{Name: "files", Value: &files, Usage: "files in the generated dataset"},
				&cli.GenericFlag{Name: "file-size", Value: &size, Usage: "their mean size (lognormal, σ 0.6)"},
				&cli.IntFlag{Name: "chunk-files", Value: d.K, Usage: "K"},
				&cli.IntFlag{Name: "ranks", Value: d.Ranks, Usage: "shards"},
				&cli.IntFlag{Name: "workers", Value: defaultWorkers(), Usage: "pack workers"},
			},
			Action: func(c *cli.Context) error {
				if err := noArgs(c, ""); err != nil {
					return err
				}
				cfg := chunkbench.DefaultConfig()
				cfg.Dir, cfg.Files, cfg.MeanSize = c.String("dir"), int(files), int64(size)
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
				ours, theirs, wall := chunkbench.Median(r.ChunkReads), chunkbench.Median(r.FioRead), chunkbench.Median(r.FioWall)
				fmt.Fprintf(w, "chunk reads    %s = %.0f%% of fio sequential read at %s blocks, %s (%.0f%% of its wall-clock rate, %s)\n",
					mb(ours), 100*ours/theirs, ibytes(r.FioBlock), mb(theirs), 100*ours/wall, mb(wall))
				fmt.Fprintf(w, "               medians of %d alternating trials: brandrt %s; fio %s as reported, %s by wall clock\n",
					chunkbench.Trials, rates(r.ChunkReads[:]), rates(r.FioRead[:]), rates(r.FioWall[:]))
				return nil
			},
		}, benchServeCommand()},
	}
}
