"""brandrt.inline: a batch's small tensors go from DataLoader workers to
the training process inside the batch's pickle, and arrive unchanged."""

import collections
import os
import signal
import subprocess
import sys
import time
import unittest
from multiprocessing.reduction import ForkingPickler

import torch
import torch.multiprocessing.reductions as reductions
import torch.utils.data

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from brandrt.inline import INLINE_BYTES, InlineSmall, _Inline, bound, inline_small  # noqa: E402
from brandrt.torch import BrandDataset, BrandLoader, BrandSampler, collate  # noqa: E402

Pair = collections.namedtuple("Pair", "x y")


def _alive(pid):
    """Whether pid runs (a zombie has ended)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def through_pickle(x):
    """x as a DataLoader's training process gets it from a worker."""
    return ForkingPickler.loads(ForkingPickler.dumps(inline_small(x)))


_fetched = []
_rebuild_storage_fd = reductions.rebuild_storage_fd


def _counted(*args):
    """torch's rebuild_storage_fd, counting its calls in _fetched."""
    _fetched.append(1)
    return _rebuild_storage_fd(*args)


class Items(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return b"file %d" % i, i % 10


class InlineTest(unittest.TestCase):
    def assertSameTensor(self, got, want):
        self.assertIs(type(got), torch.Tensor)
        self.assertEqual((got.dtype, got.shape), (want.dtype, want.shape))
        self.assertTrue(torch.equal(got, want), (got, want))

    def test_round_trip(self):
        labels = torch.arange(64)
        cut = torch.arange(24, dtype=torch.bfloat16).reshape(4, 6)[:, ::2]  # not contiguous, and numpy has no bfloat16
        batch = [[b"a", b"b"], labels, {"m": cut, "empty": torch.zeros(0, 5), "flags": torch.tensor([True, False])},
                 Pair(torch.tensor(3.5), (torch.tensor([1 + 2j, 3 - 1j]).conj(), "text"))]
        for t in (labels, cut, batch[2]["empty"], batch[2]["flags"], batch[3].x, batch[3].y[0]):
            self.assertIs(type(inline_small(t)), _Inline, "%s %s: not inline" % (t.dtype, tuple(t.shape)))
        got = through_pickle(batch)
        self.assertEqual(got[0], [b"a", b"b"])
        self.assertSameTensor(got[1], labels)
        self.assertEqual(sorted(got[2]), ["empty", "flags", "m"])
        for k in got[2]:
            self.assertSameTensor(got[2][k], batch[2][k])
        self.assertIs(type(got[3]), Pair)
        self.assertSameTensor(got[3].x, batch[3].x)
        self.assertSameTensor(got[3].y[0], batch[3].y[0])
        self.assertEqual(got[3].y[1], "text")
        got[1][0] = 100  # memory of its own, writable
        self.assertEqual(labels[0].item(), 0)

    def test_inline_or_not(self):
        self.assertIn(b"brandrt.inline", bytes(ForkingPickler.dumps(inline_small([torch.arange(64)]))))
        big = torch.zeros(INLINE_BYTES // 8 + 1, dtype=torch.float64)
        for t in (big, torch.ones(2, requires_grad=True), torch.nn.Parameter(torch.ones(2))):
            self.assertIs(inline_small(t), t, "a tensor torch should send itself")
        self.assertIsNot(inline_small(big[:-1]), big[:-1])
        # the bound is the batch's: each tensor that still fits goes inline
        a, b, c = torch.zeros(INLINE_BYTES // 2 + 8, dtype=torch.uint8), torch.zeros(INLINE_BYTES // 2, dtype=torch.uint8), torch.arange(8)
        got = inline_small([a, (b, {"c": c})])
        self.assertIsNot(got[0], a)
        self.assertIs(got[1][0], b)
        self.assertIsNot(got[1][1]["c"], c)
        # tuples of other kinds than tuple and named tuples are left as they are
        t = torch.max(torch.arange(6).reshape(2, 3), 0)
        self.assertIs(inline_small(t), t)
        # with more workers and batches ahead, less a batch (half a 64 KiB pipe among them)
        self.assertEqual([bound(2), bound(4, 2), bound(8, 2), bound(4, 8), bound(1, None)], [INLINE_BYTES, INLINE_BYTES, 2048, 1024, INLINE_BYTES])

    def test_workers_of_a_killed_process_exit(self):
        """A training process killed with batches in flight, of images or
        of labels at BrandLoader's bound: its workers exit (torch's
        watchdog, within 5 s), where batches of images sent inline filled
        the pipe and left them waiting for ever on it."""
        for item, batch in (("torch.rand(3, 32, 32), i", 8), ("b'', i", bound(2) // 8)):
            with self.subTest(item=item, batch=batch):
                self.killed_loader_exits(item, batch)

    def killed_loader_exits(self, item, batch):
        script = (
            "import os, sys, time, torch, torch.utils.data as D\n"
            "sys.path.insert(0, %r)\n"
            "from brandrt.inline import InlineSmall, bound\n"
            "class Items(D.Dataset):\n"
            "    def __len__(self): return 100000\n"
            "    def __getitem__(self, i): return %s\n"
            "dl = D.DataLoader(Items(), batch_size=%d, num_workers=2, collate_fn=InlineSmall(D.default_collate, bound(2)))\n"
            "it = iter(dl); next(it)\n"
            "print(' '.join(str(w.pid) for w in it._workers), flush=True)\n"
            "time.sleep(60)\n" % (os.path.join(os.path.dirname(__file__), ".."), item, batch))
        p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        try:
            workers = [int(w) for w in p.stdout.readline().split()]
            self.assertEqual(len(workers), 2)
            time.sleep(1)  # the workers fill what they may
        finally:
            p.kill()
            p.wait()
        deadline = time.monotonic() + 20
        while [w for w in workers if _alive(w)] and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [w for w in workers if _alive(w)]
        for w in left:
            os.kill(w, signal.SIGKILL)
        self.assertEqual(left, [], "workers of a killed training process still there after 20 s")

    def test_workers(self):
        """A DataLoader with workers: the labels arrive the same, and the
        training process fetched no descriptor for them (it does without
        InlineSmall: the test can fail)."""
        orig = reductions.rebuild_storage_fd
        reductions.rebuild_storage_fd = _counted  # what forked workers name in their pickles
        try:
            for wrap, want_fetched in ((InlineSmall, False), (lambda c: c, True)):
                _fetched.clear()
                loader = torch.utils.data.DataLoader(Items(), batch_size=16, num_workers=2, collate_fn=wrap(collate))
                got = [(files, labels) for files, labels in loader]
                self.assertEqual([f for files, _ in got for f in files], [b"file %d" % i for i in range(64)])
                self.assertSameTensor(torch.cat([labels for _, labels in got]), torch.tensor([i % 10 for i in range(64)]))
                self.assertEqual(bool(_fetched), want_fetched, "descriptors fetched: %d" % len(_fetched))
        finally:
            reductions.rebuild_storage_fd = orig

    def test_brand_loader_wraps(self):
        sampler = BrandSampler()
        fn = BrandLoader(BrandDataset(), batch_size=4, sampler=sampler, num_workers=8).collate_fn
        self.assertIsInstance(fn, InlineSmall)
        self.assertEqual((fn.collate_fn, fn.budget), (collate, bound(8)))
        self.assertIs(BrandLoader(BrandDataset(), batch_size=4, sampler=sampler).collate_fn, collate)
        self.assertIs(InlineSmall(collate)([(b"x", 1)])[1].__class__, torch.Tensor, "outside a worker: the batch as it is")


if __name__ == "__main__":
    unittest.main()
