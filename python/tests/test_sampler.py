"""Where BrandSampler takes its share of the rank's trace from when not
told: the environment torchrun and `brandrt serve -- CMD` set, unless the
caller names the brandrt rank to read from."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from brandrt.torch import BrandSampler  # noqa: E402

VARS = ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "BRANDRT_LOCAL_RANK")


class ShareTest(unittest.TestCase):
    def setUp(self):
        self.saved = {k: os.environ.pop(k, None) for k in VARS}

    def tearDown(self):
        for k, v in self.saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v

    def share(self, **kw):
        s = BrandSampler(**kw)
        return s.rank, s.num_replicas

    def test_alone(self):
        self.assertEqual(self.share(), (0, 1))

    def test_torchrun(self):
        os.environ.update(LOCAL_RANK="2", LOCAL_WORLD_SIZE="4")
        self.assertEqual(self.share(), (2, 4))
        self.assertEqual(self.share(rank=1, num_replicas=2), (1, 2))  # said outright

    def test_one_process_per_rank(self):
        # several brandrt ranks per node, one training process beside each,
        # naming its rank: it reads that rank's whole trace
        os.environ.update(LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
        self.assertEqual(self.share(local_rank=1), (0, 1))


if __name__ == "__main__":
    unittest.main()
