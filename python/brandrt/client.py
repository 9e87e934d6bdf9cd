"""Attach to a brandrt rank and read files through shared memory."""

import array
import contextlib
import ctypes
import json
import logging
import mmap
import os
import select
import socket
import stat
import threading
import time
import warnings

from . import layout as L

__all__ = ["Client", "BrandError", "RankGone", "FileSkipped", "default_attach_dir"]


class BrandError(Exception):
    """A request brandrt could not answer, or a broken attach."""


class RankGone(BrandError):
    """The brandrt rank this client was attached to went away."""


class FileSkipped(BrandError):
    """The rank skipped the file at position sn, damaged in its store
    (`brandrt serve --on-damage skip`): str() is the rank's message, which
    names the file; sn, file_id, label and message are attributes."""

    def __init__(self, sn, file_id, label, message):
        super().__init__(message)
        self.sn, self.file_id, self.label, self.message = sn, file_id, label, message


def default_attach_dir(local_rank=None):
    """<base>/local-<local rank>: base is $BRANDRT_ATTACH, else
    /dev/shm/brandrt-<uid>.

    The local rank defaults to $BRANDRT_LOCAL_RANK (which `brandrt serve
    -- CMD` sets for the training command it starts), else 0: with one
    brandrt rank per node, that is the node's rank. Under several ranks
    per node, pass the one to use.
    """
    base = os.environ.get(L.ENV_ATTACH) or "/dev/shm/brandrt-%d" % os.getuid()
    if local_rank is None:
        local_rank = int(os.environ.get(L.ENV_LOCAL_RANK) or 0)
    return os.path.join(base, "local-%d" % local_rank)


def _user(uid):
    """"uid N (name)", or "uid N" when N has no name."""
    try:
        import pwd

        return "uid %d (%s)" % (uid, pwd.getpwuid(uid).pw_name)
    except (ImportError, KeyError):
        return "uid %d" % uid


def _check_dir(path):
    """Raise BrandError unless path is a directory, not a symbolic link,
    owned by this process's user and writable by no one else (as the rank
    checks it too): through any other, another user could put a socket of
    its own in the rank's place and feed training its own data. A path
    that does not exist is left to connect() to report."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    me = os.geteuid()
    if stat.S_ISLNK(st.st_mode):
        problem = "is a symbolic link (to %s)" % os.readlink(path)
    elif not stat.S_ISDIR(st.st_mode):
        problem = "is not a directory (mode %s)" % stat.filemode(st.st_mode)
    elif st.st_uid != me:
        problem = "is owned by %s, mode %s, not by %s, this process's" % (_user(st.st_uid), stat.filemode(st.st_mode), _user(me))
    elif st.st_mode & 0o022:
        problem = "is writable by group or others (mode %s, owner %s)" % (stat.filemode(st.st_mode), _user(st.st_uid))
    else:
        return
    raise BrandError("attach directory %s %s: another user could serve training processes data of its own through it; "
                     "remove it (rm -r %s) or set $%s to a directory of your own" % (path, problem, path, L.ENV_ATTACH))


# Seconds a client waits for the rank's welcome.
_WELCOME_WAIT = 10.0
# The most bytes of text a refusal carries.
_MAX_REFUSAL = 4000


def _refusal(msg):
    """The rank's reason when msg is a refusal (the rank cannot take this
    client: out of descriptors or memory, or of another release), else
    None. A refusal of any protocol version is read: its layout stays."""
    if len(msg) < L.REFUSAL_BYTES or msg[:8] != L.REFUSAL_MAGIC:
        return None
    _, _, n = L.REFUSAL.unpack_from(msg)
    if len(msg) != L.REFUSAL_BYTES + n:
        return None
    return msg[L.REFUSAL_BYTES :].decode("utf-8", "replace")


_slow_crc_warned = False


def _warn_slow_crc(backend):
    """Say once per process that checksums run without a C module."""
    global _slow_crc_warned
    if backend.endswith("module") or _slow_crc_warned:
        return
    _slow_crc_warned = True
    warnings.warn("brandrt: verify checks CRC32C in %s (~200 MB/s for 110 KB files; the rank does ~11 GB/s): neither the crc32c nor "
                  "the google-crc32c module is installed here; pip install crc32c (the brandrt package declares it)" % backend,
                  RuntimeWarning, stacklevel=3)


def _check_peer(ucred, who):
    """Raise BrandError unless the peer whose SO_PEERCRED bytes are ucred
    runs as this process's user; who names it ("the rank")."""
    pid, uid, _ = L.UCRED.unpack(ucred)
    if uid != os.geteuid():
        raise BrandError("%s of pid %d runs as %s, not as %s, this process's" % (who, pid, _user(uid), _user(os.geteuid())))


_libc = ctypes.CDLL(None, use_errno=True)
_SYS_FUTEX = 202  # x86-64
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
# Seconds a client waits for a reply before it says what the job waits
# for (ranks without training), when the rank says it waits for any.
_TELL_AFTER = 5.0
# Requests written before a sleeping rank is woken, unless the client
# waits for a reply first.
_WAKE_BATCH = 4
# requests that wait for a later wake: reads (see _push), references
_QUIET = (L.KIND_READ, L.KIND_HOLD, L.KIND_RELEASE)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class Client:
    """One process's attachment to the brandrt rank of its node.

    read(sn) returns (file_id, label, data) where data is a memoryview
    over shared memory (the client's ring, or the rank's arena where it
    keeps the file), valid until the next read or release: use it
    (decode, copy) before asking for the next file. A Client belongs to
    one process: DataLoader workers each make their own.

    With verify, every file's bytes are checked against the CRC32C the
    rank's index holds for it (brandrt.crc32c: about 0.5 ms for a 110 KB
    file with numpy, less with the crc32c module); a mismatch raises
    BrandError naming the file, its position and both checksums.
    """

    def __init__(self, attach_dir=None, local_rank=None, timeout=None, verify=False, keep_arena_fd=False):
        self.dir = attach_dir or default_attach_dir(local_rank)
        self.local_rank = local_rank
        self.timeout = timeout
        self.verify = verify
        if verify:
            from . import crc32c  # numpy, imported only for this

            self._crc32c = crc32c.crc32c
            _warn_slow_crc(crc32c.backend)
        self._warned = set()  # file ids of skipped files warned about
        self._sock = None
        path = os.path.join(self.dir, L.SOCKET_NAME)
        # What is opened on the way is closed again if a later step fails.
        with contextlib.ExitStack() as undo:
            self._sock = self._connect(path)
            undo.callback(self._sock.close)
            undo.callback(setattr, self, "_sock", None)  # close() then has nothing to do
            self._map(path, *self._handshake(path), keep_arena_fd, undo)
            undo.pop_all()
        self._bind_counters()
        self._read_at = self._data_head.value
        self._pending = {}  # sn -> reply that arrived before it was asked for by read()
        self._held = None  # the record whose bytes the caller may still use
        # (place, token) of the last record returned when the rank handed
        # its file on (hand_over), else None
        self.handed = None
        self._let_go = []  # (token, place) of handed files to release
        self._push_lock = threading.Lock()  # requests come from any thread
        # reads asked for and replies taken (by next()), and the threads
        # inside next(): see _check_unread
        self._asked = self._got = self._readers = 0

    def _connect(self, path):
        """A socket connected to the rank's attach socket at path, once the
        attach directories and the rank's user are what they must be."""
        for d in (os.path.dirname(os.path.normpath(self.dir)), self.dir):
            _check_dir(d)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with contextlib.ExitStack() as undo:
            undo.callback(sock.close)
            try:
                sock.connect(path)
            except OSError as e:
                raise BrandError("cannot attach to %s: %s (is brandrt serve running on this node?)" % (path, e)) from None
            try:
                _check_peer(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, L.UCRED.size), "the rank")
            except BrandError as e:
                raise BrandError("cannot attach to %s: %s" % (path, e)) from None
            undo.pop_all()
        return sock

    def _handshake(self, path):
        """Say hello to the rank at path and return its welcome (message,
        descriptors); raise BrandError with the rank's reason when it
        refuses this client, or when no welcome comes."""
        try:
            self._sock.sendall(L.HELLO.pack(L.HELLO_MAGIC, L.VERSION, os.getpid(), L.RELEASE.encode()))
        except OSError as e:  # the rank may refuse this client before its hello
            self._sock.settimeout(1.0)
            try:
                msg, fds = self._answer()
            except OSError:
                msg, fds = b"", []
            self._refused(path, msg, fds)
            raise BrandError("%s: cannot send the rank a hello: %s" % (path, e)) from None
        self._sock.settimeout(_WELCOME_WAIT)
        try:
            msg, fds = self._answer()
        except OSError as e:
            raise BrandError("%s: no welcome from the rank: %s" % (path, e)) from None
        self._sock.settimeout(None)
        self._refused(path, msg, fds)
        return msg, fds

    def _refused(self, path, msg, fds):
        """Raise BrandError with the rank's reason when msg is a refusal,
        closing fds."""
        why = _refusal(msg)
        if why is None:
            return
        for fd in fds:
            os.close(fd)
        raise BrandError("%s: the rank refused this client: %s" % (path, why))

    def _map(self, path, msg, fds, keep_arena_fd, undo):
        """Map the ring and the arena whose descriptors came with the
        welcome msg (closing them); undo unmaps them should a later step
        fail."""
        try:
            if len(msg) != L.WELCOME_BYTES or msg[:8] != L.WELCOME_MAGIC or not fds:
                raise BrandError("%s: the rank did not welcome this client" % path)
            _, version, self.client_id, self.rank, size, arena, release = L.WELCOME.unpack(msg)
            release = release.rstrip(b"\0").decode("utf-8", "replace")
            if version != L.VERSION or release != L.RELEASE:
                raise BrandError("%s: the rank is brandrt %s (attach protocol %d) and this client brandrt %s (protocol %d): "
                                 "pip install the client of the rank's release" % (path, release, version, L.RELEASE, L.VERSION))
            self._mm = mmap.mmap(fds[0], size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            undo.callback(self._mm.close)
            # Files the rank keeps in its arena arrive as their place in it.
            self._arena_mm = mmap.mmap(fds[1], arena, mmap.MAP_SHARED, mmap.PROT_READ) if arena and len(fds) > 1 else None
            if self._arena_mm is not None:
                undo.callback(self._arena_mm.close)
            # brandrt.handed maps single files of the arena by this one
            self.arena_fd = os.dup(fds[1]) if keep_arena_fd and self._arena_mm is not None else None
            if self.arena_fd is not None:
                undo.callback(os.close, self.arena_fd)
        except OSError as e:
            raise BrandError("%s: cannot map the shared memory the rank handed over: %s" % (path, e)) from None
        finally:
            for fd in fds:
                os.close(fd)
        if self._mm[:8] != L.RING_MAGIC:
            raise BrandError("%s: the shared ring has no brandrt header" % path)
        self._slots = L.U32.unpack_from(self._mm, L.OFF_SLOTS)[0]
        self._data_off, self._data_bytes = L.U64X2.unpack_from(self._mm, L.OFF_DATA_OFF)

    def _bind_counters(self):
        """Views of the ring and the arena, and of the ring's counters."""
        self._arena = memoryview(self._arena_mm) if self._arena_mm is not None else None
        self._buf = memoryview(self._mm)
        # The counters change under the other side's feet: each is read and
        # written whole through a ctypes view (one aligned load or store on
        # x86-64), never byte by byte as struct would.
        self._c = {off: ctypes.c_uint32.from_buffer(self._mm, off)
                   for off in (L.OFF_REQ_HEAD, L.OFF_REQ_TAIL, L.OFF_REP_HEAD, L.OFF_RANK_SLEEPING,
                               L.OFF_CLIENT_SLEEPING, L.OFF_EPOCH, L.OFF_TRACE_LEN, L.OFF_RANKS, L.OFF_RESUME,
                               L.OFF_RESUMED_EPOCH, L.OFF_RESUMED_FROM, L.OFF_RESUMED_REST, L.OFF_EPOCHS, L.OFF_JOB_BYTES,
                               L.OFF_AWAITED, L.OFF_AWAITED_FIRST)}
        self._c.update({off: ctypes.c_uint64.from_buffer(self._mm, off) for off in (L.OFF_DATA_HEAD, L.OFF_DATA_TAIL)})
        # The counters of the hot path, bound once.
        self._req_head, self._req_tail = self._c[L.OFF_REQ_HEAD], self._c[L.OFF_REQ_TAIL]
        self._data_head, self._data_tail = self._c[L.OFF_DATA_HEAD], self._c[L.OFF_DATA_TAIL]
        self._rank_sleeping = self._c[L.OFF_RANK_SLEEPING]

    def _answer(self):
        """The rank's answer to the hello: (message, descriptors). A rank
        that closed the connection with the hello unread (a refusal)
        resets it, and the kernel says so once before it hands over what
        the rank sent: the read is tried again then."""
        try:
            msg, fds, _, _ = socket.recv_fds(self._sock, L.REFUSAL_BYTES + _MAX_REFUSAL, 2)
        except ConnectionResetError:
            msg, fds, _, _ = socket.recv_fds(self._sock, L.REFUSAL_BYTES + _MAX_REFUSAL, 2)
        return msg, fds

    # counters
    def _u32(self, off):
        return self._c[off].value

    def _put32(self, off, v):
        self._c[off].value = v & 0xFFFFFFFF

    # epochs
    def epoch(self):
        """(epoch, positions): the epoch the rank serves and its trace length."""
        return self._u32(L.OFF_EPOCH), self._u32(L.OFF_TRACE_LEN)

    def epochs(self):
        """The job's last epoch (`brandrt serve --epochs`); 0 from a rank
        that publishes none."""
        return self._u32(L.OFF_EPOCHS)

    def _check_epoch(self, epoch):
        last = self.epochs()
        if last and epoch > last:
            raise BrandError("epoch %d is past the job's last, epoch %d (brandrt serve --epochs %d)" % (epoch, last, last))

    def wait_epoch(self, epoch, timeout=60.0, offer=True):
        """Wait until the rank serves epoch (or a later one); return its
        positions. An epoch past the job's last fails at once. A rank that
        waits for its clients' first word (started without --resume) is
        told to start fresh at epoch, unless offer is False (a process that
        waits while another says where the job takes up)."""
        self._check_epoch(epoch)
        if offer and self._u32(L.OFF_RESUME) == L.RESUME_FIRST_WORD:
            state = self.fresh_state(epoch - 1)
            self.start(epoch, 0, state["ranks"], state["seed"], timeout, state=state)
        end = time.monotonic() + timeout
        while True:
            e, n = self.epoch()
            if e >= epoch:
                if e > epoch:
                    raise BrandError("brandrt already serves epoch %d, not %d" % (e, epoch))
                return n
            self._check_alive()
            if time.monotonic() > end:
                raise BrandError("epoch %d did not start within %.0f s" % (epoch, timeout))
            time.sleep(0.01)

    def set_trace(self, epoch, files, timeout=None):
        """Supply the rank's trace of epoch: the file ids its training
        processes will ask for, in that order (for `brandrt serve --traces
        clients`; one process per rank supplies it). Returns once every
        rank has its trace and the epoch starts. Raises BrandError when the
        rank refuses it: an epoch already served, a second trace for the
        epoch, or traces of the ranks that share a file or name one out of
        range (then every rank's client is refused, and each must supply
        a new trace)."""
        ids = array.array("i", files) if not hasattr(files, "astype") else array.array("i", files.astype("<i4").tobytes())
        fd = os.memfd_create("brandrt-trace", os.MFD_CLOEXEC)
        try:
            view = memoryview(ids).cast("B")
            while view:
                view = view[os.write(fd, view):]
            hdr = L.TRACE.pack(L.TRACE_MAGIC, L.VERSION, epoch, len(ids), 0)
            socket.send_fds(self._sock, [hdr], [fd])
        finally:
            os.close(fd)
        self._verdict(epoch, "the trace of epoch %d" % epoch, timeout)

    def job(self):
        """(ranks, seed, resume): the job's number of ranks and --seed, and
        whether the rank can resume (it takes a start)."""
        ranks, resume = self._u32(L.OFF_RANKS), self._u32(L.OFF_RESUME)
        seed = L.U64.unpack_from(self._buf, L.OFF_SEED)[0]
        return ranks, seed, resume != L.RESUME_NONE

    def place(self):
        """What the job puts in the states its training processes save
        (BrandSampler.state_dict): the dataset, the policy, where traces
        come from and how the epochs are planned; {} from a rank that
        publishes none."""
        n = self._u32(L.OFF_JOB_BYTES)
        if n == 0 or n > L.HEADER_BYTES - L.OFF_JOB:
            return {}
        return json.loads(bytes(self._buf[L.OFF_JOB : L.OFF_JOB + n]).decode())

    def fresh_state(self, epoch):
        """The saved state (a BrandSampler's, epoch from 0) of epoch's
        beginning on this job's plan: what a fresh start offers."""
        ranks, seed, _ = self.job()
        return dict(self.place(), epoch=epoch, position=0, ranks=ranks, seed=seed)

    def resumed(self):
        """(epoch, first, rest): the epoch (from 1) the job resumed, 0 if
        none; the first position of this rank's trace asked for in it; and
        whether that epoch goes on on this job's plan of the files left (a
        state saved on another number of ranks or --mem) rather than on
        the plan of the job that saved it."""
        epoch = self._u32(L.OFF_RESUMED_EPOCH)
        return epoch, self._u32(L.OFF_RESUMED_FROM), self._u32(L.OFF_RESUMED_REST) == 1

    def waits_for_start(self):
        """Whether the rank still waits to be told where the job takes up
        (start()): started with --resume it insists on a start; without,
        a read from a client that offered none starts the job fresh. Once
        its first epoch has started, it no longer waits."""
        return self._u32(L.OFF_RESUME) in (L.RESUME_WAITING, L.RESUME_FIRST_WORD)

    def start(self, epoch, position, ranks, seed, timeout=None, state=None):
        """Tell a rank that waits for a start where the job takes up: epoch
        (from 1), the first position of the rank's trace its training
        processes will ask for, and the ranks and seed of the job the
        position was saved in; state, the saved BrandSampler state they
        come from, whose plan lets the rank resume on another number of
        ranks. Returns once every rank was told and the epoch starts.
        Raises BrandError when the rank refuses: another dataset, policy or
        seed, ranks that the state cannot resume on, an epoch it does not
        serve, a position past its trace, a rank that cannot resume, ranks
        told different states, or a start other than the one the rank
        already resumed at."""
        body = b"" if state is None else json.dumps(state, sort_keys=True).encode()
        hdr = L.START.pack(L.START_MAGIC, L.VERSION, epoch, position, ranks, seed, len(body))
        self._sock.sendall(hdr + body)
        self._verdict(epoch, "resuming epoch %d at position %d" % (epoch, position), timeout)

    def _verdict(self, epoch, what, timeout):
        """Wait for the rank's verdict on what was offered for epoch."""
        began = time.monotonic()
        end = None if timeout is None else began + timeout
        told = False
        while True:
            ready, _, _ = select.select([self._sock], [], [], 0.5)
            if not ready and not told and time.monotonic() - began > _TELL_AFTER:
                # every rank must have its word: one without training never will
                told = self._tell_awaited(time.monotonic() - began, "epoch %d not started" % epoch)
            if ready:
                msg = self._sock.recv(L.VERDICT_BYTES + 4096)
                if not msg:
                    raise RankGone("the brandrt rank at %s went away" % self.dir)
                magic, _, got, status, n = L.VERDICT.unpack_from(msg)
                if magic != L.VERDICT_MAGIC or got != epoch:
                    raise BrandError("%s: an unexpected answer to %s" % (self.dir, what))
                if status:
                    why = msg[L.VERDICT_BYTES : L.VERDICT_BYTES + n].decode("utf-8", "replace")
                    raise BrandError("%s was refused: %s" % (what, why))
                return
            if end is not None and time.monotonic() > end:
                raise BrandError("epoch %d did not start within %.0f s of %s%s" % (epoch, timeout, what, self._awaited()))

    # requests and replies
    def request(self, sn, epoch):
        """Ask for trace position sn of epoch; the reply comes from next().

        Replies must be read as they come: the rank answers at most
        2 x slots (128) of a client's requests until their replies are
        read, and the client's ring holds slots (64) more, so request()
        waits while the ring is full and raises BrandError once only
        next() could make room (say, after asking for a whole epoch
        before reading any of it). read_many() keeps the ring full for
        you."""
        self._push(L.KIND_READ, sn, epoch)

    def end_epoch(self, epoch, timeout=10.0, replica=0, replicas=0):
        """Tell the rank that nothing more will be asked in epoch for the
        positions p with p % replicas == replica (a training process's
        share, as BrandSampler splits the trace), or, with replicas 0, for
        any position; wait until the rank has taken the message. The rank
        ends the epoch once every position not asked for is in a share that
        ended it."""
        self._push(L.KIND_END_EPOCH, replica, epoch, extra=replicas)
        self._taken(timeout, "the end of epoch %d" % epoch)

    def declare(self, replica, replicas, timeout=10.0):
        """Say that this client is a training process that reads share
        replica of replicas of the rank's trace, for as long as it stays
        attached: should it go away for good with positions of its share
        still to come, the rank ends the job rather than wait for them."""
        if not 0 <= replica < replicas:
            raise ValueError("share %d of %d" % (replica, replicas))
        self._push(L.KIND_SESSION, replica, 0, extra=replicas)
        self._taken(timeout, "the declaration of share %d of %d" % (replica, replicas))

    def _taken(self, timeout, what):
        end = time.monotonic() + timeout
        while self._u32(L.OFF_REQ_TAIL) != self._u32(L.OFF_REQ_HEAD):
            self._check_alive()
            if time.monotonic() > end:
                raise BrandError("the rank did not take %s within %.0f s" % (what, timeout))
            time.sleep(0.001)

    def _push(self, kind, sn, epoch, wake=True, extra=0):
        with self._push_lock:
            self._push_locked(kind, sn, epoch, wake, extra)

    def _push_locked(self, kind, sn, epoch, wake, extra):
        head = self._req_head.value
        while (head - self._req_tail.value) & 0xFFFFFFFF >= self._slots:
            if kind == L.KIND_READ:
                self._check_unread()
            self._kick()
            self._check_alive()
            time.sleep(0.0001)
        L.SLOT.pack_into(self._buf, L.HEADER_BYTES + (head % self._slots) * L.SLOT_BYTES, sn, kind, epoch, extra)
        self._req_head.value = (head + 1) & 0xFFFFFFFF
        if kind == L.KIND_READ:
            self._asked += 1
        # A sleeping rank is woken once a few requests wait for it, or when
        # this side is about to wait (_kick): one wake serves several
        # requests, and a wake costs both sides more than a file's bytes.
        if kind not in _QUIET or wake and (head + 1 - self._req_tail.value) & 0xFFFFFFFF >= _WAKE_BATCH:
            self._kick()

    def _check_unread(self):
        """Raise BrandError when this client's request ring is full and
        only reading replies can make room: the rank takes a client's
        reads while fewer than 2 x slots of them are unanswered or
        answered and not let go (a record is let go by the next call of
        next()), and the ring holds slots more. Another thread inside
        next() may still make room: then this one waits."""
        held = 1 if self._held is not None else 0
        if self._readers or self._asked - self._got + held < L.UNREAD_SLOTS * self._slots + self._slots:
            return
        raise BrandError(
            "request(): this client asked for %d positions and took %d replies with next(); the rank answers at most %d of a client's "
            "requests until their replies are read, and its ring holds %d more, so this request would wait for ever: read replies with "
            "next() before asking for more, or use read_many(), which keeps %d requests in flight"
            % (self._asked, self._got, L.UNREAD_SLOTS * self._slots, self._slots, self._slots))

    # handing files on
    def hand_over(self):
        """Ask the rank to hand this client's files in its arena on to
        the process that started this one (a DataLoader worker's training
        process): each such record then comes with self.handed set to its
        (place, token), holding one reference to the file, which whoever
        ends up with it releases (let_go). See brandrt.handed."""
        self._push(L.KIND_HAND, 0, 0)

    def hold(self, token, place):
        """Add a reference to a handed file (before passing it on)."""
        with self._push_lock:
            try:
                self._push_locked(L.KIND_HOLD, 0, token, False, place // L.ARENA_GRAIN)
                self._kick()
            except RankGone:
                pass  # it ended: nothing will reuse the file's bytes

    def let_go(self, token, place):
        """Release a reference to a handed file, with the next flush:
        safe from any thread and from __del__."""
        self._let_go.append((token, place))

    def flush(self, at_least=1):
        """Send the releases let_go gathered, if there are at_least."""
        if len(self._let_go) < at_least or self._sock is None:
            return
        with self._push_lock:
            try:
                while self._let_go:
                    token, place = self._let_go.pop()
                    self._push_locked(L.KIND_RELEASE, 0, token, False, place // L.ARENA_GRAIN)
                self._kick()
            except RankGone:
                # it served its epochs and ended (its files stay readable
                # while mapped): nothing is left to release
                self._let_go.clear()

    def _kick(self):
        """Wake the rank if it sleeps while requests wait for it."""
        if self._rank_sleeping.value and self._req_head.value != self._req_tail.value:
            self._futex_wake(L.OFF_REQ_HEAD)

    def next(self, timeout=None):
        """The next reply: (sn, file_id, label, data memoryview, crc32c)."""
        self._readers += 1
        try:
            return self._next(timeout)
        finally:
            self._readers -= 1

    def _next(self, timeout):
        self.release()
        timeout = self.timeout if timeout is None else timeout
        end = None if timeout is None else time.monotonic() + timeout
        spins, told, start = 0, False, None  # start: the first slow round's clock
        while True:
            rec = self._record()
            if rec is not None:
                return rec
            if spins == 0:
                self._kick()
            spins += 1
            if spins < 200:
                continue
            try:
                self._check_alive()
            except RankGone:
                # The rank writes its last replies, then closes: one may
                # have come since the look above.
                rec = self._record()
                if rec is not None:
                    return rec
                raise
            now = time.monotonic()
            if end is not None and now > end:
                raise BrandError("no reply from brandrt within %.1f s%s" % (timeout, self._awaited()))
            start = now if start is None else start
            if not told and now - start > _TELL_AFTER:
                told = self._tell_awaited(now - start)
            self._sleep()

    def _awaited(self):
        """"" or what the job waits for, as the rank publishes it: the
        ranks that have had no training process attached."""
        n = self._u32(L.OFF_AWAITED)
        if n == 0:
            return ""
        first = self._u32(L.OFF_AWAITED_FIRST)
        more = " and %d more ranks" % (n - 1) if n > 1 else ""
        return ("; the job waits for rank %d%s, which had no training process attached: did the training start on that node? "
                "(brandrt serve --training-wait ends the job if none attaches)" % (first, more))

    def _tell_awaited(self, waited, what="no file"):
        """Log (logger "brandrt", a warning: on stderr unless the
        application routes it), when the job waits for ranks without
        training, that this client has waited for waited seconds and why
        (what: for a file, or for an epoch to start); return whether it
        did."""
        why = self._awaited()
        if why:
            logging.getLogger("brandrt").warning("brandrt: pid %d: %s for %.0f s%s", os.getpid(), what, waited, why)
        return bool(why)

    def read(self, sn, epoch):
        """Request position sn and return (file_id, label, data) for it.
        Raises FileSkipped when the rank skipped the file (damaged)."""
        self.request(sn, epoch)
        while True:
            got = self._pending.pop(sn, None)
            if isinstance(got, FileSkipped):
                raise got
            if got is not None:
                self.handed = None
                return got
            try:
                r = self.next()
            except FileSkipped as e:
                if e.sn == sn:
                    raise
                self._pending[e.sn] = e  # an older request's
                continue
            if r[0] == sn:
                return r[1], r[2], r[3]
            self._pending[r[0]] = (r[1], r[2], bytes(r[3]))  # an older request's reply, copied
            if self.handed is not None:
                self.let_go(self.handed[1], self.handed[0])

    def read_many(self, sns, epoch, use, skipped=None):
        """Read positions sns of epoch with up to a ring's worth of requests
        in flight, calling use(sn, file_id, label, data) for each as it
        arrives (in any order); data is valid only during the call. For a
        file the rank skipped (damaged: `brandrt serve --on-damage skip`),
        skipped(sn, file_id, message) is called instead; without it, a
        warning names the file, once per file id."""
        skipped = skipped or self.warn_skipped
        sent = got = 0
        while got < len(sns):
            # The rank is woken once the first few wait, so that it
            # starts, and then not again until this side waits: waking it
            # costs a system call on each side.
            while sent < len(sns) and sent - got < self._slots:
                self._push(L.KIND_READ, sns[sent], epoch, wake=sent < _WAKE_BATCH)
                sent += 1
            got += 1
            try:
                sn, fid, label, data, _ = self.next()
            except FileSkipped as e:
                skipped(e.sn, e.file_id, e.message)
                continue
            use(sn, fid, label, data)
        self.release()

    def warn_skipped(self, sn, file_id, message):
        """Warn that the rank skipped file_id (at position sn), once per
        file id: read_many's default for skipped files."""
        if file_id in self._warned:
            return
        self._warned.add(file_id)
        warnings.warn("brandrt skipped file %d (position %d), damaged: %s" % (file_id, sn, message), RuntimeWarning, stacklevel=3)

    def release(self):
        """Give the ring back the room of the last reply's bytes."""
        if self._held is not None:
            self._data_tail.value = self._held
            self._held = None

    def _record(self):
        b = self._buf
        while self._read_at < self._data_head.value:
            at = self._data_off + self._read_at % self._data_bytes
            n, kind, sn, fid, label, size, crc = L.RECORD.unpack_from(b, at)
            self._read_at += n
            if kind == L.REC_PAD:
                self._data_tail.value = self._read_at
                continue
            self._got += 1
            self.handed = None
            if kind == L.REC_SHARED or kind == L.REC_HANDED:
                place = L.U64.unpack_from(b, at + L.RECORD_HEADER)[0]
                if self._arena is None or place + size > len(self._arena):
                    self._data_tail.value = self._read_at
                    raise BrandError("position %d: the rank's record points outside its shared memory" % sn)
                data = self._arena[place : place + size]
                if kind == L.REC_HANDED:
                    self.handed = (place, L.U64.unpack_from(b, at + L.RECORD_HEADER + 8)[0])
            else:
                data = b[at + L.RECORD_HEADER : at + L.RECORD_HEADER + size]
            self._held = self._read_at
            if kind == L.REC_ERROR:
                msg = bytes(data).decode("utf-8", "replace")
                self.release()
                raise BrandError("position %d: %s" % (sn, msg))
            if kind == L.REC_SKIPPED:
                msg = bytes(data).decode("utf-8", "replace")
                self.release()
                raise FileSkipped(sn, fid, label, msg)
            if self.verify:
                self._verify(sn, fid, data, crc)
            return sn, fid, label, data, crc
        return None

    def _verify(self, sn, fid, data, crc):
        got = self._crc32c(data)
        if got != crc:
            self.release()
            if self.handed is not None:
                self.let_go(self.handed[1], self.handed[0])
            raise BrandError("file %d at position %d: its %d bytes have CRC32C 0x%08x, the index says 0x%08x: damaged in the store or "
                             "on the way" % (fid, sn, len(data), got, crc))

    # waiting
    def _sleep(self):
        seen = self._u32(L.OFF_REP_HEAD)
        self._put32(L.OFF_CLIENT_SLEEPING, 1)
        if self._read_at == self._data_head.value:
            self._futex_wait(L.OFF_REP_HEAD, seen, 0.1)
        self._put32(L.OFF_CLIENT_SLEEPING, 0)

    def _futex_wait(self, off, val, seconds):
        ts = _Timespec(int(seconds), int((seconds % 1) * 1e9))
        addr = ctypes.addressof(self._c[off])
        _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(addr), _FUTEX_WAIT, ctypes.c_uint32(val), ctypes.byref(ts), None, 0)

    def _futex_wake(self, off):
        addr = ctypes.addressof(self._c[off])
        _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(addr), _FUTEX_WAKE, 1 << 30, None, None, 0)

    def _check_alive(self):
        try:
            got = self._sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK)
        except BlockingIOError:
            return
        except OSError as e:
            raise RankGone("brandrt rank at %s: %s" % (self.dir, e)) from None
        if got == b"":
            raise RankGone("the brandrt rank at %s went away" % self.dir)

    # lifetime
    def close(self):
        """Detach; the rank frees this client's rings."""
        if self._sock is None:
            return
        try:
            self.flush()
        except Exception:
            pass  # the rank went: it released everything
        self._sock.close()  # what the rank watches
        self._sock = None
        self._held = None
        if getattr(self, "arena_fd", None) is not None:
            os.close(self.arena_fd)
            self.arena_fd = None
        # The counters are views of the ring's mapping: drop them all, or
        # it cannot close.
        self._c = {}
        self._req_head = self._req_tail = self._data_head = self._data_tail = self._rank_sleeping = None
        for view, mm in ((self._buf, self._mm), (self._arena, self._arena_mm)):
            if mm is None:
                continue
            try:
                view.release()
                mm.close()
            except BufferError:
                pass  # the caller still holds a view of a file; the mapping goes with it

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
