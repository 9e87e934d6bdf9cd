package main

import (
	"fmt"
	"io"
	"math"

	"github.com/urfave/cli/v2"

	"github.com/brandrt/brandrt/collectives"
	"github.com/brandrt/brandrt/collectives/p2pbench"
	"github.com/brandrt/brandrt/rt"
)

func benchServeCommand() *cli.Command {
	serve := serveCommand()
	msg := byteSize{intValue{n: 110_000, lo: 1, hi: math.MaxInt32, why: "an MPI message's count is a C int"}}
	return &cli.Command{
		Name:  "serve",
		Usage: "serve epochs and compare with MPI's own point-to-point bandwidth, in one run",
		Description: "Run it like serve, under mpirun. First every rank streams --messages\n" +
			"messages of --message-size to the next rank while receiving from the previous\n" +
			"one (Isend, Iprobe, Recv: what serve uses), which gives MPI's point-to-point\n" +
			"bandwidth per rank; then the epochs are served with in-process readers\n" +
			"(--consume). Prints, per epoch, files per second per rank and the bytes per\n" +
			"second each rank received from the others as a fraction of that bandwidth.\n\n" +
			"MPI is measured twice: with messages that stay in the CPU's cache (eight\n" +
			"buffers per side, reused) and with messages spread over 256 MiB per side,\n" +
			"which must come from and go to memory as served files do.\n\n" +
			"Example: mpirun -np 2 --bind-to none brandrt bench serve --chunks DIR --mem 100% --consume 4 --epochs 3",
		Flags: append(serve.Flags,
			&cli.GenericFlag{Name: "message-size", Value: &msg, Usage: "size of the point-to-point messages (the dataset's mean file size is a fair choice)"},
			intFlag("messages", 20000, 1, math.MaxInt32, "", "messages each rank sends"),
		),
		Action: runBenchServe,
	}
}

func runBenchServe(c *cli.Context) error {
	size, messages := int(c.Generic("message-size").(*byteSize).n), c.Int("messages")
	return serving(c, func(comm collectives.Comm, w io.Writer) (func(io.Writer, rt.EpochStats), error) {
		// Two baselines: messages in the CPU's cache (one buffer per send
		// in flight), and messages spread over 256 MiB, as served files are.
		var p2p [2]p2pbench.Result
		for i, spread := range []int64{0, 256 << 20} {
			if comm.Size() < 2 {
				break
			}
			var err error
			if p2p[i], err = p2pbench.Measure(comm, size, messages, spread); err != nil {
				return nil, err
			}
			p := p2p[i]
			fmt.Fprintf(w, "mpi      %d ranks, each streaming %s messages of %s to the next from and into %s of buffers: %s/s received per rank (%.2fs)\n",
				comm.Size(), comma(int64(p.Messages)), ibytes(int64(p.MessageBytes)), ibytes(p.SpreadBytes), ibytes(int64(p.BytesPerSecond)), p.Seconds)
		}
		return func(w io.Writer, s rt.EpochStats) { benchLine(w, s, p2p) }, nil
	})
}

// benchLine prints an epoch's rates per rank next to MPI's.
func benchLine(w io.Writer, s rt.EpochStats, p2p [2]p2pbench.Result) {
	perRank := s.FilesPerSecond / float64(s.Ranks)
	remote := float64(s.RemoteBytes) / s.Seconds / float64(s.Ranks)
	fmt.Fprintf(w, "  bench    %s files/s per rank; %s/s per rank from other ranks", comma(int64(perRank)), ibytes(int64(remote)))
	if p2p[0].BytesPerSecond > 0 {
		fmt.Fprintf(w, " = %.0f%% of MPI point-to-point in cache, %.0f%% spread over memory",
			100*remote/p2p[0].BytesPerSecond, 100*remote/p2p[1].BytesPerSecond)
	}
	fmt.Fprintln(w)
}
