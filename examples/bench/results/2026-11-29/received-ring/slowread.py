"""Slow readers: slowread.py RANK W EPOCHS DELAY [STALL]. W processes attach to local rank
RANK and read positions w::W of each epoch through Client.read_many (64 requests in flight),
spending DELAY s on each file where it lies, and STALL s on the first file of each epoch."""
import multiprocessing as mp, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../../../python"))
from brandrt import Client

def worker(rank, w, W, epochs, delay, stall):
    for _ in range(600):
        try:
            c = Client(local_rank=rank, timeout=120)
            break
        except Exception:
            time.sleep(0.1)
    for e in range(1, epochs + 1):
        n = c.wait_epoch(e, 300)
        first = [True]
        def use(sn, fid, label, data):
            _ = data[0] if len(data) else 0
            time.sleep(stall if first[0] else delay)
            first[0] = False
        c.read_many(list(range(w, n, W)), e, use)
    c.close()

if __name__ == "__main__":
    rank, W, epochs, delay = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    stall = float(sys.argv[5]) if len(sys.argv) > 5 else delay
    ps = [mp.Process(target=worker, args=(rank, w, W, epochs, delay, stall)) for w in range(W)]
    t = time.monotonic()
    for p in ps: p.start()
    for p in ps: p.join()
    print("rank %d: %d workers done in %.1f s, exit codes %s" % (rank, W, time.monotonic() - t, [p.exitcode for p in ps]))
