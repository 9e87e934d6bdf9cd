package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/brandrt/brandrt/chunk"
)

func inspectCommand() *cli.Command {
	return &cli.Command{
		Name:  "inspect",
		Usage: "summarise a packed dataset, list its files, or extract one file from it",
		Description: "Without --file: files, bytes, K, chunks per rank, the file-size\n" +
			"distribution and the classes. With --file ID|PATH --out F: writes that file\n" +
			"(by id, or by its path in the input) byte-exactly to F (- for stdout),\n" +
			"after checking its checksum. With --list: one line per file, in file id\n" +
			"order, tab-separated: id, label, size in bytes, rank, path in the input\n" +
			"(what a custom order for serve --traces clients is made of). A path that\n" +
			"holds a control character (newline, tab, escape), a backslash, a character\n" +
			"that does not print or bytes that are not UTF-8, or that starts with \", is\n" +
			"written in double quotes with Go's escapes (strconv.Quote: \"a\\nb\", which\n" +
			"strconv.Unquote reads back); any other path as it is.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "chunks", Required: true, Usage: "dataset directory"},
			&cli.StringFlag{Name: "file", Usage: "file id or original path to extract"},
			&cli.StringFlag{Name: "out", Usage: "where to write the extracted file (" + outputNote + ")"},
			&cli.BoolFlag{Name: "force", Usage: forceNote("--out")},
			&cli.BoolFlag{Name: "list", Usage: "list every file, a line each: id, label, size, rank, path (tab-separated; a path with a control character or a backslash quoted, see above)"},
		},
		Action: runInspect,
	}
}

func runInspect(c *cli.Context) error {
	if err := noArgs(c, ""); err != nil {
		return err
	}
	dir, _, err := chunkDir(c.String("chunks"))
	if err != nil {
		return err
	}
	if c.Bool("list") {
		if c.String("file") != "" || c.String("out") != "" {
			return errors.New("--list goes alone, without --file or --out")
		}
		w := bufio.NewWriter(c.App.Writer)
		fmt.Fprintf(w, "id\tlabel\tsize\trank\tpath\n")
		err := chunk.Each(chunk.OS, dir, func(e chunk.Entry) error {
			_, err := fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%s\n", e.ID, e.Label, e.Size, e.Rank, listPath(e.Path))
			return err
		})
		if err != nil {
			return err
		}
		return w.Flush()
	}
	if c.String("file") == "" {
		if c.String("out") != "" {
			return errors.New("--out goes with --file")
		}
		s, err := chunk.Summarize(chunk.OS, dir)
		if err != nil {
			return err
		}
		printSummary(c.App.Writer, dir, s)
		return nil
	}
	if c.String("out") == "" {
		return errors.New("--file needs --out FILE (or --out - for stdout)")
	}
	e, err := chunk.Find(chunk.OS, dir, c.String("file"))
	if err != nil {
		return err
	}
	data, err := chunk.Extract(chunk.OS, dir, e)
	if err != nil {
		return err
	}
	if err := writeOut(c, "--out", c.String("out"), data); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "file %d (%s, label %d): %s from shard %d chunk %d slot %d, checksum ok\n",
		e.ID, e.Path, e.Label, ibytes(int64(len(data))), e.Rank, e.Chunk, e.Slot)
	return nil
}

// listPath writes path for --list, on one line: quoted as
// strconv.Quote quotes it when it holds a control character (a newline,
// a tab, an escape sequence), a backslash, a character that does not
// print or bytes that are not UTF-8, or starts with a double quote (which
// marks a quoted path); as it is otherwise.
func listPath(path string) string {
	plain := utf8.ValidString(path) && !strings.HasPrefix(path, `"`) &&
		!strings.ContainsFunc(path, func(r rune) bool { return r == '\\' || !strconv.IsPrint(r) })
	if plain {
		return path
	}
	return strconv.Quote(path)
}

func printSummary(w io.Writer, dir string, s *chunk.Summary) {
	m := s.Manifest
	fmt.Fprintf(w, "dataset  %s (created %s, seed %d)\n", dir, m.Created.Format("2006-01-02 15:04 MST"), m.Seed)
	fmt.Fprintf(w, "files    %s, %s, %s, %d shards\n", comma(m.Files), ibytes(m.Bytes), kWords(m), m.Ranks)
	for _, sh := range m.Shards {
		here := ""
		if !slices.Contains(s.Present, sh.Rank) {
			here = " (not in this directory)"
		}
		fmt.Fprintf(w, "shard %-3d %s files, %s, %s chunks, ids %s–%s%s\n", sh.Rank, comma(sh.Files), ibytes(sh.Bytes),
			comma(int64(sh.Chunks)), comma(sh.FirstFile), comma(sh.FirstFile+sh.Files-1), here)
	}
	z := s.Sizes
	fmt.Fprintf(w, "sizes    min %s, median %s, p90 %s, p99 %s, max %s, mean %s\n",
		ibytes(z.Min), ibytes(z.P50), ibytes(z.P90), ibytes(z.P99), ibytes(z.Max), ibytes(int64(z.Mean)))
	fmt.Fprintf(w, "classes  %s\n", classLine(m.Classes, s.ClassFiles, s.Unlabelled))
	p := m.Params
	src := p.Input
	if p.Manifest != "" {
		src = p.Manifest + " (manifest)"
	}
	fmt.Fprintf(w, "input    %s, layout %s, %d workers\n", src, p.Layout, p.Workers)
}

func classLine(names []string, counts []int64, unlabelled int64) string {
	if len(names) == 0 {
		if unlabelled > 0 {
			return "none (no labels)"
		}
		return "none named (labels from a manifest)"
	}
	show := func(i int) string { return fmt.Sprintf("%s (%s)", names[i], comma(counts[i])) }
	var parts []string
	if len(names) <= 6 {
		for i := range names {
			parts = append(parts, show(i))
		}
	} else {
		parts = []string{show(0), show(1), show(2), show(3), fmt.Sprintf("… %d more …", len(names)-5), show(len(names) - 1)}
	}
	return fmt.Sprintf("%d: %s", len(names), strings.Join(parts, ", "))
}
