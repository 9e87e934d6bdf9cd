package chunk

import "testing"

// BenchmarkChecksumSpread checksums 110 KB files spread over 256 MiB, so
// that they come from memory rather than the CPU's cache, as a rank's
// readers meet them. Run it with
// go test -run '^$' -bench ChecksumSpread ./chunk
func BenchmarkChecksumSpread(b *testing.B) {
	const size, spread = 110_000, 256 << 20
	buf := make([]byte, spread)
	for i := range buf {
		buf[i] = byte(i)
	}
	b.SetBytes(size)
	b.ResetTimer()
	off := 0
	for range b.N {
		if off+size > spread {
			off = 0
		}
		Checksum(buf[off : off+size])
		off += size
	}
}
