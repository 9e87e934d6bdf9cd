"""The ring layout in brandrt/layout.py matches rt/shm/testdata/layout.golden,
which the Go side checks too."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from brandrt import layout  # noqa: E402

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "rt", "shm", "testdata", "layout.golden")


class LayoutTest(unittest.TestCase):
    def test_golden(self):
        seen = 0
        with open(GOLDEN) as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                name, value = line.split(" ", 1)
                ours = getattr(layout, name.upper())
                if isinstance(ours, bytes):
                    ours = ours.decode()
                self.assertEqual(str(ours), value, name)
                seen += 1
        names = [n for n in dir(layout) if n.isupper() and n not in ("SOCKET_NAME", "ENV_ATTACH")]
        self.assertEqual(seen, len(names), "layout.py and the golden file list different fields")

    def test_default_attach_dir(self):
        from brandrt import default_attach_dir

        old = os.environ.pop("BRANDRT_ATTACH", None)
        try:
            self.assertEqual(default_attach_dir(), "/dev/shm/brandrt-%d/local-0" % os.getuid())
            os.environ["BRANDRT_ATTACH"] = "/x"
            self.assertEqual(default_attach_dir(2), "/x/local-2")
        finally:
            os.environ.pop("BRANDRT_ATTACH", None)
            if old is not None:
                os.environ["BRANDRT_ATTACH"] = old


if __name__ == "__main__":
    unittest.main()
