package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/rt"
)

// TestServeAnyRanks serves one dataset of 5 shards with 1, 2, 3 and 5
// ranks (the window policy): every file exactly once per epoch with the
// bytes and labels of the index, each chunk read once (read amplification
// ≤ 1.02), each rank's memory within --mem (and --remote-mem), each rank
// naming its shards, and the order delivered equal to simulate's for as
// many ranks. Six ranks are refused, saying what to do.
func TestServeAnyRanks(t *testing.T) {
	const files, shards = 2000, 5
	dir := servePack(t, files, shards, filepath.Join(t.TempDir(), "chunks"))
	crc, label := indexSums(t, dir, shards)
	m, err := chunk.ReadManifest(chunk.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, ranks := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("%d_ranks", ranks), func(t *testing.T) {
			homes, err := chunk.Assign(m, ranks)
			if err != nil {
				t.Fatal(err)
			}
			var budget int64 // the largest rank's: a quarter of its shards
			for r := range ranks {
				var b int64
				for _, s := range m.Shards[homes[r]:homes[r+1]] {
					b += s.Bytes
				}
				budget = max(budget, b/4)
			}
			tmp := t.TempDir()
			js, served, simulated := filepath.Join(tmp, "stats.json"), filepath.Join(tmp, "served"), filepath.Join(tmp, "simulated")
			out := mpirun(t, ranks, "serve", "--chunks", dir, "--mem", "25%", "--consume", "2", "--epochs", "2",
				"--stats-json", js, "--order-out", served)
			if c := strings.Count(out, "every file delivered exactly once"); c != 2 {
				t.Errorf("%d epochs reported exactly-once delivery:\n%s", c, out)
			}
			for r := range ranks {
				named := fmt.Sprintf("brandrt: rank %d serves shards %d–%d of 5", r, homes[r], homes[r+1]-1)
				if strings.Contains(out, named) == (ranks == shards) {
					t.Errorf("%q said %v times, want it said unless each rank serves one shard:\n%s", named, strings.Contains(out, named), out)
				}
			}
			stats := readStats(t, js)
			if len(stats) != 2 {
				t.Fatalf("%d epochs in %s", len(stats), js)
			}
			for _, s := range stats {
				if s.FilesDelivered != files || s.DuplicateDeliveries != 0 || s.FilesMissing != 0 || s.FailedDeliveries != 0 ||
					s.DeliveredCRCSum != crc || s.DeliveredLabelSum != label || s.Ranks != ranks {
					t.Errorf("epoch %d: %+v; the index sums to crc %d, labels %d", s.Epoch, s, crc, label)
				}
				if float64(s.StorageBytes) > 1.02*float64(s.BytesDelivered) {
					t.Errorf("epoch %d: %d bytes read from storage for %d delivered", s.Epoch, s.StorageBytes, s.BytesDelivered)
				}
				// its own files within --mem, other ranks' pushed ahead
				// within --remote-mem (by default a tenth of --mem)
				if s.PeakMemBytes > budget+budget/10 {
					t.Errorf("epoch %d: a rank held %d bytes, over its --mem of %d and a tenth of it for other ranks' files", s.Epoch, s.PeakMemBytes, budget)
				}
			}
			args := []string{"simulate", "--chunks", dir, "--epochs", "2", "--mem-fraction", "0.25", "--order-out", simulated}
			if ranks != shards {
				args = append(args, "--ranks", fmt.Sprint(ranks))
			}
			if _, errs, status := runCLI(t, args...); status != 0 {
				t.Fatalf("simulate: %s", errs)
			}
			got, err := os.ReadFile(served)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(simulated)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("serve's order (%d bytes) differs from simulate's (%d bytes)", len(got), len(want))
			}
		})
	}
	out, err := mpirunStatus(t, shards+1, "serve", "--chunks", dir, "--mem", "25%", "--consume", "1", "--epochs", "1")
	if err == nil || !strings.Contains(out, "6 ranks for 5 shards: each rank serves at least one shard; run at most 5 ranks, or pack again with --shards 6 or more") {
		t.Errorf("6 ranks for 5 shards: %v\n%s", err, out)
	}
}

// TestServeStageShards stages a dataset of 5 shards for 2 ranks (rank 0's
// ahead, by brandrt stage --ranks 2): each rank copies the shards it
// serves (chunk.Assign), one rank serving them all says so in one line,
// and a second job reuses the
// copies with the shared storage's shard directories gone.
func TestServeStageShards(t *testing.T) {
	shared := servePack(t, 1000, 5, filepath.Join(t.TempDir(), "chunks"))
	local := filepath.Join(t.TempDir(), "local")
	m, err := chunk.ReadManifest(chunk.OS, shared)
	if err != nil {
		t.Fatal(err)
	}
	homes, err := chunk.Assign(m, 2)
	if err != nil {
		t.Fatal(err)
	}
	var rankOf []int // of each shard
	for r := range 2 {
		for range homes[r+1] - homes[r] {
			rankOf = append(rankOf, r)
		}
	}
	serve := func() string {
		t.Helper()
		return mpirun(t, 2, "serve", "--chunks", shared, "--stage", local, "--mem", "25%", "--consume", "2", "--epochs", "1")
	}
	// rank 0's shards staged ahead (a job prolog), rank 1's by serve
	out, errs, status := runCLI(t, "stage", "--chunks", shared, "--to", local, "--rank", "0", "--ranks", "2")
	if status != 0 || lastLine(out) != local || !strings.Contains(out, fmt.Sprintf("rank 0 of 2 serves shards 0–%d of 5", homes[1]-1)) {
		t.Fatalf("stage --rank 0 --ranks 2: status %d\n%s%s", status, out, errs)
	}
	out = serve()
	for s, r := range rankOf {
		want := fmt.Sprintf("brandrt: rank %d: staged shard %d to %s", r, s, local)
		if r == 0 {
			want = fmt.Sprintf("brandrt: rank %d: reusing its staged copy of shard %d", r, s)
		}
		if !strings.Contains(out, want) {
			t.Errorf("job 1: no %q in:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "every file delivered exactly once") {
		t.Fatalf("job 1:\n%s", out)
	}
	// one rank serving the 5 shards says so in one line
	one := filepath.Join(t.TempDir(), "one")
	if out := mpirun(t, 1, "serve", "--chunks", shared, "--stage", one, "--mem", "25%", "--consume", "1", "--epochs", "1"); !strings.Contains(out, "brandrt: rank 0: staged shards 0–4 (5) to "+one) {
		t.Errorf("one rank staging 5 shards:\n%s", out)
	}
	for s := range 5 { // shared storage keeps its manifest alone
		if err := os.RemoveAll(filepath.Join(shared, chunk.RankDir(s))); err != nil {
			t.Fatal(err)
		}
	}
	out = serve()
	for s, r := range rankOf {
		if want := fmt.Sprintf("brandrt: rank %d: reusing its staged copy of shard %d", r, s); !strings.Contains(out, want) {
			t.Errorf("job 2: no %q in:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "every file delivered exactly once") {
		t.Fatalf("job 2:\n%s", out)
	}
}

// TestServeOldDataset serves a dataset packed by the brandrt of before
// shards were split over ranks (testdata/pack-2026-11-25: 96 files, K=4,
// packed with --ranks 2), by the 2 ranks it was packed for and by 1.
func TestServeOldDataset(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "chunks")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("testdata", "pack-2026-11-25"))); err != nil {
		t.Fatal(err)
	}
	if stdout, errs, status := runCLI(t, "verify", "--chunks", dir); status != 0 || !strings.Contains(stdout, "checked 96 files") {
		t.Fatalf("verify: status %d\n%s%s", status, stdout, errs)
	}
	for _, ranks := range []int{2, 1} {
		out := mpirun(t, ranks, "serve", "--chunks", dir, "--mem", "50%", "--consume", "1", "--epochs", "2")
		if c := strings.Count(out, "every file delivered exactly once"); c != 2 || !strings.Contains(out, "96 files") {
			t.Errorf("%d ranks: %d epochs reported exactly-once delivery:\n%s", ranks, c, out)
		}
	}
}

// TestSimulateResume: simulate --resume on the plan of the job that saved
// the state shows the positions before it as -1 and the rest as the
// uninterrupted order; states it cannot take up are refused with what to
// change, by the rule serve follows (rt.Resume).
func TestSimulateResume(t *testing.T) {
	dir := servePack(t, 600, 3, filepath.Join(t.TempDir(), "chunks"))
	m, err := chunk.ReadManifest(chunk.OS, dir)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	whole := filepath.Join(tmp, "whole")
	if _, errs, status := runCLI(t, "simulate", "--chunks", dir, "--epochs", "2", "--mem-fraction", "0.25", "--order-out", whole); status != 0 {
		t.Fatal(errs)
	}
	state := func(change func(map[string]any)) string {
		s := map[string]any{"epoch": 1, "position": 10, "ranks": 3, "seed": 1, "dataset": rt.DatasetID(m), "policy": "window",
			"traces": "seed", "plan": map[string]any{"ranks": 3, "mem_bytes": 0, "mem_fraction": 0.25, "ramp": 64, "keep": proto.KeepShare}}
		change(s)
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(t.TempDir(), "state.json")
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return name
	}
	resumed := filepath.Join(tmp, "resumed")
	if _, errs, status := runCLI(t, "simulate", "--chunks", dir, "--epochs", "2", "--mem-fraction", "0.25", "--order-out", resumed,
		"--resume", state(func(map[string]any) {})); status != 0 {
		t.Fatal(errs)
	}
	want, got := orderFile(t, whole), orderFile(t, resumed)
	for r := range 3 {
		k := [2]int{2, r}
		if len(got[k]) != len(want[k]) || len(got[[2]int{1, r}]) != 0 {
			t.Fatalf("rank %d: %d positions of epoch 2 resumed, %d uninterrupted, %d of epoch 1", r, len(got[k]), len(want[k]), len(got[[2]int{1, r}]))
		}
		for sn, f := range got[k] {
			if sn < 10 && f != -1 || sn >= 10 && f != want[k][sn] {
				t.Fatalf("rank %d, position %d: %d, the uninterrupted order has %d", r, sn, f, want[k][sn])
			}
		}
	}
	for _, tc := range []struct {
		change func(map[string]any)
		want   string
	}{
		{func(s map[string]any) { s["dataset"] = "0000000000000000" }, "another dataset"},
		{func(s map[string]any) { s["seed"] = 7 }, "saved in a job with --seed 7"},
		{func(s map[string]any) { s["policy"] = "paper" }, "--policy paper"},
		{func(s map[string]any) { delete(s, "dataset"); s["ranks"] = 2 }, "did not record its plan: it resumes only on 2 ranks"},
		{func(s map[string]any) { delete(s, "position") }, `lacks one of "epoch", "position"`},
		{func(s map[string]any) { s["epoch"] = 4 }, "resuming at epoch 5, but this job serves epochs 1 to 2"},
	} {
		name := state(tc.change)
		_, errs, status := runCLI(t, "simulate", "--chunks", dir, "--epochs", "2", "--resume", name)
		if status == 0 || !strings.Contains(errs, tc.want) {
			t.Errorf("simulate --resume %s: status %d, %q; want an error saying %q", name, status, errs, tc.want)
		}
	}
}
