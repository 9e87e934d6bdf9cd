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
        names = [n for n in dir(layout) if n.isupper() and n not in ("SOCKET_NAME", "ENV_ATTACH", "ENV_LOCAL_RANK")]
        self.assertEqual(seen, len(names), "layout.py and the golden file list different fields")

    def test_default_attach_dir(self):
        from brandrt import default_attach_dir

        old = {k: os.environ.pop(k, None) for k in ("BRANDRT_ATTACH", "BRANDRT_LOCAL_RANK")}
        try:
            self.assertEqual(default_attach_dir(), "/dev/shm/brandrt-%d/local-0" % os.getuid())
            os.environ["BRANDRT_ATTACH"] = "/x"
            self.assertEqual(default_attach_dir(2), "/x/local-2")
            os.environ["BRANDRT_LOCAL_RANK"] = "3"  # as brandrt serve -- CMD sets it
            self.assertEqual(default_attach_dir(), "/x/local-3")
            self.assertEqual(default_attach_dir(0), "/x/local-0")
        finally:
            for k, v in old.items():
                os.environ.pop(k, None)
                if v is not None:
                    os.environ[k] = v


if __name__ == "__main__":
    unittest.main()
