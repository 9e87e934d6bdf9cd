package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOutputsDoNotFollowSymlinks: another user plants symbolic links,
// in a sticky directory all may write to, at the names serve, simulate
// and stage write there, each pointing at a file of ours (mode 0600).
// The files serve and simulate write replace the links; stage refuses
// to write its lock through one. Our file is never written.
func TestOutputsDoNotFollowSymlinks(t *testing.T) {
	dir := servePack(t, 200, 1, filepath.Join(t.TempDir(), "chunks"))
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	precious := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(precious, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	plant := func(name string) string {
		link := filepath.Join(shared, name)
		if err := os.Symlink(precious, link); err != nil {
			t.Fatal(err)
		}
		_ = os.Lchown(link, 65534, 65534) // nobody's, where we may (root)
		return link
	}
	replaced := func(link, holds string) {
		t.Helper()
		fi, err := os.Lstat(link)
		if err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: %v, %v; want a regular file in the link's place", link, fi.Mode(), err)
			return
		}
		if b, _ := os.ReadFile(link); !strings.Contains(string(b), holds) {
			t.Errorf("%s holds %.200q, want %q", link, b, holds)
		}
	}
	stats, order, sim := plant("stats.json"), plant("order.txt"), plant("sim.txt")
	cpu, mem := plant("cpu.pprof"), plant("mem.pprof")
	if _, errs, status := runCLI(t, "serve", "--chunks", dir, "--mem", "25%", "--consume", "1", "--stats-json", stats,
		"--order-out", order, "--force", "--cpuprofile", shared, "--memprofile", shared); status != 0 {
		t.Fatalf("serve: %s", errs)
	}
	replaced(stats, `"files_delivered":200`)
	replaced(order, "# brandrt delivered order")
	replaced(cpu, "")
	replaced(mem, "")
	if _, errs, status := runCLI(t, "simulate", "--chunks", dir, "--mem-fraction", "0.25", "--order-out", sim); status == 0 ||
		!strings.Contains(errs, sim+" exists; pass --force") {
		t.Errorf("simulate --order-out onto a link, without --force: status %d, %s", status, errs)
	}
	if _, errs, status := runCLI(t, "simulate", "--chunks", dir, "--mem-fraction", "0.25", "--order-out", sim, "--force"); status != 0 {
		t.Fatalf("simulate: %s", errs)
	}
	replaced(sim, "# brandrt delivered order")
	// stage's lock is named for the copy: a first stage shows the name
	if _, errs, status := runCLI(t, "stage", "--chunks", dir, "--to", shared); status != 0 {
		t.Fatalf("stage: %s", errs)
	}
	locks, _ := filepath.Glob(filepath.Join(shared, ".chunks-*.lock"))
	if len(locks) != 1 {
		t.Fatalf("stage's locks: %v", locks)
	}
	os.Remove(locks[0])
	lock := plant(filepath.Base(locks[0]))
	if _, errs, status := runCLI(t, "stage", "--chunks", dir, "--to", shared); status == 0 ||
		!strings.Contains(errs, lock+": is a symbolic link; brandrt does not write through one") {
		t.Errorf("stage with a link at its lock: status %d, %s", status, errs)
	}
	if b, err := os.ReadFile(precious); err != nil || string(b) != "precious\n" {
		t.Errorf("the file the links point at now holds %q (%v)", b, err)
	}
}
