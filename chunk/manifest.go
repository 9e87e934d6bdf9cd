package chunk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"strconv"
	"strings"
	"time"
)

// ManifestName is the dataset manifest's file name in the chunk
// directory. Its presence marks a complete dataset: pack writes it last.
const ManifestName = "manifest.json"

const manifestFormat = "brandrt-chunks"

// Manifest describes a packed dataset.
type Manifest struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// K is the number of files per chunk, or with Params.ChunkBytes the
	// most files a chunk holds; Ranks the number of shards.
	K     int    `json:"k"`
	Ranks int    `json:"ranks"`
	Seed  uint64 `json:"seed"`
	// Files and Bytes count the whole dataset.
	Files int64 `json:"files"`
	Bytes int64 `json:"bytes"`
	// Classes names the labels (label i is Classes[i]); empty when the
	// input had no class directories.
	Classes []string    `json:"classes"`
	Created time.Time   `json:"created"`
	Params  PackParams  `json:"params"`
	Shards  []ShardInfo `json:"shards"`
}

// PackParams records how the dataset was packed.
type PackParams struct {
	Input    string `json:"input"`
	Manifest string `json:"manifest,omitempty"`
	Layout   string `json:"layout"`
	Workers  int    `json:"workers"`
	Symlinks string `json:"symlinks"`
	// ChunkBytes, when set, is the most bytes a chunk holds, unless it
	// holds a single larger file: chunks were cut by size (version 2 of
	// the format; each shard lists its chunks' files). Unset, every chunk
	// holds K files but the last (version 1).
	ChunkBytes int64 `json:"chunk_bytes,omitempty"`
}

// ShardInfo describes one rank's shard.
type ShardInfo struct {
	Rank      int    `json:"rank"`
	FirstFile int64  `json:"first_file"`
	Files     int64  `json:"files"`
	Bytes     int64  `json:"bytes"`
	Chunks    int    `json:"chunks"`
	IndexCRC  uint32 `json:"index_crc32c"`
	IndexSize int64  `json:"index_bytes"`
	// ChunkFiles lists the files of the shard's chunks, in chunks cut by
	// size (PackParams.ChunkBytes).
	ChunkFiles ChunkRuns `json:"chunk_files,omitempty"`
}

// ChunkRuns lists the files of a shard's chunks in chunk order, as runs:
// {files, chunks} is chunks chunks in a row of files files each. In JSON
// it is one string, runs apart by spaces, "FILESxCHUNKS" or "FILES" for
// one chunk: "64x30 17 64x2".
type ChunkRuns [][2]int

// MarshalJSON writes the runs as one string.
func (r ChunkRuns) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	for i, run := range r {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(run[0]))
		if run[1] != 1 {
			b.WriteString("x" + strconv.Itoa(run[1]))
		}
	}
	return json.Marshal(b.String())
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *ChunkRuns) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	*r = nil
	for _, tok := range strings.Fields(s) {
		files, chunks, many := strings.Cut(tok, "x")
		f, err := strconv.Atoi(files)
		c := 1
		if err == nil && many {
			c, err = strconv.Atoi(chunks)
		}
		if err != nil {
			return fmt.Errorf("chunk files %q: %q is not FILES or FILESxCHUNKS", s, tok)
		}
		*r = append(*r, [2]int{f, c})
	}
	return nil
}

// add appends a chunk of files files.
func (r ChunkRuns) add(files int) ChunkRuns {
	if n := len(r); n > 0 && r[n-1][0] == files {
		r[n-1][1]++
		return r
	}
	return append(r, [2]int{files, 1})
}

// ChunkFiles returns the number of files of each chunk of shard r.
func (m *Manifest) ChunkFiles(r int) []int {
	s := m.Shards[r]
	out := make([]int, 0, s.Chunks)
	if m.Params.ChunkBytes == 0 {
		for left := int(s.Files); left > 0; left -= m.K {
			out = append(out, min(left, m.K))
		}
		return out
	}
	for _, run := range s.ChunkFiles {
		for range run[1] {
			out = append(out, run[0])
		}
	}
	return out
}

// RankChunks returns, for chunks cut by size, the files of each chunk
// that each rank serves when rank r serves shards [homes[r], homes[r+1])
// (Assign); nil for chunks of K files.
func (m *Manifest) RankChunks(homes []int) [][]int {
	if m.Params.ChunkBytes == 0 {
		return nil
	}
	out := make([][]int, len(homes)-1)
	for r := range out {
		for s := homes[r]; s < homes[r+1]; s++ {
			out[r] = append(out[r], m.ChunkFiles(s)...)
		}
	}
	return out
}

// ChunksAgree says whether index ix holds the chunks the manifest says
// shard r has: as many, of as many files each.
func (m *Manifest) ChunksAgree(ix *Index, r int) bool {
	files := m.ChunkFiles(r)
	if ix.Chunks() != len(files) {
		return false
	}
	for c, n := range files {
		if ix.ChunkFiles(c) != n {
			return false
		}
	}
	return true
}

// formatVersion is the manifest's version: 2 for chunks cut by size.
func formatVersion(p PackParams) int {
	if p.ChunkBytes > 0 {
		return 2
	}
	return 1
}

// RankDir returns the name of rank r's directory.
func RankDir(r int) string { return fmt.Sprintf("rank-%05d", r) }

// ChunkName returns the file name of chunk c inside its rank directory.
func ChunkName(c int) string { return fmt.Sprintf("chunk-%08d.brc", c) }

// IndexName is the file name of a rank's index inside its rank directory.
const IndexName = indexName

// Hash returns a 64-bit FNV-1a hash of the manifest's encoding: ranks
// compare it to check they serve the same dataset.
func (m *Manifest) Hash() uint64 {
	h := fnv.New64a()
	_ = json.NewEncoder(h).Encode(m)
	return h.Sum64()
}

// ReadManifest reads and checks the manifest of the dataset in dir. A
// manifest that cannot be opened or read is a StorageError (see
// Unreachable), one whose bytes are wrong is not.
func ReadManifest(fsys FS, dir string) (*Manifest, error) {
	name := join(dir, ManifestName)
	f, err := fsys.Open(name, false)
	if err != nil {
		return nil, fmt.Errorf("chunk: %s is not a complete dataset: %w", dir, &StorageError{File: name, Op: "open", Err: UnwrapPath(err)})
	}
	defer f.Close()
	data, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<30))
	if err != nil {
		return nil, &StorageError{File: name, Op: "read", Err: UnwrapPath(err)}
	}
	return ParseManifest(data, name)
}

// ParseManifest decodes and checks the bytes of a manifest; errors name
// it name.
func ParseManifest(data []byte, name string) (*Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("chunk: %s: %w", name, err)
	}
	if err := m.check(); err != nil {
		return nil, prefixEach("chunk: "+name+": ", err)
	}
	return &m, nil
}

// prefixEach puts prefix before each error that err joins, or before err:
// one line per problem, each naming the file.
func prefixEach(prefix string, err error) error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return fmt.Errorf("%s%w", prefix, err)
	}
	var errs []error
	for _, e := range j.Unwrap() {
		errs = append(errs, fmt.Errorf("%s%w", prefix, e))
	}
	return errors.Join(errs...)
}

// check reports every inconsistency of the manifest it finds (up to
// maxProblems), each saying plainly which fields disagree. K is checked
// first, before anything sized by it.
func (m *Manifest) check() error {
	if m.Format != manifestFormat || m.Version < 1 || m.Version > 2 {
		return fmt.Errorf("format %q version %d, this brandrt reads %q versions 1 and 2", m.Format, m.Version, manifestFormat)
	}
	if m.Params.ChunkBytes < 0 || m.Version != formatVersion(m.Params) {
		return fmt.Errorf("%w: version %d with chunks of at most %d bytes (version 2 is for chunks cut by size, and only it)", errCorrupt, m.Version, m.Params.ChunkBytes)
	}
	if err := CheckK(m.K, m.Files); err != nil {
		return err
	}
	var p problems
	if m.Ranks < 1 {
		p.add("%w: %d ranks, want at least 1", errCorrupt, m.Ranks)
	} else if len(m.Shards) != m.Ranks {
		p.add("%w: %d ranks but %d shards listed", errCorrupt, m.Ranks, len(m.Shards))
	}
	var files, bytes int64
	for r, s := range m.Shards {
		if p.full() {
			break
		}
		m.checkShard(r, s, files, &p)
		files += s.Files
		bytes += s.Bytes
	}
	if files != m.Files || bytes != m.Bytes {
		p.add("%w: the shards hold %d files and %d bytes, but the totals say %d files and %d bytes", errCorrupt, files, bytes, m.Files, m.Bytes)
	}
	return p.err()
}

// checkShard checks shard r, which should start at file first.
func (m *Manifest) checkShard(r int, s ShardInfo, first int64, p *problems) {
	if s.Rank != r {
		p.add("%w: shard %d in the list says it is shard %d", errCorrupt, r, s.Rank)
	}
	if s.Files < 0 || s.Bytes < 0 {
		p.add("%w: shard %d has %d files and %d bytes", errCorrupt, r, s.Files, s.Bytes)
	}
	if s.FirstFile != first {
		p.add("%w: shard %d starts at file %d, but the shards before it hold %d files", errCorrupt, r, s.FirstFile, first)
	}
	if m.Params.ChunkBytes > 0 {
		m.checkRuns(r, s, p)
		return
	}
	if len(s.ChunkFiles) > 0 {
		p.add("%w: shard %d lists its chunks' files, but its chunks hold K=%d files each", errCorrupt, r, m.K)
	}
	if r < m.Ranks-1 && s.Files%int64(m.K) != 0 {
		p.add("%w: shard %d holds %d files, not whole chunks of K=%d, and is not the last", errCorrupt, r, s.Files, m.K)
	}
	if want := (s.Files + int64(m.K) - 1) / int64(m.K); int64(s.Chunks) != want {
		p.add("%w: K=%d but shard %d has %d chunks for its %d files (chunks of %d files make %d)",
			errCorrupt, m.K, r, s.Chunks, s.Files, m.K, want)
	}
}

// checkRuns checks the chunks that shard r lists against its counts.
func (m *Manifest) checkRuns(r int, s ShardInfo, p *problems) {
	var files, chunks int64
	for _, run := range s.ChunkFiles {
		if run[0] < 1 || run[0] > m.K || run[1] < 1 || int64(run[1]) > s.Files {
			p.add("%w: shard %d lists %d chunks of %d files (chunks hold 1 to K=%d files, and its %d files make at most as many chunks)", errCorrupt, r, run[1], run[0], m.K, s.Files)
			return
		}
		files, chunks = files+int64(run[0])*int64(run[1]), chunks+int64(run[1])
	}
	if files != s.Files || chunks != int64(s.Chunks) {
		p.add("%w: shard %d lists chunks of %d files in all, %d chunks, but holds %d files in %d chunks", errCorrupt, r, files, chunks, s.Files, s.Chunks)
	}
}
