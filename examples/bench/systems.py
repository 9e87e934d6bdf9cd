"""The systems of the loader benchmark: each builds a torch DataLoader that
yields batches of (list of file bytes, label tensor) through the same
settings (workers, batch size, persistent workers, the same collate), or,
for the reference `threads`, reads without one.

A system is made from the run's spec (a dict, see loaders.py) inside the
cgroup of its run; it has .epoch(e) -> iterable of batches, .check (how
its deliveries are checked), .close() and .own() (what the system itself
says it did, for the record; the benchmark's figures come from the cgroup).
"""

import mmap
import os
import queue
import random
import shutil
import subprocess
import tempfile
import threading
import time
import warnings

import torch
import torch.utils.data as tud

import prepare

SEED = 1


def widen_result_pipes(size):
    """Makes every multi-process DataLoader iterator made from now on send
    its workers' batches through a pipe of size bytes (F_SETPIPE_SZ)
    instead of Linux's 64 KiB. All workers share that one pipe; at 64 KiB
    a batch of 7 MB crosses it in a hundred turns of writer and reader,
    which capped a DataLoader at ~600 MB/s of raw bytes here (with 1 MiB:
    ~950 MB/s). Every system of the benchmark gets the same."""
    import fcntl

    from torch.utils.data import dataloader

    cls = dataloader._MultiProcessingDataLoaderIter
    init = getattr(cls, "_brandrt_bench_init", cls.__init__)

    def patched(self, loader):
        init(self, loader)
        if size:
            fcntl.fcntl(self._worker_result_queue._reader.fileno(), 1031, size)  # F_SETPIPE_SZ

    cls._brandrt_bench_init = init
    cls.__init__ = patched


def collate(batch):
    """Every system's collate: the files' bytes as a list, labels as a tensor."""
    return [b for b, _ in batch], torch.tensor([int(l) for _, l in batch])


def loader_args(spec):
    """Every system's DataLoader arguments. With spec's peers_inline, the
    collate of a DataLoader with workers sends the batch's small tensors
    inline, as BrandLoader's always does (which leaves one so wrapped as
    it is)."""
    w = spec["workers"]
    fn = collate
    if spec.get("peers_inline") and w > 0:
        brandrt_on_path(spec)
        from brandrt.inline import InlineSmall

        fn = InlineSmall(collate)
    return dict(batch_size=spec["batch_size"], num_workers=w, persistent_workers=w > 0, collate_fn=fn)


def brandrt_on_path(spec):
    """Puts the repository's Python package (brandrt) on the path, once."""
    import sys

    path = os.path.join(spec["repo"], "python")
    if path not in sys.path:
        sys.path.insert(0, path)


def shm_dir(spec, what):
    """A new directory in /dev/shm whose name gives the driver's pid, so
    that a later run removes what a killed one left."""
    return tempfile.mkdtemp(prefix="brandrt-bench-%d-%s-" % (spec.get("owner", os.getppid()), what), dir="/dev/shm")


class _System:
    check = "files"  # the delivered files are compared with the dataset's

    def epoch(self, e):
        """What yields epoch e's batches: by default the same DataLoader
        every epoch."""
        return self.loader

    def close(self):
        pass

    def own(self):
        return {}


class _ShmCached(_System):
    """A system whose cache is a directory in /dev/shm (tmpfs, so the
    cgroup counts it), removed when the run closes."""

    def make_cache(self, spec, what):
        self.cache = shm_dir(spec, what)
        return self.cache

    def close(self):
        shutil.rmtree(self.cache, ignore_errors=True)


class _Files(tud.Dataset):
    """ImageFolder without decoding: item i is the bytes of file i, read
    whole (open, read, close), and its label."""

    def __init__(self, root, files):
        self.paths = [os.path.join(root, p) for p, _, _ in files]
        self.labels = [l for _, _, l in files]

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            return f.read(), self.labels[i]


def _world(spec):
    """(this node's rank, the number of nodes) of a run."""
    return spec.get("rank", 0), spec.get("world", 1)


class Random(_System):
    """What PyTorch users do today: the original files through a shuffling
    DataLoader (RandomSampler, a new order every epoch); on several nodes,
    through a DistributedSampler (each node a share of a new permutation
    every epoch)."""

    sampler = None

    def __init__(self, spec, cat):
        self.ds = self.dataset(spec, cat)
        rank, world = _world(spec)
        if world > 1:
            self.sampler = tud.DistributedSampler(self.ds, num_replicas=world, rank=rank, shuffle=True, seed=SEED)
            self.loader = tud.DataLoader(self.ds, sampler=self.sampler, **loader_args(spec))
            return
        g = torch.Generator()
        g.manual_seed(SEED)
        self.loader = tud.DataLoader(self.ds, shuffle=True, generator=g, **loader_args(spec))

    def dataset(self, spec, cat):
        return _Files(spec["input"], cat["files"])

    def epoch(self, e):
        if self.sampler is not None:
            self.sampler.set_epoch(e)
        return self.loader


class _CachedFiles(_Files):
    """_Files with a static cache (CoorDL's MinIO): a seeded random subset of
    the files that fits the budget, in memory shared by every worker
    (MAP_SHARED, inherited through fork). A file of the subset is kept when
    first read (epoch 1) and never evicted; the others are read every time."""

    def __init__(self, root, files, budget):
        super().__init__(root, files)
        ids = list(range(len(files)))
        random.Random(SEED).shuffle(ids)
        self.where, total = {}, 0
        for i in ids:
            size = files[i][1]
            if total + size <= budget:
                self.where[i] = (total, size)
                total += size
        self.cached_bytes = total
        self.flags = mmap.mmap(-1, max(1, len(files)))
        self.mem = mmap.mmap(-1, max(1, total))

    def __getitem__(self, i):
        at = self.where.get(i)
        if at is None:
            return super().__getitem__(i)
        off, size = at
        if self.flags[i]:
            return self.mem[off : off + size], self.labels[i]
        data, label = super().__getitem__(i)
        self.mem[off : off + size] = data
        self.flags[i] = 1
        return data, label


class _PartitionedCache(_CachedFiles):
    """CoorDL's cache across servers (its partitioned caching): each node
    keeps, of the files it reads in epoch 1 (its share of the
    DistributedSampler's first permutation, which every node can compute),
    as many as its budget holds, so that the nodes' caches are disjoint and
    together hold the nodes' budgets. From epoch 2 a file another node
    keeps is fetched from that node's memory over TCP (its cache server, a
    thread of the node's main process); a file no node keeps is read from
    storage."""

    def __init__(self, spec, files):
        _Files.__init__(self, spec["input"], files)
        rank, world = _world(spec)
        self.rank, self.peers = rank, spec["peers"]
        first = [list(tud.DistributedSampler(range(len(files)), num_replicas=world, rank=r, shuffle=True, seed=SEED))
                 for r in range(world)]  # epoch 0's share of every node
        self.owner, self.where, total = {}, {}, 0
        for r, ids in enumerate(first):
            total = 0
            for i in ids:
                if total + files[i][1] <= spec["budget"]:
                    self.owner[i] = r
                    if r == rank:
                        self.where[i] = (total, files[i][1])
                    total += files[i][1]
        self.cached_bytes = sum(n for _, n in self.where.values())
        self.flags = mmap.mmap(-1, max(1, len(files)))
        self.mem = mmap.mmap(-1, max(1, self.cached_bytes))
        self.conns, self.remote = {}, 0
        self.server = _CacheServer(self, spec["peers"][rank])

    def __getitem__(self, i):
        owner = self.owner.get(i)
        if owner is None or owner == self.rank:
            return super().__getitem__(i)
        data = self.fetch(owner, i)
        if data is None:  # not kept there (yet): from storage
            return _Files.__getitem__(self, i)
        return data, self.labels[i]

    def fetch(self, owner, i):
        """File i from node owner's cache, or None where it has no copy."""
        import socket
        import struct

        c = self.conns.get(owner)
        if c is None:
            host, port = self.peers[owner]
            c = self.conns[owner] = socket.create_connection((host, port))
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.sendall(struct.pack("<I", i))
        n = struct.unpack("<i", _recv(c, 4))[0]
        return None if n < 0 else _recv(c, n)

    def kept(self, i):
        """File i's bytes in this node's cache, or None."""
        at = self.where.get(i)
        if at is None or not self.flags[i]:
            return None
        off, size = at
        return self.mem[off : off + size]


def _recv(c, n):
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = c.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("a peer's cache server closed its connection")
        got += k
    return bytes(buf)


class _CacheServer:
    """Serves a node's cache to the other nodes' DataLoader workers: a
    request is a file index (u32), the answer its length (i32, −1: not
    kept) and bytes."""

    def __init__(self, cache, addr):
        import socket

        self.cache = cache
        self.sock = socket.create_server(("", addr[1]), reuse_port=False)
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        import socket
        import struct

        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                i = struct.unpack("<I", _recv(c, 4))[0]
                data = self.cache.kept(i)
                c.sendall(struct.pack("<i", -1) if data is None else struct.pack("<i", len(data)) + data)
        except (ConnectionError, OSError):
            c.close()


class CoorDL(Random):
    """random with CoorDL's static cache of the budget (the strongest
    baseline of the Redox paper); on several nodes, its partitioned cache
    (_PartitionedCache)."""

    def dataset(self, spec, cat):
        if _world(spec)[1] > 1:
            return _PartitionedCache(spec, cat["files"])
        return _CachedFiles(spec["input"], cat["files"], spec["budget"])

    def own(self):
        return {"cached_files": len(self.ds.where), "cached_bytes": self.ds.cached_bytes}


class _InMemory(tud.Dataset):
    """Item i is a fresh bytes object of file i's size, cut from one buffer
    already in memory: the loader's work without storage."""

    def __init__(self, files):
        self.sizes = [s for _, s, _ in files]
        self.labels = [l for _, _, l in files]
        self.blob = os.urandom(max(self.sizes))

    def __len__(self):
        return len(self.sizes)

    def __getitem__(self, i):
        return self.blob[: self.sizes[i]], self.labels[i]


class NoIO(Random):
    """The same DataLoader handing out bytes already in memory: the upper
    bound of the loader itself. Its bytes are not the dataset's, so only
    the count and sizes are checked."""

    check = "sizes"

    def dataset(self, spec, cat):
        return _InMemory(cat["files"])


class WebDataset(_System):
    """WebDataset over its tar shards, as its documentation sets it up: each
    worker takes its share of the shards (split_by_worker), in an order
    shuffled every epoch, and draws samples from a shuffle buffer. The
    buffers of all workers together hold the budget."""

    def __init__(self, spec, cat):
        import webdataset as wds

        d = os.path.join(spec["root"], "wds")
        urls = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".tar"))
        mean = cat["bytes"] / len(cat["files"])
        self.buffer = max(1, int(spec["budget"] / max(1, spec["workers"]) / mean))
        # on several nodes, each its share of the shards (split_by_node,
        # from RANK and WORLD_SIZE), as its multi-node example sets it up
        split = wds.split_by_node if _world(spec)[1] > 1 else wds.single_node_only
        ds = (wds.WebDataset(urls, shardshuffle=len(urls), detshuffle=True, seed=SEED, empty_check=False, nodesplitter=split)
              .shuffle(self.buffer).to_tuple("bin", "cls").map_tuple(None, int))
        self.loader = tud.DataLoader(ds, **loader_args(spec))
        self.shards = len(urls)

    def own(self):
        return {"shards": self.shards, "shuffle_buffer_per_worker": self.buffer}


def _mosaic_class():
    from streaming import StreamingDataset

    class MosaicBytes(StreamingDataset):
        def get_item(self, sample_id, retry=7):
            s = super().get_item(sample_id, retry)
            return s["data"], s["label"]

    return MosaicBytes


class Mosaic(_ShmCached):
    """Mosaic Streaming over its MDS shards: remote is the storage, local a
    cache in memory (tmpfs, counted by the cgroup) of the budget
    (cache_limit), its default shuffle (py1e), its StreamingDataLoader."""

    def __init__(self, spec, cat):
        from streaming import StreamingDataLoader

        cache = self.make_cache(spec, "mosaic")
        # py1e shuffles blocks of shuffle_block_size samples; its default
        # (at least 262,144) spans the whole dataset here, so a cache of the
        # budget downloads each shard again and again (a tenth of the
        # files/s of this setting in a test). A block of half the budget's
        # samples lets the cache hold a block's shards and the next one's,
        # as WebDataset's buffer holds the budget.
        # Its predownload (samples each worker fetches ahead, by default 8
        # batches) must fit in the cache with room to spare: past it, its
        # workers wait for room that never comes (a stall, seen on small
        # budgets).
        mean = cat["bytes"] / len(cat["files"])
        fit = int(spec["budget"] / mean)
        self.block = max(1, fit // 2)
        b = spec["batch_size"]
        self.predownload = max(b, min(8 * b, fit // (2 * max(1, spec["workers"]))))
        ds = _mosaic_class()(remote=os.path.join(spec["root"], "mds"), local=cache, shuffle=True,
                             shuffle_seed=SEED, batch_size=b, cache_limit=spec["budget"],
                             shuffle_block_size=self.block, predownload=self.predownload)
        self.loader = StreamingDataLoader(ds, **loader_args(spec))

    def own(self):
        return {"shuffle_block_size": self.block, "predownload": self.predownload}


def _litdata_class():
    from litdata import StreamingDataset

    class LitBytes(StreamingDataset):
        def __getitem__(self, index):
            s = super().__getitem__(index)
            return s["data"], s["label"]

    return LitBytes


class LitData(_ShmCached):
    """LitData over its optimized chunks: input_dir is the storage (a local:
    URL, so chunks are copied into the cache as from a remote), the cache in
    memory (tmpfs) of the budget (max_cache_size), shuffle=True, its
    StreamingDataLoader."""

    def __init__(self, spec, cat):
        import litdata.streaming.dataset as lsd
        from litdata import StreamingDataLoader
        from litdata.streaming.resolver import Dir

        # Its constructor asks PyPI for a newer version (up to 30 s); not
        # what is measured, and not possible on an offline node.
        lsd._check_version_and_prompt_upgrade = lambda v: None
        # On several nodes LitData drops items by default so that every
        # rank gets as many (drop_last); the benchmark wants each file once.
        ds = _litdata_class()(Dir(path=self.make_cache(spec, "litdata"), url="local:" + os.path.join(spec["root"], "litdata")),
                              shuffle=True, seed=SEED, max_cache_size=spec["budget"], drop_last=False)
        self.loader = StreamingDataLoader(ds, **loader_args(spec))


def readers(spec):
    """serve --readers: the DataLoader's workers, or its process when it
    has none."""
    return max(1, spec["workers"])


class Brandrt(_System):
    """brandrt serve (one rank, under mpirun) with the spec's policy, read
    as the README shows: a BrandLoader (a DataLoader, with the same
    workers, batch size and collate as the others) over a default
    BrandDataset, which hands the files in place to the training
    process, and a BrandSampler."""

    def __init__(self, spec, cat):
        brandrt_on_path(spec)
        from brandrt.torch import BrandDataset, BrandLoader, BrandSampler

        self.make_loader = lambda sampler: BrandLoader(BrandDataset(), sampler=sampler, **loader_args(spec))
        if "master" in spec:  # on a cluster, of one node too
            return self.attach_node(spec, BrandSampler)
        self.attach = shm_dir(spec, "brandrt")
        self.stats = os.path.join(self.attach, "stats.json")
        chunks = os.path.join(spec["root"], prepare.chunks_name(spec["chunk_files"]))
        serve = spec["mpirun"] + ["-np", "1", spec["brandrt"], "serve", "--chunks", chunks,
                                  "--leave", str(spec.get("leave", 0)), "--readers", str(readers(spec))] + spec.get("serve_flags", [])
        cmd = serve + ["--mem", self.mem(spec, serve), "--epochs", str(spec["epochs"]), "--seed", str(SEED), "--stats-json", self.stats]
        self.log = open(os.path.join(self.attach, "serve.log"), "w+")
        env = dict(os.environ, BRANDRT_ATTACH=self.attach)
        self.serve = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        sock = os.path.join(self.attach, "local-0")
        deadline = time.monotonic() + 120
        while not os.path.exists(sock):
            if self.serve.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("brandrt serve did not start: %s" % self._tail())
            time.sleep(0.05)
        os.environ["BRANDRT_ATTACH"] = self.attach
        self.sampler = BrandSampler()
        self.loader = self.make_loader(self.sampler)

    @staticmethod
    def mem(spec, serve):
        """serve's --mem for the command serve: the budget, or, where the
        rank's footprint with it would not leave the cgroup room for the
        DataLoader's processes (spec's leave), the most that does
        (100%cgroup): the rank's overheads come out of the same cgroup as
        the peers' (serve --footprint says which, in the run's cgroup)."""
        mem = str(spec["budget"])
        probe = subprocess.run(serve + ["--mem", mem, "--footprint"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if probe.returncode == 0:
            return mem
        if "give it --mem" not in probe.stdout:
            raise RuntimeError("brandrt serve --footprint: %s" % probe.stdout[-2000:])
        print("brandrt: --mem %d does not leave the DataLoader's processes %d MiB of the cgroup; --mem 100%%cgroup" %
              (spec["budget"], spec.get("leave", 0) >> 20), flush=True)
        return "100%cgroup"

    def attach_node(self, spec, sampler):
        """On a cluster, the driver started serve across the nodes: read
        from this node's rank, at its default attach point."""
        from brandrt.client import default_attach_dir

        self.serve = None
        os.environ.pop("BRANDRT_ATTACH", None)
        sock = os.path.join(default_attach_dir(), "attach.sock")
        deadline = time.monotonic() + 120
        while not os.path.exists(sock):
            if time.monotonic() > deadline:
                raise RuntimeError("no brandrt rank on this node after 120 s (%s)" % sock)
            time.sleep(0.05)
        self.sampler = sampler()
        self.loader = self.make_loader(self.sampler)

    def _tail(self):
        self.log.seek(0)
        return self.log.read()[-2000:]

    def epoch(self, e):
        self.sampler.set_epoch(e)
        return self.loader

    def close(self):
        import json

        if self.serve is None:  # the driver's, on a cluster
            self._own = {}
            return
        try:
            self.serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.serve.pid, 9)
            self.serve.wait()
        self._own = {"serve_exit": self.serve.returncode, "serve_log": self._tail()}
        try:
            with open(self.stats) as f:
                self._own["stats"] = [json.loads(line) for line in f if line.strip()]
        except OSError:
            pass
        self.log.close()
        shutil.rmtree(self.attach, ignore_errors=True)

    def own(self):
        """serve's exit status, the end of its output, its statistics."""
        return self._own


class Threads(_System):
    """The reference: spec['threads'] plain threads reading the original
    files whole in a shuffled order, no DataLoader, no processes. Batches
    are only how the results are counted."""

    def __init__(self, spec, cat):
        self.ds = _Files(spec["input"], cat["files"])
        self.threads, self.batch = spec["threads"], spec["batch_size"]

    def epoch(self, e):
        order = iter(random.Random(SEED * 1000 + e).sample(range(len(self.ds)), len(self.ds)))
        lock, q = threading.Lock(), queue.Queue(maxsize=4 * self.batch)

        def work():
            while True:
                with lock:
                    i = next(order, None)
                q.put(None if i is None else self.ds[i])
                if i is None:
                    return

        for _ in range(self.threads):
            threading.Thread(target=work, daemon=True).start()
        done, batch = 0, []
        while done < self.threads:
            item = q.get()
            if item is None:
                done += 1
                continue
            batch.append(item)
            if len(batch) == self.batch:
                yield [b for b, _ in batch], [l for _, l in batch]
                batch = []
        if batch:
            yield [b for b, _ in batch], [l for _, l in batch]


SYSTEMS = {
    "threads": Threads,
    "random": Random,
    "coordl": CoorDL,
    "webdataset": WebDataset,
    "mosaic": Mosaic,
    "litdata": LitData,
    "brandrt": Brandrt,
    "noio": NoIO,
}


def make(spec, cat):
    """The system of spec['system'] (brandrt-<policy> is brandrt)."""
    name = spec["system"].split("-")[0]
    warnings.filterwarnings("ignore")
    widen_result_pipes(spec.get("pipe_size", 0))
    return SYSTEMS[name](spec, cat)


__all__ = ["SYSTEMS", "make", "collate"]
