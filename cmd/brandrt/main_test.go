package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/launch"
	"github.com/brandrt/brandrt/proto/sim"
)

func runCLI(t *testing.T, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	var out, errb bytes.Buffer
	status = run(append([]string{"brandrt"}, args...), &out, &errb)
	return out.String(), errb.String(), status
}

func TestSimulateJSON(t *testing.T) {
	out, errs, status := runCLI(t, "simulate", "--compare", "--files", "6k", "--ranks", "3",
		"--chunk-files", "16", "--mem-fraction", "0.25", "--epochs", "2", "--json")
	if status != 0 {
		t.Fatalf("status %d: %s", status, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 10 {
		t.Fatalf("%d lines for 4 paper variants and window × 2 epochs:\n%s", len(lines), out)
	}
	required := []string{"variant", "epoch", "ranks", "files", "chunk_files", "mem_fraction", "requests",
		"local_hits", "chunk_reads", "read_amplification", "fill_rate", "remote_requests", "prefetched",
		"prefetch_hits", "peak_mem_bytes", "distinct_chunks_per_batch", "distinct_chunks_per_batch_shuffle",
		"chunk_span", "chunk_span_shuffle", "distinct_first_1pct", "distinct_last_1pct_shuffle"}
	variants := map[string]int{}
	for _, l := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		for _, k := range required {
			if _, ok := r[k]; !ok {
				t.Fatalf("line lacks %q: %s", k, l)
			}
		}
		if r["requests"].(float64) != 6000 || r["delivered"].(float64) != 6000 {
			t.Fatalf("requests %v delivered %v, want 6000: %s", r["requests"], r["delivered"], l)
		}
		if _, ok := r["pairs_again_shuffle"]; ok != (r["epoch"].(float64) == 2) {
			t.Fatalf("pairs_again_shuffle must be there in epoch 2 alone: %s", l)
		}
		variants[r["variant"].(string)]++
		// the window policy reads each chunk once in epoch 1, and then
		// the shard less what each rank keeps (a quarter of it: 95 % of
		// its budget)
		amp := r["read_amplification"].(float64)
		if want := map[float64]float64{1: 1, 2: 1 - 0.95*0.25}[r["epoch"].(float64)]; r["variant"] == "window" && (amp < want-0.01 || amp > want+0.01) {
			t.Fatalf("window read each chunk %.3f times, want %.3f: %s", amp, want, l)
		}
	}
	for _, v := range []string{"full", "random-selection", "no-prefetching", "no-optimization", "window"} {
		if variants[v] != 2 {
			t.Fatalf("variant %s: %d lines, want 2 (%v)", v, variants[v], variants)
		}
	}
	if !strings.Contains(errs, "100.0%") {
		t.Errorf("no progress on stderr: %q", errs)
	}
}

func TestSimulateTable(t *testing.T) {
	dir := t.TempDir()
	out, errs, status := runCLI(t, "simulate", "--files", "3000", "--ranks", "2", "--chunk-files", "8",
		"--size-dist", "fixed", "--cpuprofile", dir)
	if status != 0 {
		t.Fatalf("status %d: %s", status, errs)
	}
	if fi, err := os.Stat(filepath.Join(dir, "cpu.pprof")); err != nil || fi.Size() == 0 {
		t.Errorf("--cpuprofile wrote no cpu.pprof: %v", err)
	}
	for _, want := range []string{"3,000 files", "2 ranks, K=8", "window", "1.00×", "every file delivered exactly once"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	out, errs, status = runCLI(t, "simulate", "--files", "3000", "--ranks", "2", "--chunk-files", "8",
		"--policy", "paper", "--variant", "no-prefetching")
	if status != 0 || !strings.Contains(out, "paper no-prefetching") || strings.Contains(out, "a chunk read takes") {
		t.Errorf("--policy paper --variant no-prefetching: status %d: %s%s", status, out, errs)
	}
}

// The same seed writes the same order, byte for byte, for either policy;
// another seed another; every epoch holds every file once.
func TestSimulateOrderOut(t *testing.T) {
	dir := t.TempDir()
	orders := map[string]string{}
	for _, c := range []struct{ name, policy, seed string }{
		{"w1", "window", "1"}, {"w1again", "window", "1"}, {"w2", "window", "2"},
		{"p1", "paper", "1"}, {"p1again", "paper", "1"},
	} {
		path := filepath.Join(dir, c.name)
		_, errs, status := runCLI(t, "simulate", "--files", "3000", "--ranks", "2", "--chunk-files", "8",
			"--epochs", "2", "--policy", c.policy, "--seed", c.seed, "--order-out", path)
		if status != 0 {
			t.Fatalf("%s: status %d: %s", c.name, status, errs)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		orders[c.name] = string(b)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if !strings.HasPrefix(lines[0], "# brandrt delivered order, policy "+c.policy) || len(lines) != 1+2*3000 {
			t.Fatalf("%s: %d lines, header %q", c.name, len(lines), lines[0])
		}
		seen := map[[2]string]bool{}
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			key := [2]string{f[0], f[3]}
			if len(f) != 4 || seen[key] || f[3] == "-1" {
				t.Fatalf("%s: line %q repeats a file of its epoch or is malformed", c.name, l)
			}
			seen[key] = true
		}
	}
	if orders["w1"] != orders["w1again"] || orders["p1"] != orders["p1again"] {
		t.Fatal("the same seed wrote two orders")
	}
	if orders["w1"] == orders["w2"] {
		t.Fatal("another seed wrote the same order")
	}
	_, errs, status := runCLI(t, "simulate", "--files", "3000", "--ranks", "2", "--order-out", filepath.Join(dir, "w1"))
	if status == 0 || !strings.Contains(errs, "exists; pass --force") {
		t.Fatalf("an existing --order-out file: status %d, %q", status, errs)
	}
}

// simulate --chunks takes the ranks, K and sizes of a packed dataset.
func TestSimulateChunks(t *testing.T) {
	dir := servePack(t, 300, 2, filepath.Join(t.TempDir(), "chunks"))
	out, errs, status := runCLI(t, "simulate", "--chunks", dir, "--json")
	if status != 0 {
		t.Fatalf("status %d: %s", status, errs)
	}
	var r sim.Result
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	m, err := chunk.ReadManifest(chunk.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.Files != 300 || r.Ranks != 2 || r.ChunkFiles != 16 || r.Bytes != m.Bytes || r.ReadAmplification != 1 {
		t.Fatalf("simulated %d files of %d bytes on %d ranks, K=%d, read %.2f×; the dataset has 300 of %d, 2, 16",
			r.Files, r.Bytes, r.Ranks, r.ChunkFiles, r.ReadAmplification, m.Bytes)
	}
	if len(m.Classes) < 2 || r.LabelEntropy == nil || *r.LabelEntropy <= 0 || *r.LabelEntropyShuffle <= 0 {
		t.Fatalf("%d classes, label entropy %v (shuffle %v)", len(m.Classes), r.LabelEntropy, r.LabelEntropyShuffle)
	}
	// --ranks splits the shards as serve does: 1 rank serves both, 3 are
	// more ranks than shards
	out, errs, status = runCLI(t, "simulate", "--chunks", dir, "--ranks", "1", "--json")
	if status != 0 || json.Unmarshal([]byte(strings.TrimSpace(out)), &r) != nil || r.Ranks != 1 || r.Files != 300 {
		t.Fatalf("--chunks with --ranks 1: status %d, %q, %+v", status, errs, r)
	}
	_, errs, status = runCLI(t, "simulate", "--chunks", dir, "--ranks", "3")
	if status == 0 || !strings.Contains(errs, "3 ranks for 2 shards") {
		t.Fatalf("--chunks with --ranks 3: status %d, %q", status, errs)
	}
}

// TestSimulateTrustsTheIndexes: a manifest that claims 10^11 more files
// than its indexes hold (shard counts and chunk counts edited to agree)
// is refused, naming both counts, instead of sizing memory by the claim.
func TestSimulateTrustsTheIndexes(t *testing.T) {
	dir := servePack(t, 300, 2, filepath.Join(t.TempDir(), "chunks"))
	name := filepath.Join(dir, chunk.ManifestName)
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	const extra = 1e11
	shard := m["shards"].([]any)[1].(map[string]any)
	shard["files"] = shard["files"].(float64) + extra
	shard["chunks"] = float64((int64(shard["files"].(float64)) + 15) / 16)
	m["files"] = m["files"].(float64) + extra
	if b, err = json.Marshal(m); err == nil {
		err = os.WriteFile(name, b, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	_, errs, status := runCLI(t, "simulate", "--chunks", dir)
	if want := "the manifest says 100000000300 files, the indexes hold 300"; status != 1 || !strings.Contains(errs, want) {
		t.Fatalf("status %d, %q; want %q", status, errs, want)
	}
}

func TestSimulateRejectsBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--files", "lots"}, `"lots" is not a count`},
		{[]string{"--files", "1.5"}, "not a whole number"},
		{[]string{"--mem-fraction", "0"}, "flag -mem-fraction: 0 is too small: want more than 0"},
		{[]string{"--mem-fraction", "1.5"}, "flag -mem-fraction: 1.5 is more than the limit of 1"},
		{[]string{"--chunk-files", "0"}, "flag -chunk-files: 0 is less than the minimum of 1"},
		{[]string{"--chunk-files", "1000000000"}, "flag -chunk-files: 1000000000 is more than the limit of 65536"},
		{[]string{"--chunk-files", "4294967297"}, "flag -chunk-files: 4294967297 is more than the limit of 65536"},
		{[]string{"--files", "100", "--chunk-files", "101", "--ranks", "1"}, "--chunk-files: chunk size K=101 files is more than the dataset's 100 files"},
		{[]string{"--variant", "fast"}, `unknown variant "fast"`},
		{[]string{"--policy", "lru"}, `--policy "lru": want one of paper, window`},
		{[]string{"--compare", "--order-out", "x"}, "drop --compare"},
		{[]string{"--lead", "-1"}, "flag -lead: -1 is less than the minimum of 0"},
		{[]string{"--size-dist", "zipf"}, `--size-dist "zipf"`},
		{[]string{"--file-size", "big"}, `"big" is not a size`},
		{[]string{"--ranks", "5", "--files", "4"}, "5 ranks for 4 files"},
		{[]string{"extra"}, "takes no arguments"},
	} {
		_, errs, status := runCLI(t, append([]string{"simulate"}, c.args...)...)
		if status == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: status %d, stderr %q, want %q", c.args, status, errs, c.want)
		}
	}
}

func TestHelpExplains(t *testing.T) {
	out, _, status := runCLI(t, "simulate", "--help")
	if status != 0 || !strings.Contains(out, "--mem-fraction") || !strings.Contains(out, "variants") ||
		!strings.Contains(out, "window (the default)") {
		t.Fatalf("status %d, help:\n%s", status, out)
	}
}

func TestInfo(t *testing.T) {
	out, errs, status := runCLI(t, "info")
	if status != 0 || !strings.Contains(out, "cores") || !strings.Contains(out, "mpi ") {
		t.Fatalf("status %d: %s%s", status, out, errs)
	}
	if env, err := launch.FromEnv(); err != nil || env.Node == "" || !strings.Contains(out, "node      "+env.Node+"\n") {
		t.Fatalf("no line for node %q (%v):\n%s", env.Node, err, out)
	}
}

// TestBinaryLinksNoTesting asks the go tool for the binary's packages:
// none is the testing package (brought in by test helpers, which would
// also add their flags to the binary's).
func TestBinaryLinksNoTesting(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "testing" || strings.HasPrefix(p, "testing/") || strings.HasSuffix(p, "/scripttest") || strings.HasSuffix(p, "/testkit") {
			t.Errorf("brandrt links %s", p)
		}
	}
}
