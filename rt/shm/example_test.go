package shm_test

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/brandrt/brandrt/chunk"
	"github.com/brandrt/brandrt/proto"
	"github.com/brandrt/brandrt/rt"
	"github.com/brandrt/brandrt/rt/shm"
)

// A client's reading loop, as the Python client (brandrt.torch) runs it
// in each DataLoader worker: attach to the rank's attach point, ask for
// positions of the epoch, take each record as it comes (in any order),
// check it, use it, release it, and end the epoch. Here a goroutine
// stands in for the rank, answering each Ask with a file of its own.
func Example_clientLoop() {
	events := make(chan rt.ClientEvent, 16)
	go func() { // the rank: answers each ask with the file whose id is 100 + the position
		for ev := range events {
			if ask, ok := ev.(rt.Ask); ok {
				data := []byte(fmt.Sprintf("file %d", 100+ask.Sn))
				ask.Reply <- rt.Delivery{Sn: ask.Sn, File: proto.FileID(100 + ask.Sn), Label: ask.Sn % 2, Data: data, CRC: chunk.Checksum(data)}
			}
		}
	}()
	base, _ := os.MkdirTemp("", "brandrt-example") // the base of the attach directories: this user's alone
	defer os.RemoveAll(base)
	server, err := shm.Listen(filepath.Join(base, "local-0"), 0, shm.Options{Slots: 4, Data: 64 << 10, Events: events})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { server.Close(); close(events) }()

	client, err := shm.Attach(server.Dir())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	const epoch = 1
	for sn := range int32(3) { // a DataLoader worker asks for its batch's positions ahead
		if err := client.Request(epoch, sn); err != nil {
			fmt.Println(err)
			return
		}
	}
	got := map[int32]string{}
	for range 3 {
		rec, err := client.Next(5 * time.Second)
		if err != nil {
			fmt.Println(err)
			return
		}
		if rec.CRC != chunk.Checksum(rec.Data) {
			fmt.Printf("position %d: checksum mismatch\n", rec.Sn)
		}
		got[rec.Sn] = fmt.Sprintf("file %d, label %d: %q", rec.File, rec.Label, rec.Data)
		client.Release(rec) // the bytes are the ring's until released
	}
	for sn := range int32(3) {
		fmt.Printf("position %d: %s\n", sn, got[sn])
	}
	if err := client.EndEpoch(epoch); err != nil {
		fmt.Println(err)
	}
	// Output:
	// position 0: file 100, label 0: "file 100"
	// position 1: file 101, label 1: "file 101"
	// position 2: file 102, label 0: "file 102"
}
