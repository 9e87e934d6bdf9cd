"""A rank in a thread of the test, for the Python client's tests: it
welcomes clients on a socket in a temporary attach directory, as brandrt
serve does, and the test writes the records of their replies into their
rings itself."""

import contextlib
import mmap
import os
import shutil
import socket
import struct
import sys
import tempfile
import threading

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from brandrt import layout as L  # noqa: E402
from brandrt.client import Client  # noqa: E402


class FakeRank:
    """Listens at <tmp>/local-0; client() attaches a Client and keeps its
    ring in self.ring, where put() writes records."""

    def __init__(self, slots=8, data=256 << 10):
        self.slots, self.data = slots, data
        self.base = tempfile.mkdtemp(prefix="brandrt-fake-")
        self.dir = os.path.join(self.base, "local-0")
        os.mkdir(self.dir, 0o700)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.bind(os.path.join(self.dir, L.SOCKET_NAME))
        self.sock.listen(4)
        self.sock.settimeout(5)
        self.conns, self.ring = [], None

    def client(self, **kw):
        """A Client attached to this rank."""
        with self.accepting():
            return Client(attach_dir=self.dir, timeout=5, **kw)

    @contextlib.contextmanager
    def accepting(self):
        """Welcome one client, which attaches inside the with block."""
        t = threading.Thread(target=self._welcome)
        t.start()
        try:
            yield
        finally:
            t.join()

    def _welcome(self):
        conn, _ = self.sock.accept()
        self.conns.append(conn)
        conn.recv(64)
        data_off = (L.HEADER_BYTES + self.slots * L.SLOT_BYTES + 4095) & ~4095
        fd = os.memfd_create("fake-ring", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, data_off + self.data)
            self.ring = mmap.mmap(fd, data_off + self.data)
            self.ring[: len(L.RING_MAGIC)] = L.RING_MAGIC
            struct.pack_into("<IIQQ", self.ring, L.OFF_HEADER_BYTES, L.HEADER_BYTES, self.slots, data_off, self.data)
            self.data_off = data_off
            msg = L.WELCOME.pack(L.WELCOME_MAGIC, L.VERSION, len(self.conns), 0, data_off + self.data, 0, L.RELEASE.encode())
            socket.send_fds(conn, [msg], [fd])
        finally:
            os.close(fd)

    def put(self, kind, sn, fid, label, data, crc=0):
        """Write a record with data (bytes) into the last client's ring,
        and take the requests written so far (the test answers them)."""
        struct.pack_into("<I", self.ring, L.OFF_REQ_TAIL, struct.unpack_from("<I", self.ring, L.OFF_REQ_HEAD)[0])
        head = struct.unpack_from("<Q", self.ring, L.OFF_DATA_HEAD)[0]
        n = (L.RECORD_HEADER + len(data) + L.RECORD_ALIGN - 1) & ~(L.RECORD_ALIGN - 1)
        assert head % self.data + n <= self.data, "the fake rank does not wrap its ring"
        at = self.data_off + head % self.data
        struct.pack_into("<IIiiiIII", self.ring, at, n, kind, sn, fid, label, len(data), crc, 0)
        self.ring[at + L.RECORD_HEADER : at + L.RECORD_HEADER + len(data)] = data
        struct.pack_into("<Q", self.ring, L.OFF_DATA_HEAD, head + n)
        rep = struct.unpack_from("<I", self.ring, L.OFF_REP_HEAD)[0]
        struct.pack_into("<I", self.ring, L.OFF_REP_HEAD, rep + 1)

    def close(self):
        for c in self.conns:
            c.close()
        self.sock.close()
        if self.ring is not None:
            try:
                self.ring.close()
            except BufferError:
                pass
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
