package chunk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
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
	// K is the number of files per chunk; Ranks the number of shards.
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
	if m.Format != manifestFormat || m.Version != 1 {
		return fmt.Errorf("format %q version %d, this brandrt reads %q version 1", m.Format, m.Version, manifestFormat)
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
	if want := (s.Files + int64(m.K) - 1) / int64(m.K); int64(s.Chunks) != want {
		p.add("%w: K=%d but shard %d has %d chunks for its %d files (chunks of %d files make %d)",
			errCorrupt, m.K, r, s.Chunks, s.Files, m.K, want)
	}
}
