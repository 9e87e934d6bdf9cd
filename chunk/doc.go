// Package chunk is brandrt's chunk store: it packs many small files into
// chunk files of K files each, one shard of chunks per rank, with an
// index per rank and a manifest for the dataset, and reads them back.
//
// # Layout
//
// A dataset directory holds rank-NNNNN/ (the rank's chunk files,
// chunk-NNNNNNNN.brc, and its index, index.bri) and manifest.json, which
// pack writes last: a directory without it is not a complete dataset.
// The chunk file and index formats are described next to their code
// (format.go, index.go).
//
// # Limits
//
// A file is at most MaxFileSize (1 GiB). K, the files per chunk, is at
// least 1 and at most MaxK (65536) and the dataset's number of files;
// pack refuses a larger K, and the readers refuse a manifest or index
// that records one, before allocating anything sized by K.
//
// # Packing
//
// Pack stages each process's shards in a temporary directory inside the
// output (.brandrt-pack-*), writes the manifest there too, and only then
// renames the shards and the manifest into place. A pack that fails, or is
// stopped (PackConfig.Stop), removes everything it wrote, the output
// directory too if it created it, and leaves a dataset it was replacing
// (PackConfig.Force) as it was.
package chunk
