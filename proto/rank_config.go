package proto

import (
	"errors"
	"fmt"
)

// Config configures one rank's state machine.
type Config struct {
	// Rank is this rank's number, 0 ≤ Rank < Mapping.Ranks().
	Rank int
	// Mapping is the dataset's static mapping, shared by all ranks.
	Mapping *Mapping
	// Sizes holds the size in bytes of each of this rank's files, in
	// file order; their sum is the shard's Bytes.
	Sizes []int64
	// Variant selects the protocol's optimizations.
	Variant Variant
	// Window is P, the number of upcoming trace positions of a requester
	// (those whose home is this rank) an owner considers for prefetch.
	// 0 turns prefetch off.
	Window int
	// RemoteMemBytes bounds the bytes of files other ranks pushed to this
	// rank (its buffer VCs). Each owner is granted an equal share.
	RemoteMemBytes int64
	// Seed drives every random choice (refill tie-breaks).
	Seed uint64
	// Redirect picks the slot that answers a request; nil means SameSlot.
	Redirect Redirector
}

// DefaultConfig returns the defaults: the full protocol with a window of
// 64 positions; the caller sets Rank, Mapping, Sizes and RemoteMemBytes.
func DefaultConfig() Config {
	return Config{Variant: Full, Window: 64}
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	if c.Mapping == nil {
		return errors.New("proto: config has no mapping")
	}
	var errs []error
	if c.Mapping.Sized() {
		errs = append(errs, fmt.Errorf("proto: the paper's policy needs chunks of K = %d files each, and these chunks were cut by size (pack with --chunk-files alone)", c.Mapping.K()))
	}
	if c.Rank < 0 || c.Rank >= c.Mapping.Ranks() {
		errs = append(errs, fmt.Errorf("proto: rank %d out of range [0, %d)", c.Rank, c.Mapping.Ranks()))
	} else {
		errs = append(errs, c.validateSizes())
	}
	if int(c.Variant) >= len(variantNames) {
		errs = append(errs, fmt.Errorf("proto: unknown variant %d", c.Variant))
	}
	if c.Window < 0 {
		errs = append(errs, fmt.Errorf("proto: window %d, want ≥ 0", c.Window))
	}
	if c.RemoteMemBytes < 0 {
		errs = append(errs, fmt.Errorf("proto: remote memory %d bytes, want ≥ 0", c.RemoteMemBytes))
	}
	return errors.Join(errs...)
}

func (c Config) validateSizes() error {
	_, n := c.Mapping.RankFiles(c.Rank)
	if len(c.Sizes) != n {
		return fmt.Errorf("proto: rank %d: %d sizes for %d files", c.Rank, len(c.Sizes), n)
	}
	var sum int64
	for i, s := range c.Sizes {
		if s < 0 {
			return fmt.Errorf("proto: rank %d: file %d has size %d", c.Rank, i, s)
		}
		sum += s
	}
	if want := c.Mapping.ShardBytes(c.Rank); sum != want {
		return fmt.Errorf("proto: rank %d: sizes sum to %d bytes, shard says %d", c.Rank, sum, want)
	}
	return nil
}
