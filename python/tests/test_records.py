"""The Python client's handling of records, written into its ring by a
fake rank: checksums (verify) and files the rank skipped (kind 5)."""

import os
import sys
import time
import unittest
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from brandrt import BrandError, FileSkipped  # noqa: E402
from brandrt import crc32c as C  # noqa: E402
from brandrt import layout as L  # noqa: E402
from fakerank import FakeRank  # noqa: E402

try:
    import torch  # noqa: F401

    from brandrt.torch import BrandDataset
except ImportError:
    BrandDataset = None


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


class SkippedTest(unittest.TestCase):
    MSG = "file 1001 (chunk 3 of rank 0): CRC32C mismatch"

    def test_read_raises(self):
        with FakeRank() as r, r.client() as c:
            r.put(*rec(1, self.MSG.encode(), kind=L.REC_SKIPPED, crc=0))
            with self.assertRaises(FileSkipped) as cm:
                c.read(1, 1)
            e = cm.exception
            self.assertIsInstance(e, BrandError)
            self.assertEqual((str(e), e.sn, e.file_id, e.message), (self.MSG, 1, 1001, self.MSG))

    def test_read_many(self):
        with FakeRank() as r, r.client(verify=True) as c:
            for sn in range(4):
                r.put(*(rec(sn, self.MSG.encode(), kind=L.REC_SKIPPED, crc=0) if sn == 1 else rec(sn)))
            used, skipped = [], []
            c.read_many([0, 1, 2, 3], 1, lambda sn, fid, label, data: used.append((sn, fid, bytes(data))),
                        lambda sn, fid, msg: skipped.append((sn, fid, msg)))
            self.assertEqual(used, [(sn, 1000 + sn, rec(sn)[4]) for sn in (0, 2, 3)])
            self.assertEqual(skipped, [(1, 1001, self.MSG)])

    def test_read_many_warns_once_per_file(self):
        with FakeRank() as r, r.client() as c:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                for _ in range(2):
                    r.put(*rec(1, self.MSG.encode(), kind=L.REC_SKIPPED, crc=0))
                    r.put(*rec(2))
                    c.read_many([1, 2], 1, lambda *a: None)
            self.assertEqual(len(w), 1, [str(x.message) for x in w])
            self.assertIn("skipped file 1001 (position 1)", str(w[0].message))
            self.assertIn(self.MSG, str(w[0].message))


@unittest.skipIf(BrandDataset is None, "no torch for this python")
class DatasetSkippedTest(unittest.TestCase):
    def test_batch_drops_skipped(self):
        with FakeRank() as r:
            ds = BrandDataset(attach_dir=r.dir, timeout=5, with_id=True, verify=True)
            with r.accepting():
                ds._attached()
            for sn in range(3):
                r.put(*(rec(sn, b"gone", kind=L.REC_SKIPPED, crc=0) if sn == 1 else rec(sn)))
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                items = ds.__getitems__([(1, 0), (1, 1), (1, 2)])
            self.assertEqual([(fid, label) for _, label, fid in items], [(1000, 0), (1002, 2)])
            self.assertEqual(len(w), 1)
            self.assertIn("skipped file 1001", str(w[0].message))
            batch = torch.utils.data.default_collate(items)
            self.assertEqual(batch[2].tolist(), [1000, 1002])
            r.put(*rec(3, b"gone", kind=L.REC_SKIPPED, crc=0))
            with self.assertRaises(FileSkipped):
                ds[(1, 3)]
            ds._client.close()


if __name__ == "__main__":
    unittest.main()


class LastRepliesTest(unittest.TestCase):
    def test_reply_written_before_the_rank_left(self):
        """A rank writes its last replies and closes at once: a client that
        looked at its ring just before the last one came, and then sees the
        socket closed, still gets that reply (an epoch's last files were
        lost so, once, under load)."""
        with FakeRank() as r:
            c = r.client()
            c.request(3, 1)
            r.put(*rec(3))
            r.conns[0].close()
            # the reply comes after the client's last look, before it
            # checks the socket
            checked, record, check = [], c._record, c._check_alive

            def look():
                return record() if checked else None

            def check_alive():
                checked.append(1)
                check()

            c._record, c._check_alive = look, check_alive
            sn, fid, _, data, _ = c.next(timeout=5)
            self.assertEqual((sn, fid, bytes(data)), (3, 1003, rec(3)[4]))
            c._record, c._check_alive = record, check
            c.release()
            with self.assertRaises(BrandError):
                c.next(timeout=5)
            c.close()
