package chunktest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/brandrt/brandrt/chunk"
)

// GenFile is one file of a generated dataset.
type GenFile struct {
	Rel   string // path relative to the root, slash-separated
	Label int32
	Size  int64
}

// GenConfig describes a generated ImageFolder dataset: Classes
// directories (class-000, …) holding Files files in all, with sizes drawn
// from a lognormal distribution of mean MeanSize and shape Sigma (clamped
// to [0, MaxSize]; Zero of them empty) and pseudo-random bytes, all from
// Seed.
type GenConfig struct {
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
func Generate(root string, cfg GenConfig) ([]GenFile, error) {
	rng := rand.New(rand.NewPCG(cfg.Seed, 17))
	mu := math.Log(float64(cfg.MeanSize)) - cfg.Sigma*cfg.Sigma/2
	files := make([]GenFile, cfg.Files)
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
		f := GenFile{Rel: fmt.Sprintf("%s/img-%07d.bin", className(c), i), Label: int32(c), Size: size}
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

// FlipByte damages a file on disk: it inverts the byte at off.
func FlipByte(name string, off int64) error {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	b := make([]byte, 1)
	if _, err = f.ReadAt(b, off); err == nil {
		b[0] ^= 0xff
		_, err = f.WriteAt(b, off)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
