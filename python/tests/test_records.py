"""The Python client's handling of records, written into its ring by a
fake rank: checksums (verify)."""

import os
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from brandrt import BrandError  # noqa: E402
from brandrt import crc32c as C  # noqa: E402
from brandrt import layout as L  # noqa: E402
from fakerank import FakeRank  # noqa: E402


class CRC32CTest(unittest.TestCase):
    def test_known(self):
        for f in (C.crc32c, C.crc32c_python, C.crc32c_numpy):
            self.assertEqual(f(b"123456789"), 0xE3069283)
            self.assertEqual(f(b""), 0)
            self.assertEqual(f(bytes(32)), 0x8A9136AA)  # RFC 3720 B.4

    def test_numpy_matches_python(self):
        for n in (1, 3, 4, 5, 63, 64, 65, 511, 512, 513, 4096 + 7, 100_000, 110_001):
            d = os.urandom(n)
            self.assertEqual(C.crc32c_numpy(d), C.crc32c_python(d), n)
            self.assertEqual(C.crc32c_numpy(memoryview(d)), C.crc32c_python(d), n)

    @unittest.skipUnless(os.environ.get("BRANDRT_CRC_SPEED"), "set BRANDRT_CRC_SPEED=1 to measure")
    def test_speed(self):
        for name, f in (("numpy", C.crc32c_numpy), ("pure Python", C.crc32c_python), ("chosen: " + C.backend, C.crc32c)):
            for size in (4096, 110_000, 4 << 20):
                if name == "pure Python" and size > 110_000:
                    continue
                d = os.urandom(size)
                f(d)
                n, start = 0, time.perf_counter()
                while time.perf_counter() - start < 1:
                    f(d)
                    n += 1
                took = (time.perf_counter() - start) / n
                print("\n%s, %d bytes: %.2f ms, %.1f MB/s" % (name, size, took * 1e3, size / took / 1e6), end="")


def rec(sn, data=None, kind=L.REC_FILE, crc=None):
    data = data if data is not None else b"file %d " % sn * 50
    return kind, sn, 1000 + sn, sn % 7, data, C.crc32c(data) if crc is None else crc


class VerifyTest(unittest.TestCase):
    def test_mismatch_raises(self):
        with FakeRank() as r, r.client(verify=True) as c:
            r.put(*rec(0))
            self.assertEqual(c.read(0, 1)[0], 1000)
            r.put(*rec(1, b"damaged bytes", crc=0x12345678))
            with self.assertRaises(BrandError) as cm:
                c.read(1, 1)
            msg = str(cm.exception)
            self.assertIn("file 1001 at position 1", msg)
            self.assertIn("0x%08x" % C.crc32c(b"damaged bytes"), msg)
            self.assertIn("the index says 0x12345678", msg)
            r.put(*rec(2))  # the ring goes on past the bad record
            self.assertEqual(c.read(2, 1)[0], 1002)

    def test_unverified_passes(self):
        with FakeRank() as r, r.client() as c:
            r.put(*rec(0, crc=1))
            self.assertEqual(bytes(c.read(0, 1)[2]), rec(0)[4])


if __name__ == "__main__":
    unittest.main()
