"""BrandLoader's state counts the batches the training loop took, not the
positions its workers fetched ahead; BrandSampler.state_dict() without a
count warns that it runs ahead. A sampler that yields positions without a
rank stands in for the rank's trace."""

import os
import sys
import unittest
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch.utils.data  # noqa: E402

from brandrt.torch import BrandLoader, BrandSampler  # noqa: E402


class Trace(BrandSampler):
    """n positions of a job of 1 rank and seed 7, as a rank's trace would
    give them: a BrandSampler whose rank is left out (no session, and
    the epoch's positions known)."""

    def __init__(self, n, batch_size=None):
        super().__init__(batch_size=batch_size)
        self._job, self._positions = (1, 7), n

    def _session(self):
        return None

    def _wait(self, epoch, supply=False):
        return self._positions


class Positions(torch.utils.data.Dataset):
    """ds[(epoch, sn)] -> sn; ds[(epoch, [sn, ...])] -> [sn, ...]."""

    def __getitem__(self, index):
        return index[1]


class LoaderStateTest(unittest.TestCase):
    def test_counts_what_training_took(self):
        trace = Trace(200)
        loader = BrandLoader(Positions(), batch_size=4, sampler=trace, num_workers=2, prefetch_factor=4)
        it = iter(loader)
        for _ in range(3):
            next(it)
        state = loader.state_dict()
        self.assertEqual((state["epoch"], state["position"], state["ranks"], state["seed"]), (0, 12, 1, 7))
        self.assertGreater(trace._yielded, 12, "the workers fetched nothing ahead: the test shows nothing")
        taken = [int(sn) for batch in it for sn in batch]
        self.assertEqual(taken, list(range(12, 200)))
        state = loader.state_dict()  # the epoch ended: the next one, from its start
        self.assertEqual((state["epoch"], state["position"]), (1, 0))

    def test_sampler_batches(self):
        # batches of the sampler, DataLoader's batch_size=None: positions
        # are counted by the sampler's batch, the last one short
        trace = Trace(50, batch_size=8)
        loader = BrandLoader(Positions(), batch_size=None, sampler=trace, num_workers=1, prefetch_factor=4)
        it = iter(loader)
        next(it), next(it)
        self.assertEqual(loader.state_dict()["position"], 16)
        self.assertEqual(sum(len(b) for b in it), 34)
        self.assertEqual(loader.state_dict()["epoch"], 1)

    def test_resumes(self):
        trace = Trace(40)
        loader = BrandLoader(Positions(), batch_size=5, sampler=trace)
        saved = {"epoch": 0, "position": 25, "ranks": 1, "seed": 7}
        loader.load_state_dict(saved)
        self.assertEqual(loader.state_dict(), saved)  # loaded, not begun: the loaded state
        self.assertEqual([int(sn) for batch in loader for sn in batch], list(range(25, 40)))
        self.assertEqual(loader.state_dict()["epoch"], 1)

    def test_refuses_other_samplers(self):
        with self.assertRaises(TypeError):
            BrandLoader(Positions(), sampler=torch.utils.data.SequentialSampler(range(4)))
        with self.assertRaises(ValueError):
            BrandLoader(Positions(), sampler=Trace(4), shuffle=True)

    def test_sampler_warns_without_count(self):
        trace = Trace(100)
        it = iter(trace)
        for _ in range(10):
            next(it)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            self.assertEqual(trace.state_dict(4)["position"], 4)
            self.assertEqual(w, [])
            self.assertEqual(trace.state_dict()["position"], 10)
            self.assertEqual(len(w), 1)
            self.assertIn("BrandLoader.state_dict()", str(w[0].message))


if __name__ == "__main__":
    unittest.main()
