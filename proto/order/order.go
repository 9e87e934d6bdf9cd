// Package order writes and reads the delivered-order file of `brandrt
// serve --order-out` and `brandrt simulate --order-out`. Both write it
// with this package, so the same dataset, memory, ramp and seed give the
// same bytes:
//
//	# brandrt delivered order, policy window, seed 1: epoch rank sn file
//	1 0 0 4711
//	1 0 1 12
//	…
//
// one line per position after the header, epoch by epoch, rank by rank,
// position by position; file -1 is a position left unanswered.
package order

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/brandrt/brandrt/proto"
)

// Header is the file's first line: the policy (as simulate labels it:
// window, or paper and its variant) and the seed.
type Header struct {
	Policy string
	Seed   uint64
}

const (
	headPrefix = "# brandrt delivered order, policy "
	headSuffix = ": epoch rank sn file"
)

// Append appends the header line to b.
func (h Header) Append(b []byte) []byte {
	return fmt.Appendf(b, "%s%s, seed %d%s\n", headPrefix, h.Policy, h.Seed, headSuffix)
}

// Epoch is one epoch's order: Files[r][sn] answered position sn of rank
// r. A rank without positions writes no line, so the last ranks of an
// epoch read back may be missing when they had none.
type Epoch struct {
	Epoch int
	Files [][]proto.FileID
}

// Append appends the epoch's lines to b.
func (e Epoch) Append(b []byte) []byte {
	for r, fs := range e.Files {
		for sn, f := range fs {
			b = e.appendLine(b, r, sn, f)
		}
	}
	return b
}

// appendLine appends the line of position sn of rank r, answered by f.
func (e Epoch) appendLine(b []byte, r, sn int, f proto.FileID) []byte {
	b = strconv.AppendInt(b, int64(e.Epoch), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(r), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(sn), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(f), 10)
	return append(b, '\n')
}

// WriteTo writes the epoch's lines to w, as Append makes them, through a
// buffer of its own: what it holds is that buffer, whatever the epoch's
// size.
func (e Epoch) WriteTo(w io.Writer) (int64, error) {
	const flushAt = 60 << 10 // a line is at most 4 numbers of 20 digits and 4 bytes
	var n int64
	b := make([]byte, 0, 64<<10)
	for r, fs := range e.Files {
		for sn := range fs {
			b = e.appendLine(b, r, sn, fs[sn])
			if len(b) >= flushAt {
				m, err := w.Write(b)
				n += int64(m)
				if err != nil {
					return n, err
				}
				b = b[:0]
			}
		}
	}
	m, err := w.Write(b)
	return n + int64(m), err
}

// File is an order file read back.
type File struct {
	Header
	Epochs []Epoch
}

// Parse reads an order file; an error names the line and what is wrong
// with it. Epochs must come in increasing order, ranks in order within
// an epoch from 0, and positions in order within a rank from 0, as
// Append writes them.
func Parse(r io.Reader) (*File, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	var f File
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if line == 1 {
			h, err := parseHeader(text)
			if err != nil {
				return nil, fmt.Errorf("order: line 1: %w", err)
			}
			f.Header = h
			continue
		}
		if err := f.add(text); err != nil {
			return nil, fmt.Errorf("order: line %d: %w", line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("order: line %d: %w", line+1, err)
	}
	if line == 0 {
		return nil, fmt.Errorf("order: empty, no header")
	}
	return &f, nil
}

func parseHeader(text string) (Header, error) {
	rest, ok := strings.CutPrefix(text, headPrefix)
	rest, ok2 := strings.CutSuffix(rest, headSuffix)
	i := strings.LastIndex(rest, ", seed ")
	if !ok || !ok2 || i < 0 {
		return Header{}, fmt.Errorf("%q is not an order file's header (%q…)", text, headPrefix)
	}
	seed, err := strconv.ParseUint(rest[i+len(", seed "):], 10, 64)
	if err != nil || rest[:i] == "" {
		return Header{}, fmt.Errorf("header %q: no policy or no seed", text)
	}
	return Header{Policy: rest[:i], Seed: seed}, nil
}

// add takes one position's line.
func (f *File) add(text string) error {
	fields := strings.Fields(text)
	if len(fields) != 4 {
		return fmt.Errorf("%q: want 4 numbers, epoch rank sn file", text)
	}
	var v [4]int64
	for i, s := range fields {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return fmt.Errorf("%q: %q is not a number", text, s)
		}
		v[i] = n
	}
	e, r, sn, file := int(v[0]), int(v[1]), int(v[2]), proto.FileID(v[3])
	if n := len(f.Epochs); n == 0 || f.Epochs[n-1].Epoch != e {
		if n > 0 && e <= f.Epochs[n-1].Epoch {
			return fmt.Errorf("%q: epoch %d after epoch %d", text, e, f.Epochs[n-1].Epoch)
		}
		f.Epochs = append(f.Epochs, Epoch{Epoch: e})
	}
	ep := &f.Epochs[len(f.Epochs)-1]
	switch {
	case r >= len(ep.Files) && sn == 0: // ranks between without positions write no line
		for len(ep.Files) <= r {
			ep.Files = append(ep.Files, nil)
		}
	case r != len(ep.Files)-1:
		return fmt.Errorf("%q: rank %d after rank %d", text, r, len(ep.Files)-1)
	}
	fs := &ep.Files[r]
	if sn != len(*fs) {
		return fmt.Errorf("%q: position %d of rank %d where %d was due", text, sn, r, len(*fs))
	}
	if file < proto.NoFile {
		return fmt.Errorf("%q: file %d", text, file)
	}
	*fs = append(*fs, file)
	return nil
}
