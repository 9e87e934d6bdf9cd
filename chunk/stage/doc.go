// Package stage copies one rank's shard of a packed dataset from shared
// storage to node-local disk before a job reads it, and lets later jobs
// reuse that copy: the storage tiering of NoPFS and MONARCH, done once per
// node and dataset ahead of the first epoch rather than file by file
// during it.
//
// # Layout
//
// Stage puts the copy in Dir(Local, Source, Rank), a directory of the
// local directory named after the source's base name, a hash of its
// absolute path (symlinks resolved) and the rank, for example
// chunks-1f2e3d4c.rank-3. Two datasets, or two ranks on one node, never
// share one, and Pattern (chunks-1f2e3d4c.rank-{rank}) names every rank's
// copy at once, as serve --chunks takes it. The directory is a node-local
// dataset as serve reads it: manifest.json (the source's, byte for byte)
// and the rank's rank-NNNNN/ (index and chunk files); other ranks'
// directories are not copied. It also holds stage.json, the marker, which
// records what was verified: the source manifest's CRC32C and size, the
// index's checksum, the number of chunk files and the bytes of the copy.
//
// # Copy
//
// The manifest, the rank's index and its chunk files are copied into a
// temporary directory next to the destination (.NAME.tmp-PID), each file
// synced and dropped from the page cache, then read back (O_DIRECT where
// the file system allows) and verified: the index against the manifest's
// checksum and counts, each chunk file's size against the index, every
// chunk header and every file's CRC32C. A file that fails is copied once
// more, since a fault on the way may not repeat; if it fails again, Stage
// fails, naming it. Only then is the marker written and the directory
// renamed into place, so a directory with the copy's name is complete
// and verified. A stage that fails, or that Config.Stop stops, removes its
// temporary directory; one that crashed leaves it, and the next Stage of
// the same dataset and rank removes it.
//
// # Reuse
//
// A later Stage reads only the source's manifest. When the marker records
// the same manifest, it verifies the local copy again, as after a copy
// (local disk reads are cheap next to shared storage), and reuses it. A
// source packed again (its manifest differs) or a copy that fails
// verification is copied again, and Result.Replaced says why, naming the
// file and the chunk.
//
// # Concurrency
//
// Stages of the same dataset and rank on one node take turns: each holds
// an exclusive flock on .NAME.lock in the local directory. A job serving
// from a copy holds nothing: a Stage that finds the source changed, or the
// copy damaged, replaces it under that job.
package stage
