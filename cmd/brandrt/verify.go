package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/launch"
)

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "check a packed dataset: structure and every checksum",
		Description: "Reads the manifest, each rank's index and every chunk file whole, and checks\n" +
			"every file's CRC32C. Damage is reported with the rank, the chunk file, the\n" +
			"slot and the file's original path, a file that could not be read (missing,\n" +
			"no permission, EIO) as unreachable with the error; the exit status is then 1.\n\n" +
			"With {rank} in --chunks (a node-local dataset), run it under mpirun: each\n" +
			"process checks the shard in its own directory.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "chunks", Required: true, Usage: "dataset directory ({rank} is replaced by the process's rank)"},
			intFlag("workers", int64(defaultWorkers()), 1, maxWorkers, whyWorkers, "chunks checked at once"),
			&cli.BoolFlag{Name: "local", Usage: "accept shards whose directory is missing (node-local datasets)"},
		},
		Action: runVerify,
	}
}

// chunkDir substitutes the launcher's rank into dir; local reports whether
// dir was per process.
func chunkDir(dir string) (string, bool, error) {
	if !strings.Contains(dir, chunk.RankPlaceholder) {
		return dir, false, nil
	}
	env, err := launch.FromEnv()
	if err != nil {
		return "", false, err
	}
	return chunk.ForRank(dir, env.Rank), true, nil
}

func runVerify(c *cli.Context) error {
	if err := noArgs(c, "(use --chunks)"); err != nil {
		return err
	}
	dir, local, err := chunkDir(c.String("chunks"))
	if err != nil {
		return err
	}
	bar := newProgress(c.App.ErrWriter, "verify:")
	cfg := chunk.VerifyConfig{FS: chunk.OS, Dir: dir, Workers: c.Int("workers"), Local: local || c.Bool("local"),
		Progress: func(done, total int64) { bar.update(done, total, comma, "chunks", "") }}
	m, rep, err := chunk.Verify(cfg)
	if err != nil {
		return err
	}
	w := c.App.Writer
	unreachable := 0
	for _, p := range rep.Problems {
		what := "damaged:"
		if chunk.Unreachable(p) {
			what, unreachable = "unreachable:", unreachable+1
		}
		fmt.Fprintln(w, what, p)
	}
	if len(rep.Skipped) > 0 {
		fmt.Fprintf(w, "not here (node-local): shards %v\n", rep.Skipped)
	}
	fmt.Fprintf(w, "checked %s files (%s) in %s chunks of %d shards of %s (%d shards, %s)\n",
		comma(rep.Files), ibytes(rep.Bytes), comma(int64(rep.Chunks)), rep.Ranks, dir, m.Ranks, kWords(m))
	if n := len(rep.Problems); n > 0 {
		return fmt.Errorf("verify: %d problem(s) in %s: %d damaged, %d unreachable (storage that could not be read: see each)", n, dir, n-unreachable, unreachable)
	}
	fmt.Fprintln(w, "ok: every checksum matches")
	return nil
}
