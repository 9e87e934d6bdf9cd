"""PyTorch glue: a map-style Dataset and a Sampler that read through brandrt.

    sampler = BrandSampler()                  # this process's trace positions
    dataset = BrandDataset(transform=decode)  # ds[(epoch, sn)] -> (x, label)
    loader = BrandLoader(dataset, batch_size=64, sampler=sampler, num_workers=4)  # a DataLoader that checkpoints itself
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader: ...

A worker of that loader asks for a whole batch at once (DataLoader calls
BrandDataset.__getitems__), and the rank answers its files in any order.
BrandSampler(batch_size=64) with DataLoader(batch_size=None,
collate_fn=default_collate) does the same for PyTorch versions whose
DataLoader does not know __getitems__.

brandrt chooses which file answers a position (any unseen file of the
same memory slot): the sampler's indices are trace positions, not file
ids. Epochs count from 0 here, as with DistributedSampler; brandrt's own
count starts at 1.

To resume a job where it stopped, read through a BrandLoader (a
DataLoader over the two that counts the batches the training loop took)
and save loader.state_dict() with the model; after a restart,
loader.load_state_dict(state), with the same `brandrt serve` command (a
loop that counts its samples may save sampler.state_dict(samples)
instead): the rank waits for its training's first word, and serves the
rest of that epoch exactly as the interrupted job would have (examples/pytorch/train.py
--checkpoint). The restarted job may have another number of brandrt
ranks (a node lost), another --mem, other DataLoader workers or training
processes per node: with the window policy it serves every file of the
epoch not yet trained on once, in an order drawn from the seed, the
state and its own ranks, and the epochs after it as a job of its size
started afresh would.
"""

import io
import math
import os
import warnings

import torch.utils.data

from .client import BrandError, Client, FileSkipped
from .handed import FileTicket, HandedFile
from .inline import InlineSmall, bound as inline_bound

__all__ = ["BrandDataset", "BrandLoader", "BrandSampler", "decode_image"]


class BrandSampler(torch.utils.data.Sampler):
    """Yields (epoch, sn) for this training process's share of the rank's
    trace: positions rank, rank + num_replicas, ... (for several training
    processes per brandrt rank, e.g. under torchrun). Without local_rank,
    num_replicas and rank default to $LOCAL_WORLD_SIZE and $LOCAL_RANK, as
    torchrun and `brandrt serve --nproc-per-node N -- CMD` set them (one
    brandrt rank per node, N training processes beside it), else 1 and 0;
    with local_rank (several brandrt ranks per node), to 1 and 0.

    With order (for `brandrt serve --traces clients`), the rank's trace is
    supplied from here before each epoch: order is a sampler or iterable
    of file ids (its set_epoch, if any, is called first), or a function
    epoch -> file ids (epochs from 0). Only the process with rank 0 sends
    it; the ranks' traces must not share a file."""

    def __init__(self, attach_dir=None, local_rank=None, num_replicas=None, rank=None, timeout=120.0, batch_size=None, order=None):
        # The node's training processes share its one rank's trace, unless
        # the caller names the rank to read from (several ranks per node:
        # one training process beside each, reading all of it).
        shared = local_rank is None
        if num_replicas is None:
            num_replicas = int(os.environ.get("LOCAL_WORLD_SIZE") or 1) if shared else 1
        if rank is None:
            rank = int(os.environ.get("LOCAL_RANK") or 0) if shared else 0
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError("rank %d of %d replicas" % (rank, num_replicas))
        if batch_size is not None and batch_size < 1:
            raise ValueError("batch_size %r" % (batch_size,))
        self.batch_size, self.order = batch_size, order
        self.attach_dir, self.local_rank = attach_dir, local_rank
        self.num_replicas, self.rank, self.timeout = num_replicas, rank, timeout
        self.epoch = 0
        self._set = False  # set_epoch was called since the last iteration began
        self._ran = False  # an iteration began
        self._positions = None
        self._job = None  # (ranks, seed) of the brandrt job
        self._place = {}  # what the job puts in a saved state (Client.place)
        self._resumed = (0, 0, False)  # where the job resumed (Client.resumed)
        self._before = None  # (epoch, stretches served before this job) in a resumed epoch
        self._resume = None  # a loaded state, until its epoch begins
        self._begin, self._begun = 0, None  # the rank's position epoch _begun began at
        self._yielded = 0  # positions yielded in the current epoch
        self._warned_ahead = False  # state_dict() without samples warned
        self._sess, self._sess_pid = None, None  # see _session

    def state_dict(self, samples=None):
        """Where this process stands, to resume from after a restart:
        {"epoch", "position", "ranks", "seed", ...}, position being the
        first of the rank's trace positions not yet consumed. samples is
        how many samples this process took from its DataLoader in the
        current epoch (count them in the training loop); without it, what
        the sampler yielded, which runs ahead of training when DataLoader
        workers prefetch. Training processes of one rank step together, so
        num_replicas × samples positions were consumed; with DDP every
        rank's processes do, so one position says where the whole job was.
        The other keys say how the job planned the epoch ("dataset",
        "policy", "traces", "plan", and "before" in an epoch that was
        itself resumed on another number of ranks): a restart on another
        number of ranks replans from them which files were trained on."""
        if self._resume is not None and not samples:
            return dict(self._resume)  # loaded, and its epoch not begun yet
        if samples is None:
            samples = self._yielded
            if 0 < samples and self._positions is not None and self._begin + samples * self.num_replicas < self._positions and not self._warned_ahead:
                self._warned_ahead = True
                warnings.warn("BrandSampler.state_dict() without samples counts the positions the sampler yielded, which DataLoader "
                              "workers fetch ahead of training: a restart from it skips those; pass the samples the training loop took, "
                              "or save BrandLoader.state_dict(), which counts them", RuntimeWarning, stacklevel=2)
        n = self._positions if self._positions is not None else self._wait(self.epoch, supply=True)
        ranks, seed = self._job
        position = self._begin + samples * self.num_replicas
        state = dict(self._place)
        if position >= n:
            state.update(epoch=self.epoch + 1, position=0, ranks=ranks, seed=seed)
            return state
        state.update(epoch=self.epoch, position=position, ranks=ranks, seed=seed)
        if self._before is not None and self._before[0] == self.epoch and self._before[1]:
            state["before"] = list(self._before[1])
        return state

    def load_state_dict(self, state):
        """Resume from state_dict(): the next iteration serves the saved
        epoch from its saved position. The brandrt job must serve the
        same dataset with the same --seed and --policy
        (the rank refuses otherwise); the number of ranks may change with
        the window policy, and the number of DataLoader workers, or of
        training processes per rank, always."""
        missing = {"epoch", "position", "ranks", "seed"} - set(state)
        if missing:
            raise ValueError("a BrandSampler state needs %s" % ", ".join(sorted(missing)))
        self._resume = dict(state)
        self.set_epoch(state["epoch"])

    def set_epoch(self, epoch):
        """Serve epoch (0-based) next; without a call, epochs advance by one."""
        self.epoch, self._set = epoch, True

    def _wait(self, epoch, supply=False):
        with Client(self.attach_dir, self.local_rank) as c:
            ranks, seed, resume = c.job()
            self._job = ranks, seed
            r = self._resume
            self._place = c.place()
            if c.waits_for_start() and self.rank == 0:
                # the rank waits to be told where the job takes up
                if r is None:
                    r = c.fresh_state(epoch)
                c.start(r["epoch"] + 1, r["position"], r["ranks"], r["seed"], self.timeout, state=r)
            elif r is not None and not resume and (r["position"] > 0 or c.epoch()[0] not in (0, r["epoch"] + 1)):
                raise BrandError("this sampler resumes epoch %d at position %d (load_state_dict), but the brandrt rank at %s "
                                 "cannot resume: it serves --policy paper, --traces clients or --consume" % (r["epoch"], r["position"], c.dir))
            if supply and self.order is not None and self.rank == 0 and c.epoch()[0] < epoch + 1:
                c.set_trace(epoch + 1, self._files(epoch))
            self._positions = c.wait_epoch(epoch + 1, self.timeout, offer=False)
            self._resumed = c.resumed()
        return self._positions

    def _files(self, epoch):
        if callable(self.order) and not hasattr(self.order, "__iter__"):
            return self.order(epoch)
        if hasattr(self.order, "set_epoch"):
            self.order.set_epoch(epoch)
        return list(self.order)

    def end_epoch(self):
        """Tell the rank this process reads no more of the current epoch
        (after a crash of a DataLoader, or an early stop). With several
        training processes per rank, it ends the epoch for this process's
        share alone: the rank ends the epoch once the others have read
        theirs (or ended it too) and the requests in flight are answered."""
        self._session().end_epoch(self.epoch + 1, replica=self.rank, replicas=self.num_replicas)

    def _session(self):
        """The client by which this process tells its rank, for as long as
        it lives, which share of the trace it reads: should the process die
        with positions of its share still to come, the rank ends the job
        (within seconds, saying so) instead of waiting for them forever. A
        new sampler of the same share may take over within 5 s."""
        if self._sess is None or self._sess_pid != os.getpid():
            self._sess = Client(self.attach_dir, self.local_rank)
            self._sess.declare(self.rank, self.num_replicas)
            self._sess_pid = os.getpid()
        return self._sess

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_sess"], state["_sess_pid"] = None, None
        return state

    def __iter__(self):
        # A generator: DataLoader may create an iterator it never uses, and
        # only one that runs may move to the next epoch.
        if self._ran and not self._set:
            self.epoch += 1
        self._set, self._ran = False, True
        self._session()
        n = self._wait(self.epoch, supply=True)
        self._begin, self._begun, self._yielded = self._first(), self.epoch, 0
        # positions rank, rank + R, ... from the epoch's beginning
        first = self._begin + (self.rank - self._begin) % self.num_replicas
        sns = range(first, n, self.num_replicas)
        if self.batch_size is None:
            for sn in sns:
                self._yielded += 1
                yield self.epoch + 1, sn
            return
        for i in range(0, len(sns), self.batch_size):
            batch = list(sns[i : i + self.batch_size])
            self._yielded += len(batch)
            yield self.epoch + 1, batch

    def _first(self):
        """The position this epoch begins at: in a loaded state's epoch,
        where the rank resumed it."""
        r, self._resume = self._resume, None
        if r is None or r["epoch"] != self.epoch:
            return 0
        epoch, _, rest = self._resumed
        if epoch == self.epoch + 1:
            before = list(r.get("before", []))
            if rest:  # the rank serves the files left on its own plan, from 0
                before.append(dict(r["plan"], position=r["position"]))
            self._before = (self.epoch, before)
        return self._resumed_at(r)

    def _resumed_at(self, r):
        """Where this epoch begins for the loaded state r of this epoch:
        where the rank resumed it, or r's position when the rank did not
        resume (_wait says so)."""
        epoch, first, _ = self._resumed
        return first if epoch == self.epoch + 1 else r["position"]

    def __len__(self):
        n = self._positions if self._positions is not None else self._wait(self.epoch, supply=True)
        if self._resume is not None and self._resume["epoch"] == self.epoch:
            begin = self._resumed_at(self._resume)
        else:
            begin = self._begin if self._begun == self.epoch else 0
        first = begin + (self.rank - begin) % self.num_replicas
        mine = max(0, math.ceil((n - first) / self.num_replicas))
        return mine if self.batch_size is None else math.ceil(mine / self.batch_size)


class BrandDataset(torch.utils.data.Dataset):
    """ds[(epoch, sn)] -> (transform(data), label), or with with_id
    (transform(data), label, file id). data is a memoryview of the file's
    bytes in shared memory, valid only during transform; without a
    transform the item is bytes (one copy). ds[(epoch, [sn, ...])] reads
    the positions together and returns their items in order. Each process
    attaches on first use, so the dataset can go to DataLoader workers.

    With verify, every file's CRC32C is checked against the rank's index
    (Client's verify: about 0.5 ms for a 110 KB file with numpy, less
    with the crc32c module installed); a mismatch raises BrandError.

    A file the rank skipped, damaged in its store (`brandrt serve
    --on-damage skip`), is left out of a batch read together (the batch is
    shorter, which DataLoader's default_collate takes), with a warning
    naming it once per file; ds[(epoch, sn)] alone raises FileSkipped.

    Without a transform, DataLoader workers hand the files the rank keeps
    in shared memory to the training process in place (brandrt.handed)
    wherever that is safe: read through a BrandLoader (whose collate
    keeps files as lists), by workers the training process started (not
    through a forkserver). The training process then gets each such file
    as a HandedFile, a read-only bytes-like mapping of its pages that
    stays valid while referenced, instead of a bytes object that crossed
    the DataLoader's pipe (the other files still come as bytes). In a
    worker, such an item is a FileTicket (len, slicing, bytes()), for a
    collate_fn that looks at it there. Elsewhere (a plain DataLoader,
    whose default_collate takes bytes but no ticket) files come as bytes;
    in_place=True hands them in place there too (with a collate_fn that
    keeps them, as brandrt.torch.collate does), in_place=False never.
    With a transform, workers decode the files where they lie in shared
    memory and hand over what it returns, as usual. The rank says, at
    the end, how many clients took each path."""

    def __init__(self, transform=None, attach_dir=None, local_rank=None, timeout=None, with_id=False, verify=False, in_place=None):
        self.transform, self.with_id, self.verify = transform, with_id, verify
        self.in_place = in_place
        self.attach_dir, self.local_rank, self.timeout = attach_dir, local_rank, timeout
        self._client, self._pid = None, None
        self._collated = False  # a BrandLoader collates the items (collate keeps tickets)

    def _attached(self):
        if self._pid != os.getpid():
            self._client, self._pid = Client(self.attach_dir, self.local_rank, self.timeout, verify=self.verify), os.getpid()
            in_place = self._collated if self.in_place is None else self.in_place
            if in_place and self.transform is None and _hands_to_parent():
                self._client.hand_over()
        return self._client

    def _item(self, c, data):
        """What position's data becomes: a ticket for a handed file, the
        transform's result, or a copy."""
        if c.handed is not None:
            place, token = c.handed
            return FileTicket(c, place, token, len(data))
        return self.transform(data) if self.transform else bytes(data)

    def __getitem__(self, index):
        try:
            epoch, sn = index
        except (TypeError, ValueError):
            raise BrandError("BrandDataset takes (epoch, sn) from BrandSampler, not %r" % (index,)) from None
        c = self._attached()
        if isinstance(sn, (list, tuple)):
            return self._many(c, epoch, sn)
        c.flush()  # the releases of files this worker kept (rare)
        fid, label, data = c.read(sn, epoch)
        try:
            item = self._item(c, data)
        finally:
            c.release()
        return (item, label, fid) if self.with_id else (item, label)

    def __getitems__(self, indices):
        """The items of a batch of (epoch, sn), read together: DataLoader's
        workers call this, when it is defined, for a whole batch of the
        sampler's positions. Asking for them at once, rather than one after
        the other, lets the rank answer them in one go: several times the
        files per second from memory."""
        # Single positions of one epoch go together; anything else (batches
        # from a batching sampler, mixed epochs) item by item.
        if all(isinstance(i, tuple) and len(i) == 2 and not isinstance(i[1], (list, tuple)) for i in indices):
            epochs = {e for e, _ in indices}
            if len(epochs) == 1:
                return self._many(self._attached(), epochs.pop(), [sn for _, sn in indices])
        items = []
        for i in indices:
            try:
                items.append(self[i])
            except FileSkipped as e:
                self._attached().warn_skipped(e.sn, e.file_id, e.message)
        return items

    def _many(self, c, epoch, sns):
        """The items of positions sns, in order, less those of files the
        rank skipped (Client.read_many warns of them)."""
        items = {}
        c.flush()  # the releases of files this worker kept (rare)

        def use(sn, fid, label, data):
            item = self._item(c, data)
            items[sn] = (item, label, fid) if self.with_id else (item, label)

        c.read_many(sns, epoch, use)
        return [items[sn] for sn in sns if sn in items]

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_client"], state["_pid"] = None, None
        return state


class BrandLoader(torch.utils.data.DataLoader):
    """A DataLoader over a BrandDataset and a BrandSampler that checkpoints
    itself: state_dict() says where the training loop stands, counting
    the batches this loader handed it, not what its workers fetched
    ahead (prefetch_factor batches each); load_state_dict() takes up
    from there after a restart. The names are those of torchdata's
    StatefulDataLoader, which Lightning's and Accelerate's checkpointing
    call on a loader that has them.

        loader = BrandLoader(BrandDataset(transform=decode), batch_size=64, num_workers=4)
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for x, y in loader:
                ...
                torch.save({"model": model.state_dict(), "loader": loader.state_dict()}, path)
        # after a restart, before the first epoch:
        loader.load_state_dict(torch.load(path)["loader"])

    dataset defaults to BrandDataset(), sampler to BrandSampler(),
    collate_fn to brandrt.torch.collate (files as lists, in place where
    they can be: BrandDataset); the other arguments are DataLoader's (no
    batch_sampler: the loader counts the sampler's positions in its
    batches). With workers, the small tensors of each collated batch
    (its labels) travel inside the batch's pickle rather than by file
    descriptor, several times cheaper (brandrt.inline). The state is the
    sampler's (BrandSampler.state_dict), a dict that pickles and goes
    through JSON; a job restarted from it serves the rest of the saved
    epoch as the interrupted one would have."""

    def __init__(self, dataset=None, batch_size=1, sampler=None, **kwargs):
        if kwargs.get("batch_sampler") is not None or kwargs.get("shuffle"):
            raise ValueError("BrandLoader takes neither batch_sampler nor shuffle: its BrandSampler orders the positions, and the loader counts them")
        dataset = BrandDataset() if dataset is None else dataset
        sampler = BrandSampler() if sampler is None else sampler
        if not isinstance(sampler, BrandSampler):
            raise TypeError("BrandLoader needs a BrandSampler, not %s" % type(sampler).__name__)
        if kwargs.get("collate_fn") is None and batch_size is not None:
            kwargs["collate_fn"] = collate
        fn = kwargs.get("collate_fn")
        if fn is not None and kwargs.get("num_workers", 0) > 0 and not isinstance(fn, InlineSmall):
            # labels with their batch, not by file descriptor
            kwargs["collate_fn"] = InlineSmall(fn, inline_bound(kwargs["num_workers"], kwargs.get("prefetch_factor")))
        if isinstance(dataset, BrandDataset):
            dataset._collated = True  # its workers hand files in place (unless in_place=False)
        super().__init__(dataset, batch_size=batch_size, sampler=sampler, **kwargs)
        self._handed = 0  # batches handed to the training loop in the current iteration
        self._done = False  # the current iteration handed every batch

    def _per_batch(self):
        """The sampler's positions in each batch but the last."""
        return (self.batch_size or 1) * (self.sampler.batch_size or 1)

    def __iter__(self):
        # A generator: the count moves only as the training loop takes a
        # batch, whatever the workers have fetched ahead.
        self._handed, self._done = 0, False
        for batch in super().__iter__():
            self._handed += 1
            yield batch
        self._done = True

    def set_epoch(self, epoch):
        """Serve epoch (0-based) next: BrandSampler.set_epoch."""
        self.sampler.set_epoch(epoch)

    def state_dict(self):
        """Where the training loop stands: the sampler's state after the
        positions of the batches it took in the current epoch (all of
        them once the epoch's iteration ended, so the state names the
        next epoch)."""
        s = self.sampler
        taken = s._yielded if self._done else min(self._handed * self._per_batch(), s._yielded)
        return s.state_dict(taken)

    def load_state_dict(self, state):
        """Take up from state_dict() after a restart: the next iteration
        serves the saved epoch from the saved position
        (BrandSampler.load_state_dict)."""
        self.sampler.load_state_dict(state)
        self._handed, self._done = 0, False


def collate(batch):
    """DataLoader's default_collate, but files stay as they come, in a
    list: bytes, memoryviews and the FileTickets of files handed in place
    (HandedFiles once in the training process), which default_collate of
    torch 1.13 refuses. Labels and ids become tensors, as there."""
    elem = batch[0]
    if isinstance(elem, _FILE_TYPES):
        return list(batch)
    if isinstance(elem, tuple) and not hasattr(elem, "_fields"):
        return [collate(list(field)) for field in zip(*batch)]
    return torch.utils.data.default_collate(batch)


_FILE_TYPES = (bytes, bytearray, memoryview, FileTicket, HandedFile)


def _hands_to_parent():
    """Whether this is a DataLoader worker whose batches go to its parent
    process, the one the rank hands files to (not so for workers started
    by a forkserver)."""
    import multiprocessing

    parent = multiprocessing.parent_process()
    return torch.utils.data.get_worker_info() is not None and parent is not None and parent.pid == os.getppid()


def decode_image(data, mode="RGB"):
    """A PIL image from a file's bytes (one copy, into the decoder's buffer)."""
    from PIL import Image

    img = Image.open(io.BytesIO(data))
    return img.convert(mode)
