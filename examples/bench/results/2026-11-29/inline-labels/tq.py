# time per tensor sent from a child process to its parent through torch's multiprocessing Queue: shared by fd vs pickled inline
# python3 tq.py: both ways, 512 B to 4 MiB; python3 tq.py file_system: by torch only, with that sharing strategy, 3 sizes
import time, sys, torch, torch.multiprocessing as mp, resource

def rebuild(data, dtype, shape):
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)

class Inline:
    def __init__(self, t): self.t = t
    def __reduce__(self): return rebuild, (self.t.numpy().tobytes(), self.t.dtype, tuple(self.t.shape))

def child(q, n, size, inline, done):
    for i in range(n):
        t = torch.zeros(size // 8, dtype=torch.int64)
        q.put(Inline(t) if inline else t)
    q.put(None)
    done.wait()

def cpu(who):
    r = resource.getrusage(who); return r.ru_utime + r.ru_stime

if __name__ == "__main__":
    ctx = mp.get_context("fork")
    sizes, ways = [512, 8 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20], [False, True]
    if sys.argv[1:] == ["file_system"]:
        mp.set_sharing_strategy("file_system")
        sizes, ways = [512, 64 << 10, 1 << 20], [False]
    for size in sizes:
        for inline in ways:
            n = 2000 if size <= 64 << 10 else 300
            q = ctx.Queue(); done = ctx.Event()
            c0, k0, t0 = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN), time.monotonic()
            p = ctx.Process(target=child, args=(q, n, size, inline, done)); p.start()
            got = 0
            while True:
                x = q.get()
                if x is None: break
                got += x.numel()
            done.set(); p.join()
            dt = time.monotonic() - t0
            print("%8d B %-7s %7.1f us/tensor wall, parent %6.1f us, child %6.1f us" % (size, "inline" if inline else "fd", 1e6*dt/n, 1e6*(cpu(resource.RUSAGE_SELF)-c0)/n, 1e6*(cpu(resource.RUSAGE_CHILDREN)-k0)/n), flush=True)
