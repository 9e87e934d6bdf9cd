// Package chunkbench measures the chunk store against the disk it runs
// on, in one run: pack throughput against the disk's sequential write
// rate and against reading its inputs alone, and whole-chunk reads
// against fio reads of the same block size (in storage order against
// fio's sequential read, in random order against fio's random read), all
// with a cold page cache. It is what `brandrt bench storage` prints.
package chunkbench

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/chunk/synth"
)

// Config describes a run.
type Config struct {
	// Dir holds the generated input, the packed dataset and fio's file.
	Dir string
	// Files, MeanSize and Sigma describe the generated dataset.
	Files    int
	MeanSize int64
	Sigma    float64
	// K, Ranks and Workers are passed to pack.
	K, Ranks, Workers int
	// Log receives a line per step, with the command it ran.
	Log func(string)
}

// DefaultConfig is ImageNet-like: 40,000 files of 110 KB on average.
func DefaultConfig() Config {
	return Config{Files: 40000, MeanSize: 110_000, Sigma: 0.6, K: 64, Ranks: 3, Workers: 16}
}

// Trials is how many times the read measurements alternate.
const Trials = 3

// Report holds the figures of a run; rates are in bytes per second.
type Report struct {
	DatasetBytes int64
	Chunks       int
	ChunkBytes   int64
	MeanChunk    int64
	// DiskWrite is fio's sequential write (O_DIRECT, 1 MiB blocks) of
	// FioBytes; Pack is the dataset's bytes over the pack's wall time
	// (scan included), cold.
	DiskWrite   float64
	FioBytes    int64
	Pack        float64
	PackSeconds float64
	// InputRead is reading every input file once, whole, in the pack's
	// order (file id order) with as many readers as pack has workers,
	// O_DIRECT, cold, writing nothing: what pack's reading side alone
	// reaches.
	InputRead float64
	// SeqReads are our whole-chunk reads of every chunk, one at a time,
	// in storage order (rank by rank, chunk by chunk), O_DIRECT,
	// checksums verified, cold; FioSeq is fio reading its file
	// sequentially in blocks of the mean chunk, queue depth 1, O_DIRECT,
	// cold, as fio reports it. RandReads and FioRand are the same in
	// random order: every chunk once in a shuffled order, and fio reading
	// random blocks of that size. The trials alternate.
	SeqReads  [Trials]float64
	FioSeq    [Trials]float64
	RandReads [Trials]float64
	FioRand   [Trials]float64
	FioBlock  int64
}

// Run performs the measurements. It needs root (to drop the page cache)
// and fio.
func Run(cfg Config) (*Report, error) {
	if _, err := exec.LookPath("fio"); err != nil {
		return nil, errors.New("chunkbench: fio is not installed (apt-get install fio)")
	}
	if err := DropCaches(); err != nil {
		return nil, fmt.Errorf("chunkbench: a cold-cache measurement must drop the page cache: %w", err)
	}
	input := filepath.Join(cfg.Dir, "input")
	bytes, err := ensureInput(cfg, input)
	if err != nil {
		return nil, err
	}
	rep := &Report{DatasetBytes: bytes}
	if err := diskWrite(cfg, rep); err != nil {
		return nil, err
	}
	if err := packCold(cfg, input, rep); err != nil {
		return nil, err
	}
	if err := readInputs(cfg, input, rep); err != nil {
		return nil, err
	}
	err = compareReads(cfg, rep)
	_ = os.Remove(filepath.Join(cfg.Dir, "fio.dat"))
	return rep, err
}

// ensureInput generates the dataset unless a previous run left it.
func ensureInput(cfg Config, input string) (int64, error) {
	stamp := filepath.Join(cfg.Dir, "input.json")
	want := fmt.Sprintf(`{"files":%d,"mean":%d,"sigma":%g}`, cfg.Files, cfg.MeanSize, cfg.Sigma)
	if b, err := os.ReadFile(stamp); err == nil && strings.HasPrefix(string(b), want) {
		var bytes int64
		fmt.Sscanf(string(b[len(want):]), " %d", &bytes)
		cfg.Log(fmt.Sprintf("input: reusing %s (%d files)", input, cfg.Files))
		return bytes, nil
	}
	_ = os.RemoveAll(input)
	start := time.Now()
	files, err := synth.Generate(input, synth.Config{Classes: 100, Files: cfg.Files, MeanSize: cfg.MeanSize,
		Sigma: cfg.Sigma, MaxSize: 4 << 20, Seed: 1})
	if err != nil {
		return 0, fmt.Errorf("chunkbench: generate: %w", err)
	}
	var bytes int64
	for _, f := range files {
		bytes += f.Size
	}
	cfg.Log(fmt.Sprintf("input: generated %d files, %d bytes, lognormal mean %d σ %g, in %s", cfg.Files, bytes, cfg.MeanSize, cfg.Sigma, time.Since(start).Round(time.Second)))
	f, err := chunk.CreateFile(stamp, os.O_WRONLY|os.O_TRUNC)
	if err == nil {
		_, err = fmt.Fprintf(f, "%s %d\n", want, bytes)
		err = errors.Join(err, f.Close())
	}
	return bytes, err
}

// DropCaches writes back dirty pages and empties the page cache.
func DropCaches() error {
	if err := exec.Command("sync").Run(); err != nil {
		return err
	}
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
}

func diskWrite(cfg Config, rep *Report) error {
	rep.FioBytes = min(rep.DatasetBytes, 4<<30) / (1 << 20) * (1 << 20)
	if err := DropCaches(); err != nil {
		return err
	}
	args := []string{"--name=seqwrite", "--filename=" + filepath.Join(cfg.Dir, "fio.dat"), "--rw=write", "--bs=1M",
		fmt.Sprintf("--size=%d", rep.FioBytes), "--direct=1", "--ioengine=psync", "--end_fsync=1"}
	bw, err := fio(cfg, args, "write")
	rep.DiskWrite = bw
	return err
}

func packCold(cfg Config, input string, rep *Report) error {
	out := filepath.Join(cfg.Dir, "chunks")
	_ = os.RemoveAll(out)
	if err := DropCaches(); err != nil {
		return err
	}
	start := time.Now()
	inputs, classes, layout, err := chunk.ScanDir(chunk.OS, input, chunk.LayoutAuto)
	if err != nil {
		return err
	}
	plan, err := chunk.NewPlan(inputs, classes, cfg.K, cfg.Ranks, 1, chunk.PackParams{Input: input, Layout: string(layout), Workers: cfg.Workers})
	if err != nil {
		return err
	}
	if _, err := chunk.Pack(chunk.PackConfig{FS: chunk.OS, Out: out, Workers: cfg.Workers}, plan); err != nil {
		return err
	}
	rep.PackSeconds = time.Since(start).Seconds()
	rep.Pack = float64(rep.DatasetBytes) / rep.PackSeconds
	rep.Chunks = plan.Chunks()
	cfg.Log(fmt.Sprintf("pack: brandrt pack --input %s --out %s --chunk-files %d --ranks %d --workers %d (scan included), cold: %.2f s",
		input, out, cfg.K, cfg.Ranks, cfg.Workers, rep.PackSeconds))
	return nil
}

// compareReads alternates, Trials times: our whole-chunk reads of every
// chunk in storage order, fio's sequential read at the mean chunk size,
// ours in random order, and fio's random read at that size.
func compareReads(cfg Config, rep *Report) error {
	out := filepath.Join(cfg.Dir, "chunks")
	var refs []chunkRef
	for r := 0; r < cfg.Ranks; r++ {
		s, err := chunk.OpenShard(chunk.OS, out, r)
		if err != nil {
			return err
		}
		defer s.Close()
		for c := 0; c < s.Index().Chunks(); c++ {
			refs = append(refs, chunkRef{s, c})
		}
	}
	fioFile := "--filename=" + filepath.Join(cfg.Dir, "fio.dat")
	for t := 0; t < Trials; t++ {
		bw, read, err := readChunks(refs)
		if err != nil {
			return err
		}
		rep.SeqReads[t] = bw
		rep.ChunkBytes, rep.MeanChunk = read, read/int64(len(refs))
		rep.FioBlock = (rep.MeanChunk + 4095) / 4096 * 4096
		cfg.Log(fmt.Sprintf("trial %d: brandrt read %d chunks whole (verified), storage order, 1 reader, O_DIRECT, cold: %.0f MB/s", t+1, len(refs), bw/1e6))
		fioArgs := func(name, rw string) []string {
			return []string{"--name=" + name, fioFile, "--rw=" + rw, fmt.Sprintf("--bs=%d", rep.FioBlock),
				fmt.Sprintf("--size=%d", rep.FioBytes), "--direct=1", "--ioengine=psync", "--randseed=" + fmt.Sprint(t+1)}
		}
		if rep.FioSeq[t], err = fioCold(cfg, fioArgs("seqread", "read")); err != nil {
			return err
		}
		shuffled := slices.Clone(refs)
		rand.New(rand.NewPCG(1, uint64(t))).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if rep.RandReads[t], _, err = readChunks(shuffled); err != nil {
			return err
		}
		cfg.Log(fmt.Sprintf("trial %d: brandrt read %d chunks whole (verified), random order, 1 reader, O_DIRECT, cold: %.0f MB/s", t+1, len(refs), rep.RandReads[t]/1e6))
		if rep.FioRand[t], err = fioCold(cfg, fioArgs("randread", "randread")); err != nil {
			return err
		}
	}
	return nil
}

type chunkRef struct {
	s *chunk.Shard
	c int
}

// readChunks drops the page cache, then reads refs whole one after the
// other and returns bytes per second and the bytes read.
func readChunks(refs []chunkRef) (float64, int64, error) {
	if err := DropCaches(); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	var read int64
	for _, x := range refs {
		ch, err := x.s.ReadChunk(x.c)
		if err != nil {
			return 0, 0, err
		}
		read += ch.BytesRead
		ch.Release()
	}
	return float64(read) / time.Since(start).Seconds(), read, nil
}

// fioCold drops the page cache and runs a fio read.
func fioCold(cfg Config, args []string) (float64, error) {
	if err := DropCaches(); err != nil {
		return 0, err
	}
	return fio(cfg, args, "read")
}

// readInputs reads every input file once, in the pack's order, with
// cfg.Workers readers, as pack does but writing nothing.
func readInputs(cfg Config, input string, rep *Report) error {
	if err := DropCaches(); err != nil {
		return err
	}
	start := time.Now()
	inputs, classes, _, err := chunk.ScanDir(chunk.OS, input, chunk.LayoutAuto)
	if err != nil {
		return err
	}
	plan, err := chunk.NewPlan(inputs, classes, cfg.K, cfg.Ranks, 1, chunk.PackParams{})
	if err != nil {
		return err
	}
	read, err := chunk.ReadInputs(chunk.OS, plan.Inputs, cfg.Workers)
	if err != nil {
		return err
	}
	rep.InputRead = float64(read) / time.Since(start).Seconds()
	cfg.Log(fmt.Sprintf("inputs: every input file read whole once in pack's order, %d readers, O_DIRECT, nothing written (scan included), cold: %.0f MB/s",
		cfg.Workers, rep.InputRead/1e6))
	return nil
}

// Median returns the median of xs.
func Median(xs [Trials]float64) float64 {
	s := xs
	slices.Sort(s[:])
	return s[Trials/2]
}

// fio runs fio with args and returns the bandwidth of dir ("read" or
// "write") in bytes per second.
func fio(cfg Config, args []string, dir string) (float64, error) {
	out, err := exec.Command("fio", append(args, "--output-format=json")...).Output()
	if err != nil {
		return 0, fmt.Errorf("chunkbench: fio %s: %w", strings.Join(args, " "), err)
	}
	// With --opendir fio announces the files it found before the JSON.
	if i := strings.IndexByte(string(out), '{'); i > 0 {
		out = out[i:]
	}
	var res struct {
		Jobs []map[string]json.RawMessage `json:"jobs"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Jobs) == 0 {
		return 0, fmt.Errorf("chunkbench: fio output: %v", err)
	}
	var side struct {
		BW float64 `json:"bw_bytes"`
	}
	if err := json.Unmarshal(res.Jobs[0][dir], &side); err != nil {
		return 0, fmt.Errorf("chunkbench: fio output: %w", err)
	}
	cfg.Log(fmt.Sprintf("fio %s: %.0f MB/s", strings.Join(args, " "), side.BW/1e6))
	return side.BW, nil
}
