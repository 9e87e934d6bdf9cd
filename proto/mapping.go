package proto

import (
	"errors"
	"fmt"
	"sort"
)

// Shard describes the files one rank stores and the memory it gives them.
type Shard struct {
	// Files is the number of files stored on the rank.
	Files int
	// Bytes is the total size of those files in bytes.
	Bytes int64
	// MemBytes is the rank's budget in bytes for its local virtual chunks.
	MemBytes int64
	// Chunks, when set, is the number of files of each of the rank's
	// physical chunks (chunks cut by size: 1 to K files each); unset,
	// they hold K files each, the last fewer.
	Chunks []int
}

// Dataset is what every rank knows about the dataset: the chunk size and,
// for each rank, its shard.
type Dataset struct {
	// K is the number of files per physical and virtual chunk, or the
	// most a physical chunk holds when shards list their chunks.
	K int
	// Shards holds one entry per rank.
	Shards []Shard
}

// Validate reports every problem of d at once.
func (d Dataset) Validate() error {
	var errs []error
	if d.K < 1 {
		errs = append(errs, fmt.Errorf("proto: chunk size K = %d, want ≥ 1", d.K))
	}
	if len(d.Shards) == 0 {
		errs = append(errs, errors.New("proto: dataset has no ranks"))
	}
	total := 0
	for r, s := range d.Shards {
		switch {
		case s.Files < 0:
			errs = append(errs, fmt.Errorf("proto: rank %d has %d files", r, s.Files))
		case s.Bytes < 0:
			errs = append(errs, fmt.Errorf("proto: rank %d holds %d bytes", r, s.Bytes))
		case s.MemBytes < 0:
			errs = append(errs, fmt.Errorf("proto: rank %d has a memory budget of %d bytes", r, s.MemBytes))
		}
		total += max(s.Files, 0)
		if s.Chunks != nil {
			n := 0
			for _, c := range s.Chunks {
				if c < 1 || c > d.K {
					errs = append(errs, fmt.Errorf("proto: rank %d has a chunk of %d files (K = %d)", r, c, d.K))
					break
				}
				n += c
			}
			if n != s.Files {
				errs = append(errs, fmt.Errorf("proto: rank %d's chunks hold %d files, it has %d", r, n, s.Files))
			}
		}
	}
	if total > MaxFiles {
		errs = append(errs, fmt.Errorf("proto: %d files, more than the limit of %d", total, MaxFiles))
	}
	return errors.Join(errs...)
}

// rankMap is the static layout of one rank's files, chunks and VCs.
type rankMap struct {
	firstFile FileID // global id of the rank's first file
	files     int
	firstPC   int // global id of the rank's first physical chunk
	pcs       int
	firstVC   int // global id of the rank's first virtual chunk
	vcs       int
	memBytes  int64
	bytes     int64
	pcFirst   []int // rank-local first file of each PC and the end; nil: PCs of K files
}

// Mapping is the static map from files to physical chunks (PCs), slots and
// virtual chunks (VCs), identical on every rank.
//
// Rank h's files are cut into PCs of K consecutive files (the last may be
// shorter), or of the files Shard.Chunks lists. The rank has M_h VCs,
// M_h = MemBytes / (K × mean file size of the rank), or MemBytes / mean
// PC size for listed PCs, at least 1 and at most its PC count. Its PCs are split into M_h
// runs of consecutive PCs whose lengths differ by at most one; run g is the
// physical chunk set PCS(g) of the rank's VC g. PC, VC and slot ids are
// global and rank-major, like file ids.
type Mapping struct {
	k     int
	ranks []rankMap
	files int
	pcs   int
	vcs   int
	sized bool // some rank lists its PCs
}

// NewMapping builds the mapping of d.
func NewMapping(d Dataset) (*Mapping, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	m := &Mapping{k: d.K, ranks: make([]rankMap, len(d.Shards))}
	for r, s := range d.Shards {
		pcs := (s.Files + d.K - 1) / d.K
		var pcFirst []int
		if s.Chunks != nil {
			pcs, pcFirst = len(s.Chunks), make([]int, 0, len(s.Chunks)+1)
			n := 0
			for _, c := range s.Chunks {
				pcFirst, n = append(pcFirst, n), n+c
			}
			pcFirst = append(pcFirst, n)
			m.sized = true
		}
		m.ranks[r] = rankMap{
			firstFile: FileID(m.files), files: s.Files,
			firstPC: m.pcs, pcs: pcs,
			firstVC: m.vcs, vcs: vcCount(s, d.K, pcs),
			memBytes: s.MemBytes, bytes: s.Bytes, pcFirst: pcFirst,
		}
		m.files += s.Files
		m.pcs += pcs
		m.vcs += m.ranks[r].vcs
	}
	return m, nil
}

// vcCount is M for a shard: as many VCs of K mean-sized files as the budget
// holds, at least one (when the rank has files) and at most one per PC.
func vcCount(s Shard, k, pcs int) int {
	if pcs == 0 {
		return 0
	}
	if s.Bytes == 0 {
		return pcs
	}
	chunk := float64(k) * float64(s.Bytes) / float64(s.Files)
	if s.Chunks != nil {
		chunk = float64(s.Bytes) / float64(pcs)
	}
	m := int(float64(s.MemBytes) / chunk)
	return min(max(m, 1), pcs)
}

// Sized says whether PCs hold other numbers of files than K (chunks cut
// by size): then K is the most a PC holds.
func (m *Mapping) Sized() bool { return m.sized }

// local returns rank rm's PC holding its file li (rank-local) and li's
// offset in it.
func (rm *rankMap) local(li, k int) (pc, slot int) {
	if rm.pcFirst == nil {
		return li / k, li % k
	}
	pc = sort.SearchInts(rm.pcFirst, li+1) - 1
	return pc, li - rm.pcFirst[pc]
}

// pcStart returns the rank-local first file of rank rm's PC pc (pc may be
// its PC count: the end).
func (rm *rankMap) pcStart(pc, k int) int {
	if rm.pcFirst == nil {
		return min(pc*k, rm.files)
	}
	return rm.pcFirst[pc]
}

// K returns the number of files per chunk.
func (m *Mapping) K() int { return m.k }

// Ranks returns the number of ranks.
func (m *Mapping) Ranks() int { return len(m.ranks) }

// Files returns the number of files of the dataset.
func (m *Mapping) Files() int { return m.files }

// PCs returns the number of physical chunks of the dataset.
func (m *Mapping) PCs() int { return m.pcs }

// VCs returns the number of virtual chunks over all ranks.
func (m *Mapping) VCs() int { return m.vcs }

// RankFiles returns the first file id of rank r and its number of files.
func (m *Mapping) RankFiles(r int) (first FileID, n int) {
	return m.ranks[r].firstFile, m.ranks[r].files
}

// RankPCs returns the first PC id of rank r and its number of PCs.
func (m *Mapping) RankPCs(r int) (first, n int) { return m.ranks[r].firstPC, m.ranks[r].pcs }

// RankVCs returns the first VC id of rank r and its number of VCs.
func (m *Mapping) RankVCs(r int) (first, n int) { return m.ranks[r].firstVC, m.ranks[r].vcs }

// MemBytes returns rank r's budget for its local VCs in bytes.
func (m *Mapping) MemBytes(r int) int64 { return m.ranks[r].memBytes }

// ShardBytes returns the bytes stored on rank r.
func (m *Mapping) ShardBytes(r int) int64 { return m.ranks[r].bytes }

// Home returns the rank that stores f.
func (m *Mapping) Home(f FileID) int {
	return sort.Search(len(m.ranks), func(r int) bool {
		rm := &m.ranks[r]
		return int(f) < int(rm.firstFile)+rm.files
	})
}

// PC returns the global id of the physical chunk holding f.
func (m *Mapping) PC(f FileID) int {
	rm := &m.ranks[m.Home(f)]
	pc, _ := rm.local(int(f-rm.firstFile), m.k)
	return rm.firstPC + pc
}

// Slot returns O(f), the offset of f inside its physical chunk.
func (m *Mapping) Slot(f FileID) int {
	rm := &m.ranks[m.Home(f)]
	_, slot := rm.local(int(f-rm.firstFile), m.k)
	return slot
}

// VC returns the global id of the virtual chunk f is mapped to.
func (m *Mapping) VC(f FileID) int { return m.VCOfPC(m.PC(f)) }

// VCOfPC returns the global id of the virtual chunk PC pc is mapped to.
func (m *Mapping) VCOfPC(pc int) int {
	h := m.pcHome(pc)
	rm := &m.ranks[h]
	return rm.firstVC + groupOf(pc-rm.firstPC, rm.vcs, rm.pcs)
}

// PCS returns the physical chunk set of VC v as the range [first, end) of
// global PC ids.
func (m *Mapping) PCS(v int) (first, end int) {
	rm := &m.ranks[m.vcHome(v)]
	g := v - rm.firstVC
	return rm.firstPC + groupStart(g, rm.vcs, rm.pcs), rm.firstPC + groupStart(g+1, rm.vcs, rm.pcs)
}

// PCFiles returns the files of PC pc as the range [first, end) of file ids.
func (m *Mapping) PCFiles(pc int) (first, end FileID) {
	rm := &m.ranks[m.pcHome(pc)]
	j := pc - rm.firstPC
	return rm.firstFile + FileID(rm.pcStart(j, m.k)), rm.firstFile + FileID(rm.pcStart(j+1, m.k))
}

// GlobalSlot returns the index of f's memory slot among all slots of all
// VCs: VC(f)×K + O(f).
func (m *Mapping) GlobalSlot(f FileID) int { return m.VC(f)*m.k + m.Slot(f) }

func (m *Mapping) pcHome(pc int) int {
	return sort.Search(len(m.ranks), func(r int) bool {
		return pc < m.ranks[r].firstPC+m.ranks[r].pcs
	})
}

func (m *Mapping) vcHome(v int) int {
	return sort.Search(len(m.ranks), func(r int) bool {
		return v < m.ranks[r].firstVC+m.ranks[r].vcs
	})
}

// groupStart is the first PC (rank-local) of group g when pcs PCs are split
// into vcs runs: floor(g × pcs / vcs).
func groupStart(g, vcs, pcs int) int { return int(int64(g) * int64(pcs) / int64(vcs)) }

// groupOf is the inverse of groupStart: the largest g with groupStart(g) ≤ j.
func groupOf(j, vcs, pcs int) int { return int((int64(j)*int64(vcs) + int64(vcs) - 1) / int64(pcs)) }

// Locate returns the home rank of f and f's slot among that rank's local
// slots: (VC(f) − first VC of the rank) × K + O(f).
func (m *Mapping) Locate(f FileID) (home int, slot int32) {
	home = m.Home(f)
	rm := &m.ranks[home]
	pc, o := rm.local(int(f-rm.firstFile), m.k)
	return home, int32(groupOf(pc, rm.vcs, rm.pcs)*m.k + o)
}
