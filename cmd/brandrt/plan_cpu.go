package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/brandrt/brandrt/rt"
)

// cpuCosts are the CPU seconds a node spends per file and per byte of an
// epoch, measured on the target machine (examples/bench/calibrate.py fits
// them from runs of the loader benchmark): the rank's, the storage
// client's and the training processes' that read through brandrt (the
// DataLoader's main process and workers); and what a node's link
// carries beyond the files it moves. `brandrt plan --cpu-costs` reads
// them from a JSON file.
type cpuCosts struct {
	// RankFile is the rank's CPU per position it answers, RankMovedFile
	// and RankMovedByte per file (and byte) it sends to or receives from
	// another rank, ReadByte the rank's and the storage client's per byte
	// read from storage.
	RankFile      float64 `json:"rank_s_per_file"`
	RankMovedFile float64 `json:"rank_s_per_moved_file"`
	RankMovedByte float64 `json:"rank_s_per_moved_byte"`
	ReadByte      float64 `json:"read_s_per_byte"`
	// RankStart is the rank's CPU in its first epoch besides its files
	// (opening the dataset, planning, MPI's start), RankFilledByte per
	// byte of memory the first epoch fills (its budget, or its shard
	// where that is less): the pages' first touch, and the page cache the
	// kernel reclaims to make room for them.
	RankStart      float64 `json:"rank_s_start"`
	RankFilledByte float64 `json:"rank_s_per_filled_byte"`
	// ClientFile is the training processes' CPU per file they take from
	// the rank; ClientByte per byte of a file that reaches the training
	// process as a copy, through the DataLoader's pipe (files under 32
	// KiB: rt.RankForecast.HandableBytes), ClientHandedByte of one a
	// worker hands on in place with no bound on them (a single rank whose
	// budget holds its shard, without --hand-mem), ClientBoundedByte of
	// one it may hand on under a bound: past it, the files go as copies,
	// so this is between the two, as the calibration's training held
	// them. The last two are optional: without ClientHandedByte (no run
	// of the calibration handed files on with no bound) those bytes cost
	// ClientBoundedByte, or ClientByte without that either (a file
	// fitted before they were: every byte costs ClientByte); without
	// ClientBoundedByte, bytes under a bound cost ClientByte.
	ClientFile        float64  `json:"client_s_per_file"`
	ClientByte        float64  `json:"client_s_per_byte"`
	ClientHandedByte  *float64 `json:"client_s_per_handed_byte,omitempty"`
	ClientBoundedByte *float64 `json:"client_s_per_bounded_byte,omitempty"`
	// Busy is the share of its cores' time a node kept busy in the
	// calibration's epochs that its CPU bounded: the most of --cores the
	// model lets an epoch use.
	Busy float64 `json:"cores_busy"`
	// Start is the wall time from the job's launch to its ranks serving
	// (mpirun starting them, each opening its shard), which the first
	// epoch's time adds.
	Start float64 `json:"start_s"`
	// LinkFile and LinkByte are what a node's link carries beyond the
	// bytes of the files it moves, per file and per byte of them: the
	// messages' frames, MPI's headers, TCP/IP's, and the
	// acknowledgements that come back. Optional (0: the files' bytes
	// alone, as in a file fitted before they were).
	LinkFile float64 `json:"link_bytes_per_moved_file"`
	LinkByte float64 `json:"link_bytes_per_moved_byte"`
	memFills
	// Machine says where they were measured, for the reader.
	Machine string `json:"machine,omitempty"`
}

// readCPUCosts reads the costs file at path, naming the file and what is
// wrong with it.
func readCPUCosts(path string) (*cpuCosts, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-costs: %w", err)
	}
	var c cpuCosts
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("--cpu-costs %s: not a JSON object: %w", path, err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("--cpu-costs %s: %w", path, err)
	}
	var errs []error
	for _, f := range []struct {
		name string
		v    float64
	}{{"rank_s_per_file", c.RankFile}, {"rank_s_per_moved_file", c.RankMovedFile}, {"rank_s_per_moved_byte", c.RankMovedByte},
		{"read_s_per_byte", c.ReadByte}, {"rank_s_start", c.RankStart}, {"rank_s_per_filled_byte", c.RankFilledByte},
		{"client_s_per_file", c.ClientFile}, {"client_s_per_byte", c.ClientByte}, {"start_s", c.Start}} {
		switch _, ok := raw[f.name]; {
		case !ok:
			errs = append(errs, fmt.Errorf("no %q", f.name))
		case f.v < 0 || f.v > 60 || math.IsNaN(f.v):
			errs = append(errs, fmt.Errorf("%q is %g seconds, want 0 to 60", f.name, f.v))
		}
	}
	errs = append(errs, outOfRange(60, " seconds, want 0 to 60", optional{"client_s_per_handed_byte", c.ClientHandedByte},
		optional{"client_s_per_bounded_byte", c.ClientBoundedByte})...)
	errs = append(errs, c.memFills.check()...)
	if !(c.LinkFile >= 0 && c.LinkFile <= 1<<20) {
		errs = append(errs, fmt.Errorf(`"link_bytes_per_moved_file" is %g, want 0 to 1 MiB`, c.LinkFile))
	}
	if !(c.LinkByte >= 0 && c.LinkByte <= 1) {
		errs = append(errs, fmt.Errorf(`"link_bytes_per_moved_byte" is %g, want 0 to 1`, c.LinkByte))
	}
	if _, ok := raw["cores_busy"]; !ok {
		errs = append(errs, errors.New(`no "cores_busy"`))
	} else if !(c.Busy > 0 && c.Busy <= 1) {
		errs = append(errs, fmt.Errorf(`"cores_busy" is %g, want more than 0, up to 1`, c.Busy))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("--cpu-costs %s (examples/bench/calibrate.py writes it): %w", path, err)
	}
	return &c, nil
}

// seconds is the CPU a node spends on one rank's epoch: the rank's, its
// storage client's and its training processes' reading through it. The
// first epoch (filled: the bytes of memory it fills) adds the rank's
// start. handCap is the rank's bound on the files handed on in place
// (planned.HandCap: -1 none, 0 none handed on).
func (c *cpuCosts) seconds(rf rt.RankForecast, first bool, filled, handCap int64) float64 {
	moved := rf.SentFiles + rf.ReceivedFiles
	movedBytes := rf.SentBytes + rf.ReceivedBytes
	s := c.RankFile*float64(rf.Files) + c.RankMovedFile*float64(moved) + c.RankMovedByte*float64(movedBytes) +
		c.ReadByte*float64(rf.ReadBytes) + c.ClientFile*float64(rf.Files) + c.clientBytes(rf, handCap)
	if first {
		s += c.RankStart + c.RankFilledByte*float64(filled)
	}
	return s
}

// clientBytes is the training processes' CPU for the bytes of rf's files:
// copies, and those handed on in place, with no bound or under one.
func (c *cpuCosts) clientBytes(rf rt.RankForecast, handCap int64) float64 {
	handable := c.ClientByte
	if handCap != 0 && c.ClientBoundedByte != nil {
		handable = *c.ClientBoundedByte
	}
	if handCap < 0 && c.ClientHandedByte != nil {
		handable = *c.ClientHandedByte
	}
	return c.ClientByte*float64(rf.Bytes-rf.HandableBytes) + handable*float64(rf.HandableBytes)
}

// linkBytes is what a link carries to move files files of bytes bytes:
// their bytes, and what the costs add per file and per byte (none
// without costs).
func (c *cpuCosts) linkBytes(files, bytes int64) int64 {
	if c == nil {
		return bytes
	}
	return bytes + int64(math.Round(c.LinkFile*float64(files)+c.LinkByte*float64(bytes)))
}
