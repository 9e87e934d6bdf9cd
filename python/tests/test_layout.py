"""The ring layout in brandrt/layout.py matches rt/shm/testdata/layout.golden,
which the Go side checks too."""

import os
import struct
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
        names = [n for n in dir(layout) if n.isupper() and n not in ("SOCKET_NAME", "ENV_ATTACH", "ENV_LOCAL_RANK")
                 and not isinstance(getattr(layout, n), struct.Struct)]
        self.assertEqual(seen, len(names), "layout.py and the golden file list different fields")

    def test_messages(self):
        # each message's fields fill the bytes the golden file gives it
        for msg, size in ((layout.HELLO, layout.HELLO_BYTES), (layout.WELCOME, layout.WELCOME_BYTES),
                          (layout.REFUSAL, layout.REFUSAL_BYTES), (layout.TRACE, layout.TRACE_BYTES),
                          (layout.VERDICT, layout.VERDICT_BYTES), (layout.START, layout.START_BYTES),
                          (layout.SLOT, layout.SLOT_BYTES), (layout.RECORD, layout.RECORD_HEADER - 4)):
            self.assertEqual(msg.size, size, msg.format)
            self.assertTrue(msg.format.startswith("<"), msg.format)
        # the fields at the offsets the Go side writes them
        b = layout.WELCOME.pack(layout.WELCOME_MAGIC, layout.VERSION, 7, 3, 1 << 20, 1 << 33, b"0.1.0")
        self.assertEqual(b[12:16], (7).to_bytes(4, "little"))
        self.assertEqual(b[24:32], (1 << 33).to_bytes(8, "little"))
        self.assertEqual(b[32:48], b"0.1.0".ljust(16, b"\0"))
        b = layout.HELLO.pack(layout.HELLO_MAGIC, layout.VERSION, 9, b"0.1.0")
        self.assertEqual(b[16:32], b"0.1.0".ljust(16, b"\0"))
        # the package's version is the release the rank checks
        import brandrt

        self.assertEqual(brandrt.__version__, layout.RELEASE)
        b = layout.START.pack(layout.START_MAGIC, layout.VERSION, 2, 300, 4, 1 << 40, 17)
        self.assertEqual(b[24:32], (1 << 40).to_bytes(8, "little"))
        self.assertEqual(b[32:36], (17).to_bytes(4, "little"))

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
