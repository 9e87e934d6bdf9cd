package stage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/brandrt/brandrt/chunk"
)

// MarkerName is the marker's file name in the copy's directory.
const MarkerName = "stage.json"

const markerFormat = "brandrt-stage"

// marker records what a copy was verified to hold. A copy's directory
// gets it last, before it is renamed into place.
type marker struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Source is the source's directory, resolved; Rank the shard (named
	// so in the markers of earlier versions).
	Source string `json:"source"`
	Rank   int    `json:"rank"`
	// ManifestCRC and ManifestBytes identify the source's manifest,
	// which the copy holds byte for byte.
	ManifestCRC   uint32 `json:"manifest_crc32c"`
	ManifestBytes int64  `json:"manifest_bytes"`
	// IndexCRC is the checksum of the index's records (the manifest's
	// index_crc32c); Chunks the chunk files and Bytes the copy's size.
	IndexCRC uint32    `json:"index_crc32c"`
	Chunks   int       `json:"chunks"`
	Bytes    int64     `json:"bytes"`
	Verified time.Time `json:"verified"`
}

// want returns the marker a copy of the shard has: of the source whose
// manifest the stage read.
func (sc *shardCopy) want() marker {
	s := sc.st
	sh := s.man.Shards[sc.shard]
	return marker{Format: markerFormat, Version: 1, Source: s.src, Rank: sc.shard,
		ManifestCRC: chunk.Checksum(s.data), ManifestBytes: int64(len(s.data)),
		IndexCRC: sh.IndexCRC, Chunks: sh.Chunks, Bytes: copySize(s.man, sc.shard, int64(len(s.data)))}
}

// differs says how the marker of a copy, got, differs from want, or "".
func (got marker) differs(want marker) string {
	switch {
	case got.Format != want.Format || got.Version != want.Version:
		return fmt.Sprintf("its marker is format %q version %d, this brandrt writes %q version %d", got.Format, got.Version, want.Format, want.Version)
	case got.Source != want.Source || got.Rank != want.Rank:
		return fmt.Sprintf("its marker says it is shard %d of %s", got.Rank, got.Source)
	case got.ManifestCRC != want.ManifestCRC || got.ManifestBytes != want.ManifestBytes:
		return fmt.Sprintf("the source changed since the copy was made: its manifest has %d bytes with CRC32C %08x, the copy's had %d bytes with %08x",
			want.ManifestBytes, want.ManifestCRC, got.ManifestBytes, got.ManifestCRC)
	case got.IndexCRC != want.IndexCRC || got.Chunks != want.Chunks || got.Bytes != want.Bytes:
		return fmt.Sprintf("its marker records index checksum %08x, %d chunk files and %d bytes, the manifest %08x, %d and %d",
			got.IndexCRC, got.Chunks, got.Bytes, want.IndexCRC, want.Chunks, want.Bytes)
	}
	return ""
}

// readMarker reads the marker of the copy in dir.
func readMarker(fsys chunk.FS, dir string) (marker, error) {
	data, err := readSmall(fsys, filepath.Join(dir, MarkerName))
	if err != nil {
		return marker{}, err
	}
	var mk marker
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&mk); err != nil {
		return marker{}, fmt.Errorf("%s: %w", filepath.Join(dir, MarkerName), err)
	}
	return mk, nil
}

// readSmall reads a file of at most a few megabytes whole.
func readSmall(fsys chunk.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name, false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.NewSectionReader(f, 0, 1<<30))
}

// writeMarker writes mk into the copy in dir.
func (s *stager) writeMarker(dir string, mk marker) error {
	mk.Verified = time.Now().UTC()
	data, err := json.MarshalIndent(mk, "", "  ")
	if err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	return s.writeFile(filepath.Join(dir, MarkerName), append(data, '\n'))
}

// reuse decides whether the copy already in place, if any, can be
// reused: its marker matches the source's manifest, it holds that
// manifest, and it verifies. Otherwise it says why not ("" when there
// is no copy), and notes whether the copy is damaged rather than out of
// date or unfinished. The error is for an interrupted verification.
func (sc *shardCopy) reuse() (bool, string, error) {
	fsys := sc.st.cfg.FS
	if _, err := fsys.Lstat(sc.dir); errors.Is(err, os.ErrNotExist) {
		return false, "", nil
	}
	mk, err := readMarker(fsys, sc.dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, fmt.Sprintf("%s has no marker (%s): brandrt stage did not make it, or did not finish", sc.dir, MarkerName), nil
	} else if err != nil {
		sc.damaged = true
		return false, fmt.Sprintf("its marker cannot be read: %v", err), nil
	}
	want := sc.want()
	if why := mk.differs(want); why != "" {
		return false, why, nil
	}
	sc.damaged = true
	local, err := readSmall(fsys, filepath.Join(sc.dir, chunk.ManifestName))
	if err != nil {
		return false, fmt.Sprintf("its manifest cannot be read: %v", err), nil
	}
	if !bytes.Equal(local, sc.st.data) {
		return false, fmt.Sprintf("%s differs from the source's", filepath.Join(sc.dir, chunk.ManifestName)), nil
	}
	probs, err := sc.verify(sc.dir)
	if err != nil || len(probs) > 0 {
		return false, describe(probs), err
	}
	sc.damaged = false
	sc.res.Bytes = want.Bytes
	return true, "", nil
}
