"""How fast Python processes read files from a brandrt rank, the bytes
touched (summed with numpy, as 64-bit words and the bytes after the last
one), against the copy bandwidth of /dev/shm in the same run.

    mpirun -np 1 brandrt serve --chunks DIR --mem 100% --epochs 3 &
    /usr/bin/python3 python/bench_read.py --workers 1 --epochs 3

Each worker process attaches on its own and reads positions w, w+W, … of
every epoch, --batch at a time through Client.read_many, as a DataLoader
worker does for a batch (BrandDataset.__getitems__). The workers live
through all epochs, as persistent DataLoader workers do; with --fresh, new
ones start every epoch. The first epoch reads storage; later ones are served
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


def worker(w, workers, epochs, batch, q):
    """Read positions w, w+W, … of each of epochs through one attach, as
    a persistent DataLoader worker does, batch positions at a time through
    Client.read_many (what BrandDataset.__getitems__ does for a DataLoader
    batch of that size); report each epoch on q."""
    c = Client(timeout=60)
    for epoch in epochs:
        n = c.wait_epoch(epoch, 120)
        todo = list(range(w, n, workers))
        seen = [0, 0, 0]  # files, bytes, sum

        def use(_sn, _fid, _label, data):
            seen[0] += 1
            seen[1] += len(data)
            seen[2] += touch(data)

        start, cpu0 = time.monotonic(), cpu_seconds()
        for i in range(0, len(todo), batch):
            c.read_many(todo[i : i + batch], epoch, use)
        q.put((seen[0], seen[1], time.monotonic() - start, seen[2], cpu_seconds() - cpu0))
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


def sized(data):
    """BrandDataset's transform in --loader runs: the file's length and
    touch."""
    return len(data), touch(data)


def through_loader(a, copy, rank):
    """The same reads through torch's DataLoader: BrandSampler,
    BrandDataset with sized as its transform, --workers worker processes
    (persistent unless --fresh), batches of --batch."""
    import torch.utils.data

    from brandrt.torch import BrandDataset, BrandSampler

    sampler = BrandSampler()
    loader = torch.utils.data.DataLoader(BrandDataset(transform=sized, timeout=60), batch_size=a.batch, sampler=sampler,
                                         num_workers=a.workers, persistent_workers=not a.fresh, collate_fn=list)
    with Client(timeout=60) as c:
        for epoch in range(a.epochs):
            c.wait_epoch(epoch + 1, 120)
            sampler.set_epoch(epoch)
            rank_cpu, files, nbytes = cpu_seconds(rank), 0, 0
            # Persistent workers exist before the epoch; new ones are found
            # once the first batch arrives (their work before it is missed).
            start, cpu0 = time.monotonic(), cpu_seconds()
            workers = {pid: cpu_seconds(pid) for pid in children()}
            for batch in loader:
                if not workers:
                    workers = {pid: cpu_seconds(pid) for pid in children()}
                files += len(batch)
                nbytes += sum(n for (n, _), _ in batch)
            secs, rank_cpu = time.monotonic() - start, cpu_seconds(rank) - rank_cpu
            workers_cpu = sum(cpu_seconds(pid) - was for pid, was in workers.items() if os.path.exists("/proc/%d" % pid))
            report(epoch + 1, "a DataLoader with %d workers" % a.workers, files, nbytes, secs, copy,
                   "%.1f µs in the workers, %.1f µs in the main process, %.1f µs in the rank"
                   % (1e6 * workers_cpu / files, 1e6 * (cpu_seconds() - cpu0) / files, 1e6 * rank_cpu / files))


def report(epoch, who, files, nbytes, secs, copy, cpu):
    """Prints an epoch's rates against the copy bandwidth, and its CPU."""
    print("epoch %d: %s read %d files (%.2f GB) in %.2f s: %.0f files/s, %.2f GB/s = %.0f%% of the copy bandwidth"
          % (epoch, who, files, nbytes / 1e9, secs, files / secs, nbytes / secs / 1e9, 100 * nbytes / secs / copy), flush=True)
    print("         CPU per file: " + cpu, flush=True)


def children():
    """The pids of this process's children."""
    me, pids = os.getpid(), []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        pids.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return pids


def shm_copy_bandwidth(size=256 << 20, rounds=4):
    """Bytes per second of copying a shared-memory mapping (a memfd, as
    /dev/shm files are) into process memory."""
    import mmap

    fd = os.memfd_create("brandrt-bench-copy", os.MFD_CLOEXEC)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64,
                    help="positions each worker asks for at once (the DataLoader's batch_size; 1 is one file at a time)")
    ap.add_argument("--fresh", action="store_true",
                    help="new worker processes every epoch, as DataLoader workers without persistent_workers")
    ap.add_argument("--loader", action="store_true",
                    help="read through torch's DataLoader over BrandDataset and BrandSampler instead of bare Clients")
    a = ap.parse_args()
    if a.workers < 1 or a.batch < 1:
        ap.error("--workers and --batch must be at least 1")
    copy = shm_copy_bandwidth()
    print("/dev/shm copy bandwidth (numpy copyto, 256 MiB, best of 4): %.2f GB/s" % (copy / 1e9), flush=True)
    ctx = mp.get_context("fork")
    rank = rank_pid()
    if a.loader:
        return through_loader(a, copy, rank)
    epochs = list(range(1, a.epochs + 1))
    q = ctx.Queue()
    ps = []
    if not a.fresh:
        ps = [ctx.Process(target=worker, args=(w, a.workers, epochs, a.batch, q)) for w in range(a.workers)]
        for p in ps:
            p.start()
    for epoch in epochs:
        rank_cpu = cpu_seconds(rank)
        if a.fresh:
            ps = [ctx.Process(target=worker, args=(w, a.workers, [epoch], a.batch, q)) for w in range(a.workers)]
            for p in ps:
                p.start()
        res = [q.get() for _ in range(a.workers)]
        rank_cpu = cpu_seconds(rank) - rank_cpu
        files, nbytes = sum(r[0] for r in res), sum(r[1] for r in res)
        secs = max(r[2] for r in res)
        report(epoch, "%d workers" % a.workers, files, nbytes, secs, copy,
               "%.1f µs in the workers, %.1f µs in the rank" % (1e6 * sum(r[4] for r in res) / files, 1e6 * rank_cpu / files))
        if a.fresh:
            for p in ps:
                p.join()
    for p in ps:
        p.join()


if __name__ == "__main__":
    main()
