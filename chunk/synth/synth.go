// Package synth writes synthetic labelled datasets in the ImageFolder
// layout (class directories of files): file sizes drawn from a lognormal
// distribution, bytes pseudo-random, everything from a seed, so that a
// reader can recompute what any file must hold (Content). The demo, the
// benchmarks (`brandrt bench`, examples/gendata) and the tests use it.
package synth

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/brandrt/brandrt/chunk"
)

// File is one file of a generated dataset.
type File struct {
	Rel   string // path relative to the root, slash-separated
	Label int32
	Size  int64
}

// Config describes a generated ImageFolder dataset: Classes
// directories (class-000, …) holding Files files in all, with sizes drawn
// from a lognormal distribution of mean MeanSize and shape Sigma (clamped
// to [0, MaxSize]; Zero of them empty) and pseudo-random bytes, all from
// Seed.
type Config struct {
	Classes  int
	Files    int
	MeanSize int64
	Sigma    float64
	MaxSize  int64
	Zero     int
	Seed     uint64
}

// Generate writes the dataset under root (created if needed) and returns
// its files in sorted path order.
func Generate(root string, cfg Config) ([]File, error) {
	rng := rand.New(rand.NewPCG(cfg.Seed, 17))
	mu := math.Log(float64(cfg.MeanSize)) - cfg.Sigma*cfg.Sigma/2
	files := make([]File, cfg.Files)
	for c := 0; c < cfg.Classes; c++ {
		if err := os.MkdirAll(filepath.Join(root, className(c)), 0o755); err != nil {
			return nil, err
		}
	}
	buf := make([]byte, 0, cfg.MaxSize)
	for i := range files {
		c := i * cfg.Classes / cfg.Files
		size := min(cfg.MaxSize, int64(math.Exp(mu+cfg.Sigma*rng.NormFloat64())))
		if i < cfg.Zero {
			size = 0
		}
		f := File{Rel: fmt.Sprintf("%s/img-%07d.bin", className(c), i), Label: int32(c), Size: size}
		if err := writeFile(filepath.Join(root, f.Rel), Content(buf[:0], cfg.Seed, i, size)); err != nil {
			return nil, err
		}
		files[i] = f
	}
	return files, nil
}

// writeFile writes data to name, never through a symbolic link there.
func writeFile(name string, data []byte) error {
	f, err := chunk.CreateFile(name, os.O_WRONLY|os.O_TRUNC)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}

// Content appends the bytes of generated file i (of a dataset drawn from
// seed) to dst: a test can recompute what any file must hold.
func Content(dst []byte, seed uint64, i int, size int64) []byte {
	var key [32]byte
	for b := 0; b < 8; b++ {
		key[b] = byte(seed >> (8 * b))
		key[8+b] = byte(uint64(i) >> (8 * b))
	}
	c := rand.NewChaCha8(key)
	n := len(dst)
	dst = append(dst, make([]byte, size)...)
	_, _ = c.Read(dst[n:])
	return dst
}

func className(c int) string { return fmt.Sprintf("class-%03d", c) }
