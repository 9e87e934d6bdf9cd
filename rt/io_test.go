package rt

import (
	"testing"

	"github.com/brandrt/brandrt/proto"
)

// flush gives the workers reads while their bytes stay within readMem,
// and one read alone whatever its size; a read the loop has stepped
// makes room for the next.
func TestReadsInFlightWithinBytes(t *testing.T) {
	size := map[int]int64{0: 8 << 20, 1: 8 << 20, 2: 8 << 20, 3: 40 << 20, 4: 8 << 20}
	p := &ioPool{queue: make(chan proto.Read, 8), readMem: 20 << 20, bytes: func(pc int) int64 { return size[pc] }}
	for pc := range 5 {
		p.backlog = append(p.backlog, proto.Read{PC: pc})
	}
	given := func() (pcs []int) {
		for {
			select {
			case r := <-p.queue:
				pcs = append(pcs, r.PC)
			default:
				return pcs
			}
		}
	}
	step := func(pc int) { p.stepped(&readResult{read: proto.Read{PC: pc}}) }
	check := func(what string, want ...int) {
		t.Helper()
		p.flush()
		got := given()
		if len(got) != len(want) || (len(got) > 0 && got[0] != want[0]) || (len(got) > 1 && got[1] != want[1]) {
			t.Fatalf("%s: the workers got chunks %v, want %v (%d bytes in flight)", what, got, want, p.reading)
		}
	}
	check("20 MiB for chunks of 8", 0, 1)
	step(0)
	check("one stepped", 2)
	step(1)
	check("40 MiB chunk beside 8 in flight")
	step(2)
	check("nothing in flight: the 40 MiB chunk goes alone", 3)
	check("beside it nothing")
	step(3)
	check("after it", 4)
	step(4)
	if p.reading != 0 {
		t.Fatalf("%d bytes in flight after every read was stepped", p.reading)
	}
	p.stepped(&readResult{read: proto.Read{PC: 0}, resident: true})
	if p.reading != 0 {
		t.Fatalf("a read answered from memory changed the bytes in flight: %d", p.reading)
	}
}
