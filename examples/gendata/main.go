// Command gendata writes a small labelled dataset in the ImageFolder
// layout (one directory per class, files of pseudo-random bytes with
// lognormal sizes) for demos and benchmarks of brandrt pack.
//
//	go run ./examples/gendata --out /tmp/data --files 3000 --classes 10 --mean-size 110KB
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/dustin/go-humanize"

	"github.com/brandrt/brandrt/chunk/synth"
)

func main() {
	out := flag.String("out", "", "output directory (created)")
	files := flag.Int("files", 3000, "number of files")
	classes := flag.Int("classes", 10, "number of class directories")
	mean := flag.String("mean-size", "110KB", "mean file size")
	seed := flag.Uint64("seed", 1, "seed of sizes and contents")
	flag.Parse()
	size, err := humanize.ParseBytes(*mean)
	if err != nil || *out == "" || *files < 1 || *classes < 1 || *classes > *files {
		fmt.Fprintln(os.Stderr, "gendata: need --out, --files ≥ 1, 1 ≤ --classes ≤ --files and a --mean-size like 110KB")
		os.Exit(2)
	}
	gen, err := synth.Generate(*out, synth.Config{Classes: *classes, Files: *files, MeanSize: int64(size),
		Sigma: 0.6, MaxSize: 4 << 20, Seed: *seed})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gendata:", err)
		os.Exit(1)
	}
	var total int64
	for _, f := range gen {
		total += f.Size
	}
	fmt.Printf("wrote %s files (%s) in %d classes to %s\n", humanize.Comma(int64(len(gen))), humanize.IBytes(uint64(total)), *classes, *out)
}
