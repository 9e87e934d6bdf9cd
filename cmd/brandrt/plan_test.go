package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/brandrt/brandrt/rt"
)

// TestPlanIsWhatServeDoes plans 3 epochs of a dataset of 2 shards on 2
// nodes with a quarter of it in memory, serves them under mpirun, and
// holds the plan against what the ranks counted: per epoch the chunks
// read from storage, their bytes (up to a page per read, which O_DIRECT
// adds), and the files and bytes the ranks moved to each other.
func TestPlanIsWhatServeDoes(t *testing.T) {
	dir := servePack(t, 1200, 2, filepath.Join(t.TempDir(), "chunks"))
	out, errs, status := runCLI(t, "plan", "--chunks", dir, "--nodes", "2", "--mem", "25%", "--epochs", "3", "--json")
	if status != 0 {
		t.Fatalf("plan: status %d\n%s", status, errs)
	}
	var p planned
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatalf("plan --json: %v\n%s", err, out)
		}
	}
	if p.Nodes != 2 || len(p.Epochs) != 3 || p.Holds {
		t.Fatalf("plan --json: %+v", p)
	}
	js := filepath.Join(t.TempDir(), "stats.json")
	mpirun(t, 2, "serve", "--chunks", dir, "--mem", "25%", "--consume", "2", "--epochs", "3", "--stats-json", js)
	for i, s := range readStats(t, js) {
		var reads, readBytes, files, moved, movedBytes int64
		for _, rf := range p.Epochs[i].Ranks {
			reads, readBytes, files = reads+rf.Reads, readBytes+rf.ReadBytes, files+rf.Files
			moved, movedBytes = moved+rf.ReceivedFiles, movedBytes+rf.ReceivedBytes
		}
		t.Logf("epoch %d: planned %d reads of %d bytes, %d files moved (%d bytes); served %d reads of %d bytes, %d files moved (%d bytes)",
			s.Epoch, reads, readBytes, moved, movedBytes, s.StorageReads, s.StorageBytes, s.RemoteFiles, s.RemoteBytes)
		if reads != s.StorageReads || s.StorageBytes < readBytes || s.StorageBytes > readBytes+4095*reads || files != s.FilesDelivered ||
			moved != s.RemoteFiles || movedBytes != s.RemoteBytes || moved == 0 {
			t.Errorf("epoch %d: planned %d reads of %d bytes, %d files, %d moved (%d bytes); served %d reads of %d bytes, %d files, %d moved (%d bytes)",
				s.Epoch, reads, readBytes, files, moved, movedBytes, s.StorageReads, s.StorageBytes, s.FilesDelivered, s.RemoteFiles, s.RemoteBytes)
		}
	}
}

// TestPlanFootprintIsServes: the footprint plan gives each rank is, to
// the byte, the one serve's start-up line says for a DataLoader's job
// (files placed in the memory serve shares with its clients: its slots
// and size classes), on 1 and 2 nodes, with a quarter of the dataset in
// memory and all of it, and with the flags both take that change it
// (--hand-mem, --read-mem, --io-workers).
func TestPlanFootprintIsServes(t *testing.T) {
	cleanVader(t)
	_, dir := packPaths(t, 400, 2, 8, 2)
	said := regexp.MustCompile(`rank (\d+): the rank needs [^(]*\((\d+) bytes\) of memory: `)
	// the flags both take that change the footprint: none handed on, the
	// reads in flight
	flags := []string{"--hand-mem", "0", "--read-mem", "3MiB", "--io-workers", "2"}
	for _, c := range []struct {
		nodes int
		mem   string
		flags []string
	}{{1, "25%", nil}, {1, "100%", nil}, {2, "25%", nil}, {2, "100%", nil}, {1, "25%", flags}, {2, "25%", flags}} {
		out, errs, status := runCLI(t, append([]string{"plan", "--chunks", dir, "--nodes", fmt.Sprint(c.nodes), "--mem", c.mem, "--epochs", "1", "--json"}, c.flags...)...)
		var p planned
		if status != 0 || json.Unmarshal([]byte(out), &p) != nil {
			t.Fatalf("plan %+v: status %d\n%s%s", c, status, out, errs)
		}
		served := make([]int64, c.nodes)
		line := mpirun(t, c.nodes, append([]string{"serve", "--chunks", dir, "--mem", c.mem, "--footprint"}, c.flags...)...)
		for _, m := range said.FindAllStringSubmatch(line, -1) {
			r, _ := strconv.Atoi(m[1])
			served[r], _ = strconv.ParseInt(m[2], 10, 64)
		}
		if !slices.Equal(p.Footprint, served) || slices.Contains(served, 0) {
			t.Errorf("%d nodes, --mem %s: plan's footprints %v, serve's %v\n%s", c.nodes, c.mem, p.Footprint, served, line)
		}
	}
}

// The table: a row per number of nodes, and the smallest that holds the
// dataset; bad flags are refused, naming what to do.
func TestPlanTable(t *testing.T) {
	dir := servePack(t, 600, 3, filepath.Join(t.TempDir(), "chunks"))
	costs := writeTemp(t, "costs.json", 0o644, `{"rank_s_per_file": 1e-5, "rank_s_per_moved_file": 2e-5, "rank_s_per_moved_byte": 1e-10, "read_s_per_byte": 1e-9,
		"rank_s_start": 0.1, "rank_s_per_filled_byte": 1e-9, "client_s_per_file": 1e-5, "client_s_per_byte": 1e-10, "cores_busy": 0.9, "start_s": 1}`)
	badCosts := writeTemp(t, "bad.json", 0o644, `{"rank_s_per_file": 1e-5, "rank_s_per_moved_file": 2e-5, "read_s_per_byte": 1e-9,
		"rank_s_start": 0.1, "rank_s_per_filled_byte": 1e-9, "client_s_per_file": 1e-5, "client_s_per_byte": -1, "cores_busy": 1.5, "start_s": 1}`)
	out, errs, status := runCLI(t, "plan", "--chunks", dir, "--nodes", "3,1,2", "--mem", "1MiB", "--storage-rate", "100MB", "--serve-rate", "10k")
	if status != 0 {
		t.Fatalf("plan: status %d\n%s", status, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.Contains(lines[0], "storage read per node") || !strings.Contains(lines[0], "bound by") ||
		!strings.HasPrefix(strings.TrimSpace(lines[1]), "1 ") || !strings.HasPrefix(strings.TrimSpace(lines[3]), "3 ") ||
		!strings.Contains(lines[4], "holds the whole dataset from") {
		t.Errorf("the table:\n%s", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--nodes", "2"}, "give --mem (each rank's memory for its files) or --node-mem"},
		{[]string{"--nodes", "0,2", "--mem", "25%"}, `--nodes "0,2": want numbers of nodes from 1 to 4096`},
		{[]string{"--nodes", "4", "--mem", "25%"}, "4 ranks for 3 shards"},
		{[]string{"--nodes", "1", "--node-mem", "50%"}, "--node-mem takes bytes"},
		{[]string{"--nodes", "1", "--mem", "90%cgroup"}, "--mem 90%cgroup is a share of what --node-mem leaves: give --node-mem"},
		{[]string{"--nodes", "1", "--node-mem", "20MiB"}, "which leaves nothing for its files"},
		{[]string{"--nodes", "1", "--mem", "1MiB", "--cores", "4"}, "--cores goes with --cpu-costs"},
		{[]string{"--nodes", "1", "--mem", "1MiB", "--cpu-costs", costs}, "--cpu-costs needs --cores"},
		{[]string{"--nodes", "1", "--mem", "1MiB", "--cpu-costs", badCosts, "--cores", "4"},
			`--cpu-costs ` + badCosts + ` (examples/bench/calibrate.py writes it): no "rank_s_per_moved_byte"` + "\n" + `"client_s_per_byte" is -1 seconds, want 0 to 60` + "\n" + `"cores_busy" is 1.5, want more than 0, up to 1`},
		{[]string{"--nodes", "1", "--mem", "1MiB", "--cpu-costs", filepath.Join(dir, "none.json"), "--cores", "4"}, "--cpu-costs: open " + filepath.Join(dir, "none.json")},
	} {
		_, errs, status := runCLI(t, append([]string{"plan", "--chunks", dir}, c.args...)...)
		if status == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("plan %v: status %d, want %q in\n%s", c.args, status, c.want, errs)
		}
	}
}

// With CPU costs and cores, the node's CPU is a bound of the epoch's
// time: the costs times what the plan has the node do, over its cores as
// busy as the costs say they were.
func TestPlanCPUBound(t *testing.T) {
	dir := servePack(t, 600, 2, filepath.Join(t.TempDir(), "chunks"))
	costs := writeTemp(t, "costs.json", 0o644, `{"rank_s_per_file": 1e-3, "rank_s_per_moved_file": 2e-3, "rank_s_per_moved_byte": 0, "read_s_per_byte": 0,
		"rank_s_start": 0.5, "rank_s_per_filled_byte": 0, "client_s_per_file": 1e-3, "client_s_per_byte": 0, "cores_busy": 0.5, "start_s": 2}`)
	p := planTwo(t, dir, costs, "--storage-rate", "1TB")
	for _, e := range p.Epochs {
		busiest := 0.0
		for r, rf := range e.Ranks {
			want := 2e-3*float64(rf.Files) + 2e-3*float64(rf.SentFiles+rf.ReceivedFiles)
			if e.Epoch == 1 {
				want += 0.5
			}
			if math.Abs(e.CPU[r]-want) > 1e-9 {
				t.Errorf("epoch %d, rank %d: %g CPU seconds, want %g", e.Epoch, r, e.CPU[r], want)
			}
			busiest = max(busiest, want)
		}
		// 2 cores, busy half the time; the job's start before epoch 1
		if e.Epoch == 1 {
			busiest += 2
		}
		if e.Bound != "the node's CPU" || math.Abs(e.Seconds-busiest) > 1e-9 {
			t.Errorf("epoch %d: %g s bound by %q, want %g s bound by the node's CPU", e.Epoch, e.Seconds, e.Bound, busiest)
		}
	}
}

// With the costs' bytes a link carries beyond a file's, the network's
// bytes are the files' and those per file and per byte moved, each way,
// and they bound the epoch at --link-rate; a bad value is refused.
func TestPlanLinkBytes(t *testing.T) {
	dir := servePack(t, 600, 2, filepath.Join(t.TempDir(), "chunks"))
	const zero = `"rank_s_per_file": 0, "rank_s_per_moved_file": 0, "rank_s_per_moved_byte": 0, "read_s_per_byte": 0,
		"rank_s_start": 0, "rank_s_per_filled_byte": 0, "client_s_per_file": 0, "client_s_per_byte": 0, "cores_busy": 1, "start_s": 0`
	costs := writeTemp(t, "costs.json", 0o644, `{`+zero+`, "link_bytes_per_moved_file": 150, "link_bytes_per_moved_byte": 0.01}`)
	p := planTwo(t, dir, costs, "--link-rate", "1MB")
	for _, e := range p.Epochs {
		var busiest int64
		for r, rf := range e.Ranks {
			in := rf.ReceivedBytes + int64(math.Round(150*float64(rf.ReceivedFiles)+0.01*float64(rf.ReceivedBytes)))
			outb := rf.SentBytes + int64(math.Round(150*float64(rf.SentFiles)+0.01*float64(rf.SentBytes)))
			if rf.ReceivedFiles == 0 || e.LinkIn[r] != in || e.LinkOut[r] != outb {
				t.Errorf("epoch %d, rank %d: %d files (%d bytes) in, %d (%d) out: the link carries %d in and %d out, want %d and %d",
					e.Epoch, r, rf.ReceivedFiles, rf.ReceivedBytes, rf.SentFiles, rf.SentBytes, e.LinkIn[r], e.LinkOut[r], in, outb)
			}
			busiest = max(busiest, in, outb)
		}
		if e.Bound != "network" || math.Abs(e.Seconds-float64(busiest)/1e6) > 1e-9 {
			t.Errorf("epoch %d: %g s bound by %q, want %g s bound by the network", e.Epoch, e.Seconds, e.Bound, float64(busiest)/1e6)
		}
	}
	bad := writeTemp(t, "bad.json", 0o644, `{`+zero+`, "link_bytes_per_moved_file": -1, "link_bytes_per_moved_byte": 2}`)
	_, errs, status := runCLI(t, "plan", "--chunks", dir, "--nodes", "2", "--mem", "25%", "--cpu-costs", bad, "--cores", "2")
	if status == 0 || !strings.Contains(errs, `"link_bytes_per_moved_file" is -1, want 0 to 1 MiB`) || !strings.Contains(errs, `"link_bytes_per_moved_byte" is 2, want 0 to 1`) {
		t.Errorf("plan with bad link costs: status %d, want both refused:\n%s", status, errs)
	}
}

// planTwo plans 2 epochs of dir on 2 nodes with a quarter in memory, the
// costs file costs on 2 cores and rate's flags, and returns the plan.
func planTwo(t *testing.T, dir, costs string, rate ...string) planned {
	t.Helper()
	out, errs, status := runCLI(t, append([]string{"plan", "--chunks", dir, "--nodes", "2", "--mem", "25%", "--epochs", "2", "--json",
		"--cpu-costs", costs, "--cores", "2"}, rate...)...)
	if status != 0 {
		t.Fatalf("plan: status %d\n%s", status, errs)
	}
	var p planned
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &p); err != nil {
		t.Fatalf("plan --json: %v\n%s", err, out)
	}
	return p
}

// The DataLoader's bytes cost what the costs say for a copy, for a file
// handed on in place with no bound on them (one rank whose budget holds
// its shard), or under one; files under 32 KiB, and every file with
// --hand-mem 0, go as copies; a costs file without the last two counts
// every byte as a copy. With one rank each file is answered once an
// epoch, so the handable ones are the dataset's that rt.Handable says.
func TestPlanClientBytes(t *testing.T) {
	const copied, handed, bounded = 1e-9, 1e-11, 1e-10
	costs := `{"rank_s_per_file": 0, "rank_s_per_moved_file": 0, "rank_s_per_moved_byte": 0, "read_s_per_byte": 0,
		"rank_s_start": 0, "rank_s_per_filled_byte": 0, "client_s_per_file": 0, "client_s_per_byte": 1e-9, "cores_busy": 1, "start_s": 0`
	split := writeTemp(t, "split.json", 0o644, costs+`, "client_s_per_handed_byte": 1e-11, "client_s_per_bounded_byte": 1e-10}`)
	old := writeTemp(t, "old.json", 0o644, costs+"}")
	sizes, one, two := planDatasets(t)
	var handable int64
	for _, s := range sizes {
		if rt.Handable(s) {
			handable++
		}
	}
	for _, tc := range []struct {
		name, dir, mem, costs string
		nodes                 int
		more                  []string
		handCap               int64 // its sign: -1 none, 0 none handed on, 1 a bound
		perHandable           float64
	}{
		{"one rank holding its shard", one, "100%", split, 1, nil, -1, handed},
		{"two ranks", two, "25%", split, 2, nil, 1, bounded},
		{"--hand-mem 0", one, "100%", split, 1, []string{"--hand-mem", "0"}, 0, copied},
		{"costs fitted before", one, "100%", old, 1, nil, -1, copied},
	} {
		args := append([]string{"plan", "--chunks", tc.dir, "--nodes", fmt.Sprint(tc.nodes), "--mem", tc.mem,
			"--epochs", "2", "--json", "--cpu-costs", tc.costs, "--cores", "2"}, tc.more...)
		out, errs, status := runCLI(t, args...)
		var p planned
		if status != 0 || json.Unmarshal([]byte(out), &p) != nil {
			t.Fatalf("%s: plan: status %d\n%s%s", tc.name, status, errs, out)
		}
		for r, c := range p.HandCap {
			if sign := min(max(c, -1), 1); sign != tc.handCap {
				t.Errorf("%s, rank %d: hand_cap_bytes %d", tc.name, r, c)
			}
		}
		for _, e := range p.Epochs {
			for r, rf := range e.Ranks {
				want := copied*float64(rf.Bytes-rf.HandableBytes) + tc.perHandable*float64(rf.HandableBytes)
				if rf.HandableFiles == 0 || rf.HandableBytes >= rf.Bytes || math.Abs(e.CPU[r]-want) > 1e-12 {
					t.Errorf("%s, epoch %d, rank %d: %d of %d files (%d of %d bytes) handable: %g CPU seconds, want %g",
						tc.name, e.Epoch, r, rf.HandableFiles, rf.Files, rf.HandableBytes, rf.Bytes, e.CPU[r], want)
				}
				if tc.nodes == 1 && rf.HandableFiles != handable {
					t.Errorf("%s, epoch %d: %d files handable, want the dataset's %d", tc.name, e.Epoch, rf.HandableFiles, handable)
				}
			}
		}
	}
}

// planDatasets packs 300 files of 2 classes, 16 to a chunk, for one rank
// and for two, and returns their sizes and the two packed datasets.
func planDatasets(t *testing.T) (sizes []int64, one, two string) {
	t.Helper()
	input, one := packPaths(t, 300, 2, 16, 1)
	if err := filepath.WalkDir(input, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			sizes = append(sizes, fi.Size())
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	two = filepath.Join(t.TempDir(), "two")
	if _, errs, status := runCLI(t, "pack", "--input", input, "--out", two, "--chunk-files", "16", "--ranks", "2"); status != 0 {
		t.Fatal(errs)
	}
	return sizes, one, two
}
