package chunk

import (
	"fmt"
	"slices"
	"strconv"
)

// Summary describes a dataset for `brandrt inspect`.
type Summary struct {
	Manifest *Manifest
	// Sizes summarises the file sizes of the ranks present.
	Sizes SizeStats
	// ClassFiles counts the files of each label (of the ranks present).
	ClassFiles []int64
	// Unlabelled counts files without a label.
	Unlabelled int64
	// Present lists the ranks whose directory is in the dataset directory.
	Present []int
}

// SizeStats are quantiles of the file sizes in bytes.
type SizeStats struct {
	Min, P50, P90, P99, Max int64
	Mean                    float64
}

// Summarize reads the manifest and the index of every rank present in dir.
func Summarize(fsys FS, dir string) (*Summary, error) {
	m, err := ReadManifest(fsys, dir)
	if err != nil {
		return nil, err
	}
	s := &Summary{Manifest: m, ClassFiles: make([]int64, len(m.Classes))}
	var sizes []int64
	for r := range m.Shards {
		ix, err := OpenIndex(fsys, join(dir, RankDir(r)), r)
		if err != nil {
			if _, serr := fsys.Stat(join(dir, RankDir(r))); serr != nil {
				continue // not on this node
			}
			return nil, err
		}
		s.Present = append(s.Present, r)
		for i := 0; i < ix.Len(); i++ {
			e := ix.Entry(i)
			sizes = append(sizes, int64(e.Size))
			switch {
			case e.Label < 0:
				s.Unlabelled++
			case int(e.Label) < len(s.ClassFiles):
				s.ClassFiles[e.Label]++
			}
		}
		_ = ix.Close()
	}
	s.Sizes = sizeStats(sizes)
	return s, nil
}

func sizeStats(sizes []int64) SizeStats {
	if len(sizes) == 0 {
		return SizeStats{}
	}
	slices.Sort(sizes)
	q := func(p float64) int64 { return sizes[int(p*float64(len(sizes)-1))] }
	var sum float64
	for _, v := range sizes {
		sum += float64(v)
	}
	return SizeStats{Min: sizes[0], P50: q(0.5), P90: q(0.9), P99: q(0.99), Max: sizes[len(sizes)-1], Mean: sum / float64(len(sizes))}
}

// Each calls fn with the entry of every file of the dataset in dir, in
// file id order, and stops at fn's first error.
func Each(fsys FS, dir string, fn func(Entry) error) error {
	m, err := ReadManifest(fsys, dir)
	if err != nil {
		return err
	}
	for r := range m.Shards { // ranks hold consecutive runs of ids
		ix, err := OpenIndex(fsys, join(dir, RankDir(r)), r)
		if err != nil {
			return err
		}
		for i := 0; i < ix.Len() && err == nil; i++ {
			err = fn(ix.Entry(i))
		}
		_ = ix.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// Find returns the entry of the file named by what: a file id, or the
// path the file had in the input.
func Find(fsys FS, dir string, what string) (Entry, error) {
	m, err := ReadManifest(fsys, dir)
	if err != nil {
		return Entry{}, err
	}
	if id, err := strconv.ParseInt(what, 10, 64); err == nil {
		return findID(fsys, dir, m, id)
	}
	for r := range m.Shards {
		ix, err := OpenIndex(fsys, join(dir, RankDir(r)), r)
		if err != nil {
			continue
		}
		for i := 0; i < ix.Len(); i++ {
			if e := ix.Entry(i); e.Path == what {
				_ = ix.Close()
				return e, nil
			}
		}
		_ = ix.Close()
	}
	return Entry{}, fmt.Errorf("chunk: no file %q in %s (give a file id or a path as in the input)", what, dir)
}

func findID(fsys FS, dir string, m *Manifest, id int64) (Entry, error) {
	for r, s := range m.Shards {
		if id < s.FirstFile || id >= s.FirstFile+s.Files {
			continue
		}
		ix, err := OpenIndex(fsys, join(dir, RankDir(r)), r)
		if err != nil {
			return Entry{}, err
		}
		defer ix.Close()
		return ix.Entry(int(id - s.FirstFile)), nil
	}
	return Entry{}, fmt.Errorf("chunk: no file %d: the dataset has files 0 to %d", id, m.Files-1)
}

// Extract reads one file, checking its checksum, and returns its bytes.
func Extract(fsys FS, dir string, e Entry) ([]byte, error) {
	s, err := OpenShard(fsys, dir, e.Rank)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	ch, err := s.ReadSlots(e.Chunk, []int{e.Slot})
	if err != nil {
		return nil, err
	}
	defer ch.Release()
	return slices.Clone(ch.File(e.Slot)), nil
}
