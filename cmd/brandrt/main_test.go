package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		"chunk_span", "chunk_span_shuffle"}
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
		variants[r["variant"].(string)]++
		if amp := r["read_amplification"].(float64); r["variant"] == "window" && amp != 1 {
			t.Fatalf("window read each chunk %.3f times: %s", amp, l)
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

func TestSimulateRejectsBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--files", "lots"}, `"lots" is not a count`},
		{[]string{"--files", "1.5"}, "not a whole number"},
		{[]string{"--mem-fraction", "0"}, "memory fraction = 0"},
		{[]string{"--mem-fraction", "1.5", "--chunk-files", "0"}, "chunk files = 0"},
		{[]string{"--variant", "fast"}, `unknown variant "fast"`},
		{[]string{"--policy", "lru"}, `--policy "lru": want window or paper`},
		{[]string{"--lead", "-1"}, "lead -1 and ramp 8"},
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
}
