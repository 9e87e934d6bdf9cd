"""Attaching checks who is at the other end: the attach directory and its
base must be this user's alone, and the rank must run as this user."""

import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from brandrt import BrandError, Client  # noqa: E402
from brandrt import layout as L  # noqa: E402
from brandrt.client import _check_peer  # noqa: E402
from fakerank import FakeRank  # noqa: E402

NOBODY = 65534
needs_root = unittest.skipUnless(os.geteuid() == 0, "needs root, to act as another user")


class AttachDirTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.base = os.path.join(self.tmp, "brandrt-x")
        self.dir = os.path.join(self.base, "local-0")
        os.makedirs(self.dir, 0o700)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def refused(self, want):
        with self.assertRaises(BrandError) as cm:
            Client(attach_dir=self.dir, timeout=5)
        msg = str(cm.exception)
        self.assertIn(want, msg)
        self.assertIn("remove it (rm -r ", msg)
        self.assertIn("set $BRANDRT_ATTACH", msg)

    @needs_root
    def test_base_of_another_user(self):
        os.chown(self.base, NOBODY, NOBODY)
        self.refused("%s is owned by uid 65534" % self.base)

    @needs_root
    def test_dir_of_another_user(self):
        os.chown(self.dir, NOBODY, NOBODY)
        self.refused("%s is owned by uid 65534" % self.dir)

    def test_writable_by_others(self):
        os.chmod(self.base, 0o777)
        self.refused("%s is writable by group or others (mode drwxrwxrwx" % self.base)

    def test_symlink(self):
        os.rename(self.dir, self.dir + "-elsewhere")
        os.symlink(self.dir + "-elsewhere", self.dir)
        self.refused("%s is a symbolic link" % self.dir)

    def test_own_dir_attaches(self):
        with FakeRank() as r, r.client() as c:
            self.assertEqual(c.client_id, 1)


class PeerTest(unittest.TestCase):
    def test_check_peer(self):
        _check_peer(struct.pack("3i", 42, os.geteuid(), 0), "the rank")
        with self.assertRaises(BrandError) as cm:
            _check_peer(struct.pack("3i", 42, os.geteuid() + 1, 0), "the rank")
        self.assertIn("the rank of pid 42 runs as uid %d" % (os.geteuid() + 1), str(cm.exception))

    @needs_root
    def test_rank_of_another_user(self):
        """A socket that a process of another user listens on, in a
        directory of our own (moved there, as a socket can be once bound),
        is refused before the hello."""
        theirs = tempfile.mkdtemp()
        ours = tempfile.mkdtemp()
        os.chown(theirs, NOBODY, NOBODY)
        os.mkdir(os.path.join(ours, "local-0"), 0o700)
        code = ("import socket, sys, time\n"
                "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
                "s.bind(sys.argv[1]); s.listen(4); s.settimeout(20)\n"
                "print('listening', flush=True)\n"
                "while True:\n"
                "    c, _ = s.accept(); c.close()\n")
        sock = os.path.join(theirs, L.SOCKET_NAME)
        p = subprocess.Popen([sys.executable, "-c", code, sock], user=NOBODY, group=NOBODY, extra_groups=[],
                             stdout=subprocess.PIPE)
        try:
            # The socket's file exists from bind, before listen: wait for the
            # listener's word, or a connect in between is refused.
            ready, _, _ = select.select([p.stdout], [], [], 10)
            self.assertTrue(ready and p.stdout.readline() == b"listening\n", "the other user's listener did not start")
            os.rename(sock, os.path.join(ours, "local-0", L.SOCKET_NAME))
            with self.assertRaises(BrandError) as cm:
                Client(attach_dir=os.path.join(ours, "local-0"), timeout=5)
            self.assertIn("the rank of pid %d runs as uid 65534" % p.pid, str(cm.exception))
        finally:
            p.kill()
            p.wait()
            shutil.rmtree(theirs)
            shutil.rmtree(ours)


class RefusalTest(unittest.TestCase):
    """A rank that cannot take another client (out of descriptors or
    memory) sends a refusal in place of the welcome, and the client raises
    the rank's reason instead of waiting for a welcome: whether the rank
    read its hello first or closed at once with it unread (which resets
    the connection, and the client may see that before the refusal)."""

    WHY = b"shm: rank 0 cannot take another client now: accept4: too many open files; raise the limit with `ulimit -n N`"

    def refused(self, read_hello):
        with FakeRank() as r:
            def refuse():
                conn, _ = r.sock.accept()
                with conn:
                    if read_hello:
                        conn.recv(64)
                    conn.send(struct.pack("<8sII", L.REFUSAL_MAGIC, L.VERSION, len(self.WHY)) + self.WHY)

            t = threading.Thread(target=refuse)
            t.start()
            try:
                start = time.monotonic()
                with self.assertRaises(BrandError) as cm:
                    Client(attach_dir=r.dir, timeout=5)
            finally:
                t.join()
            self.assertIn("the rank refused this client: " + self.WHY.decode(), str(cm.exception))
            self.assertLess(time.monotonic() - start, 5, "the client waited for a welcome")

    def test_after_hello(self):
        self.refused(read_hello=True)

    def test_hello_unread(self):
        self.refused(read_hello=False)


if __name__ == "__main__":
    unittest.main()
