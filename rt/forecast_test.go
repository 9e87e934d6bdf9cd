package rt

import (
	"slices"
	"sync"
	"testing"
)

// A forecast is what serve then does: per epoch, the chunks read from
// storage and their bytes (up to a page per read, which O_DIRECT adds),
// and the files and bytes the ranks send each other, over three epochs of
// 3 ranks with a quarter of the dataset in memory and with all of it.
func TestForecastIsWhatServeDoes(t *testing.T) {
	for _, mem := range []float64{0.25, 1} {
		dir := packed(t, 900, 3, 8)
		cfg := defaultJob()
		cfg.Chunks, cfg.Mem.Shard, cfg.Epochs, cfg.Consume = dir, mem, 3, 2
		var mu sync.Mutex
		var first *Node
		extents := make([][]int64, 3)
		stats, err := serveLocalOpened(t, 3, cfg, func(r int, n *Node) {
			mu.Lock()
			defer mu.Unlock()
			extents[r] = slices.Clone(n.ChunkBytes())
			if r == 0 {
				first = n
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		fc, err := first.Forecast(3, extents)
		if err != nil {
			t.Fatal(err)
		}
		for i, st := range stats {
			var sum RankForecast
			for _, rf := range fc[i].Ranks {
				sum.Reads, sum.ReadBytes, sum.Files, sum.Bytes = sum.Reads+rf.Reads, sum.ReadBytes+rf.ReadBytes, sum.Files+rf.Files, sum.Bytes+rf.Bytes
				sum.ReceivedFiles, sum.ReceivedBytes = sum.ReceivedFiles+rf.ReceivedFiles, sum.ReceivedBytes+rf.ReceivedBytes
				sum.SentFiles, sum.SentBytes = sum.SentFiles+rf.SentFiles, sum.SentBytes+rf.SentBytes
			}
			t.Logf("memory %g, epoch %d: forecast %+v; served: %d reads, %d bytes, %d files of other ranks, %d bytes", mem, st.Epoch, sum, st.StorageReads, st.StorageBytes, st.RemoteFiles, st.RemoteBytes)
			if sum.Reads != st.StorageReads || st.StorageBytes < sum.ReadBytes || st.StorageBytes > sum.ReadBytes+4095*sum.Reads {
				t.Errorf("memory %g, epoch %d: forecast %d reads of %d bytes; served %d reads of %d bytes", mem, st.Epoch, sum.Reads, sum.ReadBytes, st.StorageReads, st.StorageBytes)
			}
			if sum.Files != st.FilesDelivered || sum.Bytes != st.BytesDelivered || sum.ReceivedFiles != st.RemoteFiles || sum.ReceivedBytes != st.RemoteBytes ||
				sum.SentFiles != sum.ReceivedFiles || sum.SentBytes != sum.ReceivedBytes {
				t.Errorf("memory %g, epoch %d: forecast %+v; served %d files (%d bytes), %d of them from other ranks (%d bytes)",
					mem, st.Epoch, sum, st.FilesDelivered, st.BytesDelivered, st.RemoteFiles, st.RemoteBytes)
			}
		}
	}
}
