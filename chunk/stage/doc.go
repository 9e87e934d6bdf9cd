// Package stage copies the shards one rank of a job serves from shared
// storage to node-local disk before the job reads them, and lets later
// jobs reuse those copies: the storage tiering of NoPFS and MONARCH,
// done once per node and dataset ahead of the first epoch rather than
// file by file during it.
//
// # Layout
//
// Stage puts the copy of shard s in Dir(Local, Source, s), a directory of
// the local directory named after the source's base name, a hash of its
// absolute path (symlinks resolved) and the shard, for example
// chunks-1f2e3d4c.rank-3. Two datasets, or two shards, never share one,
// and Pattern (chunks-1f2e3d4c.rank-{rank}) names every shard's copy at
// once, as serve --chunks takes it when each rank serves one shard. The
// directory is a node-local dataset as serve reads it: manifest.json (the
// source's, byte for byte) and the shard's rank-NNNNN/ (index and chunk
// files); other shards' directories are not copied. It also holds
// stage.json, the marker, which records what was verified: the source
// manifest's CRC32C and size, the index's checksum, the number of chunk
// files and the bytes of the copy.
//
// # Space
//
// Before it copies anything, Stage adds up what every shard it is to copy
// needs (the copies' bytes, and a block per file and directory) and
// refuses, writing nothing, when the local directory's free space is
// less, naming the shards, the space needed and the space free. Then it
// holds that room: a file, .NAME.space-PID, allocated to that size
// (fallocate), which gives back what each write of the stage takes. The
// check and the allocation are made under a lock on the local directory
// (flock on the directory itself), so that the stages of several ranks of
// a node into one directory check one after the other, and each finds
// only the room the others have not set aside: the one that does not fit
// is refused up front, with the totals, instead of failing half way. A
// reservation whose stage died (no one holds its flock) is removed by
// the next stage. Should the disk fill up anyway (another program, or a
// file system that cannot allocate ahead), the error says so, with the
// totals.
//
// # Copy
//
// The manifest, the shard's index and its chunk files are copied into a
// temporary directory next to the destination (.NAME.tmp-PID), each file
// synced and dropped from the page cache, then read back (O_DIRECT where
// the file system allows) and verified: the index against the manifest's
// checksum and counts, each chunk file's size against the index, every
// chunk header and every file's CRC32C. A file that fails is copied once
// more, since a fault on the way may not repeat; if it fails again, Stage
// fails, naming it. Only then is the marker written and the directory
// renamed into place, so a directory with the copy's name is complete
// and verified. A stage that fails, or that Config.Stop stops, removes its
// temporary directory and the copies it made of its other shards, and
// leaves no lock: it leaves what it found, less the copies it did not
// reuse. One that crashed leaves its temporary directory, lock and
// reservation, and the next Stage of the same dataset and shard removes
// them. When a copy was not reused because it is damaged, and cannot be
// copied again, the error says both: what is wrong with the copy, and
// why the copy failed (the source cannot be read, with the errno, say).
//
// # Reuse
//
// A later Stage reads only the source's manifest. When the marker records
// the same manifest, it verifies the local copy again, as after a copy
// (local disk reads are cheap next to shared storage), and reuses it. A
// source packed again (its manifest differs) or a copy that fails
// verification is copied again, and Result.Replaced (and
// Config.Replacing, before the copy) says why, naming the file and the
// chunk.
//
// # Concurrency
//
// Stages of the same dataset and shard on one node take turns: each holds
// an exclusive flock on .NAME.lock in the local directory, taken for all
// its shards in increasing order before it looks at any, and removed when
// it ends (a stage that finds the lock it waited for removed takes the
// new one). A job serving from a copy holds nothing: a Stage that finds
// the source changed, or the copy damaged, replaces it under that job.
package stage
