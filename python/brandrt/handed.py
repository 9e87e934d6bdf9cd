"""Files handed from a DataLoader worker to its training process in place.

Without this, a worker copies each file out of shared memory into a bytes
object, pickles the batch, and writes it down a pipe, which the training
process reads and unpickles: two more copies and a system call every few
pages, for every file. With BrandDataset(in_place=True) the rank hands a
worker's files that live in its shared arena on to the worker's parent
(Client.hand_over); the worker's item is then a FileTicket, a few dozen
bytes on the pipe, and the training process unpickles it as a HandedFile:
a read-only mapping of the file's own pages in the arena.

A HandedFile is a bytes-like object (mmap): len(), slicing to bytes,
bytes(f), memoryview(f), io.BytesIO(f), PIL, numpy.frombuffer,
torch.frombuffer (a read-only buffer) all work, and == compares contents
with any bytes-like object. It stays valid for as long as anything refers
to it (a memoryview, a tensor made with frombuffer); when the last
reference goes, the rank may reuse its bytes. Each file is one reference
at the rank: the ticket's, moved to whoever unpickles it first; pickling
it again (or a HandedFile) adds one first.

The rank bounds what its training processes hold this way beyond its
budget (serve --hand-mem; by default the batches a DataLoader has in
flight, and no bound when the budget holds the rank's whole shard); past
that, files come as copies, as without in_place. A process that dies
releases all it held.
"""

import mmap
import os
import threading
import weakref

from .client import BrandError, Client

__all__ = ["HandedFile", "FileTicket"]


class FileTicket:
    """A handed file in the worker that read it: its size, place and
    token. It reads like bytes in the worker (len, indexing and slicing,
    bytes(t)); pickled, it becomes a HandedFile in the process that
    unpickles it. Dropped without being pickled, it releases its file."""

    __slots__ = ("_client", "_place", "_size", "_token", "_sent", "__weakref__")

    def __init__(self, client, place, token, size):
        self._client, self._place, self._token, self._size, self._sent = client, place, token, size, False

    def __len__(self):
        return self._size

    def _view(self):
        return self._client._arena[self._place : self._place + self._size]

    def __getitem__(self, i):
        got = self._view()[i]
        return bytes(got) if isinstance(i, slice) else got

    def __bytes__(self):
        return bytes(self._view())

    def __eq__(self, other):
        try:
            return self._view() == memoryview(other)
        except TypeError:
            return NotImplemented

    __hash__ = None

    def __repr__(self):
        return "<brandrt file of %d bytes, handed on to the training process>" % self._size

    def __reduce__(self):
        if self._sent:  # a second receiver: one more reference
            self._client.hold(self._token, self._place)
        self._sent = True
        return _reduced(self._client, self._place, self._size, self._token)

    def __del__(self):
        if not self._sent:
            self._client.let_go(self._token, self._place)


class HandedFile(mmap.mmap):
    """A file handed on to this process: a read-only mapping of its bytes
    in the rank's shared memory, valid while referenced."""

    __slots__ = ("_owner", "_token", "_place")

    def __new__(cls, owner, place, size, token):
        self = super().__new__(cls, owner.client.arena_fd, size, mmap.MAP_SHARED, mmap.PROT_READ, offset=place)
        self._owner, self._token, self._place = owner, token, place
        return self

    def __init__(self, *args):
        pass

    def __eq__(self, other):
        try:
            return memoryview(self) == memoryview(other)
        except TypeError:
            return NotImplemented

    __hash__ = None

    def __repr__(self):
        return "<brandrt file of %d bytes in shared memory>" % len(self)

    def __reduce__(self):
        self._owner.client.hold(self._token, self._place)
        return _reduced(self._owner.client, self._place, len(self), self._token)

    def __del__(self):
        owner = getattr(self, "_owner", None)
        if owner is not None:
            owner.client.let_go(self._token, self._place)


class _Owner:
    """This process's attachment for the files handed to it: the client
    whose requests release them, its arena descriptor, and a thread that
    sends the releases every FLUSH_S (a file is released when its last
    reference goes, which may be in any thread)."""

    FLUSH_S = 0.01

    def __init__(self, attach_dir, local_rank):
        self.client = Client(attach_dir, local_rank, keep_arena_fd=True)
        if self.client.arena_fd is None:
            self.client.close()
            raise BrandError("%s: the rank handed over a file but shares no memory with this process" % self.client.dir)
        self._stop = threading.Event()
        threading.Thread(target=self._flushing, args=(weakref.ref(self), self._stop), daemon=True,
                         name="brandrt-release").start()

    @staticmethod
    def _flushing(ref, stop):
        while not stop.wait(_Owner.FLUSH_S):
            owner = ref()
            if owner is None:
                return
            try:
                owner.client.flush()
            except Exception:
                return  # the rank went: it released everything
            del owner

    def __del__(self):
        self._stop.set()


# releases gathered before unpickling a file sends them (the thread sends
# the rest): the rank lets one process hold only so much
_FLUSH_AT = 16

_owners = {}  # (pid, attach dir, local rank) -> _Owner
_owners_lock = threading.Lock()


def _owner(attach_dir, local_rank):
    key = (os.getpid(), attach_dir, local_rank)
    with _owners_lock:
        o = _owners.get(key)
        if o is None:
            for k in [k for k in _owners if k[0] != key[0]]:  # inherited by fork
                del _owners[k]
            o = _owners[key] = _Owner(attach_dir, local_rank)
    return o


def _reduced(client, place, size, token):
    """What pickles a handed file: whoever unpickles it rebuilds it from
    the rank client is attached to."""
    return _rebuild, (client.dir, client.local_rank, place, size, token)


def _rebuild(attach_dir, local_rank, place, size, token):
    o = _owner(attach_dir, local_rank)
    o.client.flush(at_least=_FLUSH_AT)  # the files of batches gone, as the next come
    if size == 0:
        o.client.let_go(token, place)
        return b""
    return HandedFile(o, place, size, token)
