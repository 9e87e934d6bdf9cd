// Command nasproxy is the file server of the emulated NAS (see ../nas.sh):
// it accepts TCP connections and starts one server process per connection
// (sftp-server, speaking raw SFTP to `sshfs -o directport`), relaying the
// bytes both ways, each one -delay later than it arrived. This kernel has
// no netem qdisc, so the network's latency comes from here; the rate limit
// is the kernel's tbf on the veth.
//
//	nasproxy -listen 10.213.7.2:7023 -delay 100us -- /usr/lib/openssh/sftp-server -R
//
// Data stays pipelined: a chunk read from one side is written to the other
// at its arrival time plus the delay, whatever is queued behind it, so the
// delay adds latency without capping throughput. The writers sleep with
// nanosleep on a locked thread with 1 ns of timer slack (Go's timers are
// about 1 ms coarse on this kernel).
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"
)

const prSetTimerslack = 29 // PR_SET_TIMERSLACK

func main() {
	listen := flag.String("listen", "", "address to listen on (host:port)")
	delay := flag.Duration("delay", 100*time.Microsecond, "one-way delay added to each direction")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: nasproxy -listen HOST:PORT [-delay 100us] -- COMMAND [ARGS…]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *listen == "" || flag.NArg() == 0 || *delay < 0 {
		flag.Usage()
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("nasproxy: %v", err)
	}
	var mu sync.Mutex
	children := map[*exec.Cmd]bool{}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		ln.Close()
		mu.Lock()
		for c := range children {
			c.Process.Kill()
		}
		mu.Unlock()
		os.Exit(0)
	}()
	for {
		conn, err := ln.Accept()
		if err != nil {
			log.Fatalf("nasproxy: %v", err)
		}
		cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
		cmd.Stderr = os.Stderr
		go func() {
			mu.Lock()
			children[cmd] = true
			mu.Unlock()
			if err := serve(conn, cmd, *delay); err != nil {
				log.Printf("nasproxy: %v", err)
			}
			mu.Lock()
			delete(children, cmd)
			mu.Unlock()
		}()
	}
}

// serve relays conn to cmd's stdin and cmd's stdout to conn, both delayed,
// until either side ends; then it ends the other.
func serve(conn net.Conn, cmd *exec.Cmd, delay time.Duration) error {
	defer conn.Close()
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{}, 2)
	go func() { relay(in, conn, delay); in.Close(); done <- struct{}{} }()
	go func() { relay(conn, out, delay); conn.Close(); done <- struct{}{} }()
	<-done
	conn.Close()
	cmd.Process.Kill()
	<-done
	cmd.Wait()
	return nil
}

// queued bounds the pieces (of up to 256 KiB) a relay holds: 16 MiB.
const queued = 64

type piece struct {
	at  time.Time
	buf []byte
}

// relay copies src to dst, each piece written delay after it was read.
// The pieces in flight are bounded (queued): the link behind dst is
// slower than src (the server reads from the page cache), and a reader
// running ahead without bound grew the proxy to 250 MiB, where the NAS's
// memory cgroup killed it (3 nodes reading at once). What the delay needs
// in flight is small: 100 µs at 3 Gbit/s is 37 KB.
func relay(dst io.Writer, src io.Reader, delay time.Duration) {
	q := make(chan piece, queued)
	spare := make(chan []byte, 64) // buffers written out, for reuse
	go func() {
		defer close(q)
		for {
			var b []byte
			select {
			case b = <-spare:
			default:
				b = make([]byte, 256<<10)
			}
			n, err := src.Read(b)
			if n > 0 {
				q <- piece{time.Now(), b[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	runtime.LockOSThread()
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerslack, 1, 0)
	failed := false
	for p := range q {
		if wait := time.Until(p.at.Add(delay)); wait > 0 {
			ts := syscall.NsecToTimespec(wait.Nanoseconds())
			for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
			}
		}
		if !failed {
			_, err := dst.Write(p.buf)
			failed = err != nil
		}
		select {
		case spare <- p.buf[:cap(p.buf)]:
		default:
		}
	}
}
