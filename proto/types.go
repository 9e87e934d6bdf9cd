package proto

import (
	"fmt"
	"strings"
)

// FileID identifies a file of the dataset. Files are numbered rank-major:
// the files stored on rank 0 first, then those of rank 1, and so on, each
// rank's files in the order of its shard (the order of its physical chunks).
type FileID int32

// NoFile is the FileID that names no file.
const NoFile FileID = -1

// MaxFiles is the largest number of files a dataset may hold.
const MaxFiles = 1<<31 - 1

// MaxEpochs is the most epochs a job or a simulation runs: epochs are
// numbered from 1 in a uint32, and a loop over them needs a number past
// the last.
const MaxEpochs = 1<<31 - 1

// Variant selects the optimizations of the protocol, as in the breakdown of
// Redox §5.3.
type Variant uint8

// The four variants. Full is the protocol; the other three each turn one or
// both of its optimizations off.
const (
	// Full refills the chunk that fills most empty slots and prefetches.
	Full Variant = iota
	// RandomSelection refills a random eligible chunk and prefetches.
	RandomSelection
	// NoPrefetching refills the chunk that fills most slots; no prefetch.
	NoPrefetching
	// NoOptimization refills a random eligible chunk; no prefetch.
	NoOptimization
)

// Variants lists every variant, in the order reports print them.
var Variants = []Variant{Full, RandomSelection, NoPrefetching, NoOptimization}

var variantNames = [...]string{"full", "random-selection", "no-prefetching", "no-optimization"}

// String returns the variant's name as the CLI spells it.
func (v Variant) String() string { return enumName(v, variantNames[:], "variant") }

// ParseVariant returns the variant named s.
func ParseVariant(s string) (Variant, error) {
	for i, n := range variantNames {
		if s == n {
			return Variant(i), nil
		}
	}
	return 0, fmt.Errorf("proto: unknown variant %q (want one of %s)", s, strings.Join(variantNames[:], ", "))
}

// MaxFill reports whether refills pick the chunk that fills the most empty
// slots; otherwise they pick uniformly among the eligible chunks.
func (v Variant) MaxFill() bool { return v == Full || v == NoPrefetching }

// Prefetch reports whether owners push upcoming files along with replies.
func (v Variant) Prefetch() bool { return v == Full || v == RandomSelection }
