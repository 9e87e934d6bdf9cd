package chunk

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeTestIndex writes an index of n entries with ImageNet-like paths
// (n01440764/n01440764_10026.JPEG) into dir.
func writeTestIndex(tb testing.TB, dir string, n, k int) {
	tb.Helper()
	entries := make([]Entry, n)
	for i := range entries {
		class := fmt.Sprintf("n%08d", 1440764+i%1000)
		entries[i] = Entry{Chunk: i / k, Slot: i % k, Offset: int64(64 + 16*k + (i%k)*110000), Size: 110000,
			CRC: uint32(i * 2654435761), Label: int32(i % 1000), Path: fmt.Sprintf("%s/%s_%d.JPEG", class, class, i)}
	}
	f, err := os.Create(filepath.Join(dir, indexName))
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := writeIndexTo(f, 0, k, 0, entries); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkIndexOpen1M opens a 1,281,167-entry index (ImageNet-1k), which
// maps it and checks its checksums; each iteration drops the file from the
// page cache first, so it is read from storage. Run it with
// go test -run '^$' -bench IndexOpen ./chunk
func BenchmarkIndexOpen1M(b *testing.B) {
	dir := b.TempDir()
	const n = 1281167
	writeTestIndex(b, dir, n, 64)
	fi, _ := os.Stat(filepath.Join(dir, indexName))
	b.SetBytes(fi.Size())
	var worst time.Duration
	for i := 0; i < b.N; i++ {
		f, err := OS.Open(filepath.Join(dir, indexName), false)
		if err != nil {
			b.Fatal(err)
		}
		_ = f.DropCache()
		f.Close()
		start := time.Now()
		ix, err := OpenIndex(OS, dir, 0)
		if err != nil || ix.Len() != n {
			b.Fatalf("open: %v", err)
		}
		_ = ix.Entry(n - 1) // one lookup at the far end
		worst = max(worst, time.Since(start))
		ix.Close()
	}
	b.ReportMetric(worst.Seconds(), "worst-s/open")
}
