package rt

import (
	"errors"
	"fmt"

	"github.com/brandrt/brandrt/proto"
)

// Forecast is what the ranks of a job read, send and receive in one
// epoch, as the window policy's plan has it: what `brandrt plan`
// predicts, and serve then does (the same plan, byte for byte).
type Forecast struct {
	Epoch int
	Ranks []RankForecast
}

// RankForecast is one rank's share of an epoch's Forecast.
type RankForecast struct {
	// Reads counts the chunks the rank reads from storage, ReadBytes
	// what those reads ask for (each chunk from its start to its last
	// file's end; a read with O_DIRECT rounds its end up to a page, at
	// most 4 KiB more). Resident counts the chunks it had in memory as
	// the epoch began, which it does not read.
	Reads     int64 `json:"reads"`
	ReadBytes int64 `json:"read_bytes"`
	Resident  int64 `json:"resident"`
	// Files counts the positions the rank answers, Bytes their files'
	// bytes; Received those answered with other ranks' files, Sent the
	// rank's own files that answer other ranks' positions: what crosses
	// the network, besides the messages' frames.
	Files         int64 `json:"files"`
	Bytes         int64 `json:"bytes"`
	ReceivedFiles int64 `json:"received_files"`
	ReceivedBytes int64 `json:"received_bytes"`
	SentFiles     int64 `json:"sent_files"`
	SentBytes     int64 `json:"sent_bytes"`
	// HandableFiles and HandableBytes count the positions answered with a
	// file that lies in pages of its own in the memory the rank shares
	// with its clients, which a DataLoader worker can hand on to its
	// training process in place (brandrt.handed): the rank's own files
	// that Handable says can, and other ranks' received into buffers
	// that memory lends (lentClass: those of more than 32 KiB). The
	// others reach the training process as copies, through the
	// DataLoader's pipe.
	HandableFiles int64 `json:"handable_files"`
	HandableBytes int64 `json:"handable_bytes"`
}

// Forecast plans this job's first epochs as its ranks will serve them
// (the window policy, the traces drawn from the seed, from the input its
// machine plans from: proto.WindowConfig.Input) and returns what each
// rank reads, sends and receives in each. chunkBytes[r] holds rank r's
// chunks' read extents, in its chunks' order (Node.ChunkBytes of each
// rank); any rank may forecast for all, since the plan is a pure
// function of what every rank plans from (a serving rank plans only its
// share of it).
func (n *Node) Forecast(epochs int, chunkBytes [][]int64) ([]Forecast, error) {
	if n.cfg.Policy != PolicyWindow || n.cfg.ClientTraces {
		return nil, errors.New("rt: only the window policy, with the seed's traces, plans its epochs ahead")
	}
	m := n.data.m
	if len(chunkBytes) != m.Ranks() {
		return nil, fmt.Errorf("rt: chunk extents of %d ranks for a job of %d", len(chunkBytes), m.Ranks())
	}
	in := n.data.window.Input()
	var out []Forecast
	for e := 1; e <= epochs; e++ {
		in.Epoch, in.Traces = uint32(e), proto.Traces(m.Files(), m.Ranks(), n.cfg.Seed, uint32(e))
		p, err := proto.PlanWindow(in)
		if err != nil {
			return nil, fmt.Errorf("rt: epoch %d: %w", e, err)
		}
		out = append(out, forecast(in, p, e, chunkBytes))
		in.After, in.Resident = p.Drains, p.Resident
	}
	return out, nil
}

// forecast sums plan p of epoch e by rank.
func forecast(in proto.WindowInput, p *proto.WindowPlan, e int, chunkBytes [][]int64) Forecast {
	m := in.Mapping
	f := Forecast{Epoch: e, Ranks: make([]RankForecast, m.Ranks())}
	for r := range f.Ranks {
		rf := &f.Ranks[r]
		firstPC, _ := m.RankPCs(r)
		for _, rd := range p.Reads[r] {
			if rd.Resident {
				rf.Resident++
				continue
			}
			rf.Reads++
			rf.ReadBytes += chunkBytes[r][rd.PC-firstPC]
		}
		for sn, file := range p.Files[r] {
			size := in.FileSize(file)
			rf.Files++
			rf.Bytes += size
			handable := Handable(size)
			if p.PushAt[r][sn] >= 0 { // another rank's file
				rf.ReceivedFiles++
				rf.ReceivedBytes += size
				home := &f.Ranks[m.Home(file)]
				home.SentFiles++
				home.SentBytes += size
				handable = lentClass(sizeClass(int(size)))
			}
			if handable {
				rf.HandableFiles++
				rf.HandableBytes += size
			}
		}
	}
	return f
}

// ChunkBytes returns the read extent of each of this rank's chunks, in
// order: from the chunk's start to its last file's end.
func (n *Node) ChunkBytes() []int64 { return n.data.chunkBytes }
