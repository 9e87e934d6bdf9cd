package chunk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// A chunk file holds the files of one physical chunk, contiguously:
//
//	off  size field
//	  0     8 magic "BRTCHUNK"
//	  8     4 format version (1)
//	 12     4 rank
//	 16     4 chunk: index among the rank's chunks
//	 20     4 n: files in the chunk (1..K)
//	 24     8 global id of the chunk's first file
//	 32     8 total length of the chunk file in bytes
//	 40     4 CRC32C of bytes [0, 64+16n) with this field zero
//	 44    20 zero
//	 64 16×n offset table: per file, offset u64 (from the start of the
//	        file), size u32, CRC32C u32 of its bytes
//	        the files' bytes, in slot order, back to back
//
// All integers are little-endian. A whole-chunk read reads [0, length) in
// one sequential request.
const (
	chunkMagic    = "BRTCHUNK"
	chunkVersion  = 1
	chunkHeader   = 64
	tableEntry    = 16
	headerCRCAt   = 40
	chunkLengthAt = 32
)

// MaxFileSize is the largest file the format stores: 1 GiB. Larger files
// are not the small files brandrt is for.
const MaxFileSize = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksum returns the CRC32C of b.
// Checksum returns the CRC32C (Castagnoli) of b, the checksum chunk files
// and the index keep for every file.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// ChunkHeader is the decoded header and offset table of a chunk file.
type ChunkHeader struct {
	Rank      int
	Chunk     int
	FirstFile int64
	Length    int64
	Files     []FileExtent
}

// FileExtent locates one file inside its chunk file.
type FileExtent struct {
	Offset int64
	Size   uint32
	CRC    uint32
}

// HeaderSize returns the size of the header and table of a chunk of n files.
func HeaderSize(n int) int64 { return chunkHeader + tableEntry*int64(n) }

// encodeHeader returns the header and table of h.
func encodeHeader(h *ChunkHeader) []byte {
	le := binary.LittleEndian
	b := make([]byte, HeaderSize(len(h.Files)))
	copy(b, chunkMagic)
	le.PutUint32(b[8:], chunkVersion)
	le.PutUint32(b[12:], uint32(h.Rank))
	le.PutUint32(b[16:], uint32(h.Chunk))
	le.PutUint32(b[20:], uint32(len(h.Files)))
	le.PutUint64(b[24:], uint64(h.FirstFile))
	le.PutUint64(b[chunkLengthAt:], uint64(h.Length))
	for i, e := range h.Files {
		t := b[chunkHeader+tableEntry*i:]
		le.PutUint64(t, uint64(e.Offset))
		le.PutUint32(t[8:], e.Size)
		le.PutUint32(t[12:], e.CRC)
	}
	le.PutUint32(b[headerCRCAt:], Checksum(b))
	return b
}

// errCorrupt is wrapped by every error about bytes that are not what the
// format promises.
var errCorrupt = errors.New("corrupt")

// ErrCorrupt reports whether err says that stored bytes are damaged.
func ErrCorrupt(err error) bool { return errors.Is(err, errCorrupt) }

// decodeHeader parses the header and table at the start of b, which must
// hold at least HeaderSize(n) bytes, and checks them against what the
// index expects: rank, chunk and number of files.
func decodeHeader(b []byte, rank, chunk, files int) (*ChunkHeader, error) {
	le := binary.LittleEndian
	if len(b) < chunkHeader || string(b[:8]) != chunkMagic {
		return nil, fmt.Errorf("%w: not a chunk file (bad magic)", errCorrupt)
	}
	if v := le.Uint32(b[8:]); v != chunkVersion {
		return nil, fmt.Errorf("chunk format version %d, this brandrt reads %d", v, chunkVersion)
	}
	n := int(le.Uint32(b[20:]))
	if n != files || int64(len(b)) < HeaderSize(n) {
		return nil, fmt.Errorf("%w: header says %d files, index says %d", errCorrupt, n, files)
	}
	hb := append([]byte(nil), b[:HeaderSize(n)]...)
	want := le.Uint32(hb[headerCRCAt:])
	le.PutUint32(hb[headerCRCAt:], 0)
	if got := Checksum(hb); got != want {
		return nil, fmt.Errorf("%w: header checksum %08x, stored %08x", errCorrupt, got, want)
	}
	h := &ChunkHeader{Rank: int(le.Uint32(b[12:])), Chunk: int(le.Uint32(b[16:])),
		FirstFile: int64(le.Uint64(b[24:])), Length: int64(le.Uint64(b[chunkLengthAt:])), Files: make([]FileExtent, n)}
	if h.Rank != rank || h.Chunk != chunk {
		return nil, fmt.Errorf("%w: header names shard %d chunk %d", errCorrupt, h.Rank, h.Chunk)
	}
	end := HeaderSize(n)
	for i := range h.Files {
		t := b[chunkHeader+tableEntry*i:]
		e := FileExtent{Offset: int64(le.Uint64(t)), Size: le.Uint32(t[8:]), CRC: le.Uint32(t[12:])}
		if e.Offset != end || e.Size > MaxFileSize {
			return nil, fmt.Errorf("%w: slot %d at offset %d size %d, expected offset %d", errCorrupt, i, e.Offset, e.Size, end)
		}
		end += int64(e.Size)
		h.Files[i] = e
	}
	if end != h.Length {
		return nil, fmt.Errorf("%w: files end at %d, header says length %d", errCorrupt, end, h.Length)
	}
	return h, nil
}

// crc32Update extends a CRC32C with more bytes.
func crc32Update(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }
