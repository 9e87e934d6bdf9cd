"""How fast Python processes read files from a brandrt rank, the bytes
touched (summed with numpy, as 64-bit words and the bytes after the last
one), against the copy bandwidth of /dev/shm in the same run.

    mpirun -np 1 brandrt serve --chunks DIR --mem 100% --consume 0 --epochs 3 &
    /usr/bin/python3 python/bench_read.py --workers 1 --epochs 3 --depth 8

Each worker process attaches on its own and reads positions w, w+W, … of
every epoch, keeping --depth requests in flight. The workers live through
all epochs, as persistent DataLoader workers do; with --fresh, new ones
start every epoch. The first epoch reads storage; later ones are served
from memory when the budget holds the shard. A worker that maps the
rank's memory anew pays a page fault per few pages it reads the first
time.
"""

import argparse
import multiprocessing as mp
import os
import resource
import socket
import struct
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from brandrt import Client  # noqa: E402


def worker(w, workers, epochs, depth, q):
    """Read positions w, w+W, … of each of epochs through one attach, as
    a persistent DataLoader worker does; report each epoch on q."""
    c = Client(timeout=60)
    for epoch in epochs:
        n = c.wait_epoch(epoch, 120)
        todo = list(range(w, n, workers))
        sent = got = nbytes = 0
        total = 0
        start, cpu0 = time.monotonic(), cpu_seconds()
        while got < len(todo):
            while sent < len(todo) and sent - got < depth:
                c.request(todo[sent], epoch)
                sent += 1
            _, _, _, data, _ = c.next()
            total += touch(data)
            nbytes += len(data)
            got += 1
        c.release()
        q.put((got, nbytes, time.monotonic() - start, total, cpu_seconds() - cpu0))
    c.close()


def cpu_seconds(pid=None):
    """User and system CPU seconds of this process, or of pid."""
    if pid is None:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rank_pid():
    """The pid of the rank serving this node (the peer of an attach)."""
    c = Client(timeout=60)
    try:
        pid, _, _ = struct.unpack("3i", c._sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    finally:
        c.close()
    return pid


def touch(data):
    """Reads every byte of data: the sum of its 64-bit words, plus its
    last len % 8 bytes. (Summing uint8 elements costs numpy seven times as
    much CPU as summing the same memory as words.)"""
    words = len(data) // 8
    return int(np.frombuffer(data, dtype=np.uint64, count=words).sum(dtype=np.uint64)) + sum(data[8 * words :])


def shm_copy_bandwidth(size=256 << 20, rounds=4):
    """Bytes per second of copying a /dev/shm mapping into process memory."""
    import mmap

    fd = os.open("/dev/shm/brandrt-bench-copy", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, size)
        m = mmap.mmap(fd, size)
        src = np.frombuffer(m, dtype=np.uint8)
        src[:] = 1
        dst = np.empty(size, dtype=np.uint8)
        best = 0.0
        for _ in range(rounds):
            t = time.monotonic()
            np.copyto(dst, src)
            best = max(best, size / (time.monotonic() - t))
        del src
        m.close()
        return best
    finally:
        os.close(fd)
        os.unlink("/dev/shm/brandrt-bench-copy")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--depth", type=int, default=8, help="requests each worker keeps in flight")
    ap.add_argument("--fresh", action="store_true",
                    help="new worker processes every epoch, as DataLoader workers without persistent_workers")
    a = ap.parse_args()
    copy = shm_copy_bandwidth()
    print("/dev/shm copy bandwidth (numpy copyto, 256 MiB, best of 4): %.2f GB/s" % (copy / 1e9), flush=True)
    ctx = mp.get_context("fork")
    rank = rank_pid()
    epochs = list(range(1, a.epochs + 1))
    q = ctx.Queue()
    ps = []
    if not a.fresh:
        ps = [ctx.Process(target=worker, args=(w, a.workers, epochs, a.depth, q)) for w in range(a.workers)]
        for p in ps:
            p.start()
    for epoch in epochs:
        rank_cpu = cpu_seconds(rank)
        if a.fresh:
            ps = [ctx.Process(target=worker, args=(w, a.workers, [epoch], a.depth, q)) for w in range(a.workers)]
            for p in ps:
                p.start()
        res = [q.get() for _ in range(a.workers)]
        rank_cpu = cpu_seconds(rank) - rank_cpu
        files, nbytes = sum(r[0] for r in res), sum(r[1] for r in res)
        secs = max(r[2] for r in res)
        print("epoch %d: %d workers read %d files (%.2f GB) in %.2f s: %.0f files/s, %.2f GB/s = %.0f%% of the copy bandwidth"
              % (epoch, a.workers, files, nbytes / 1e9, secs, files / secs, nbytes / secs / 1e9, 100 * nbytes / secs / copy),
              flush=True)
        print("         CPU per file: %.1f µs in the workers, %.1f µs in the rank"
              % (1e6 * sum(r[4] for r in res) / files, 1e6 * rank_cpu / files), flush=True)
        if a.fresh:
            for p in ps:
                p.join()
    for p in ps:
        p.join()


if __name__ == "__main__":
    main()
