"""The package builds as a wheel and installs with pip without network access, with its declared
dependencies from the wheels .ci/deps fetched (.venv/wheels), and then
checks CRC32C in C, not in numpy."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
WHEELS = os.path.join(HERE, "..", "..", ".venv", "wheels")

# In the fresh environment: which CRC32C the client verifies with, its
# speed on 64 MiB, and that it agrees with numpy's and the check value.
SPEED = """
import time
from brandrt import crc32c
data = bytes(range(256)) * (1 << 18)
t = time.perf_counter()
for _ in range(4):
    got = crc32c.crc32c(data)
secs = (time.perf_counter() - t) / 4
assert got == crc32c.crc32c_numpy(data) and crc32c.crc32c(b"123456789") == 0xE3069283
print(crc32c.backend, "%.1f GB/s" % (len(data) / secs / 1e9))
"""


class InstallTest(unittest.TestCase):
    def test_pip_install_offline(self):
        if not os.path.isdir(WHEELS):
            self.fail("no %s: run `bash .ci/deps` (make test does) to fetch the wheels the package depends on" % WHEELS)
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            shutil.copytree(os.path.join(HERE, ".."), src, ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
            venv = os.path.join(tmp, "venv")
            subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
            py = os.path.join(venv, "bin", "python")
            # the wheel as `make wheel` builds it, then installed as a user would
            dist = os.path.join(tmp, "dist")
            subprocess.run([py, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps", "--no-build-isolation", "-w", dist, src],
                           check=True, stdout=subprocess.DEVNULL)
            wheels = [os.path.join(dist, w) for w in os.listdir(dist) if w.endswith(".whl")]
            self.assertEqual(len(wheels), 1, wheels)
            subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index", "--find-links", WHEELS, wheels[0]],
                           check=True, stdout=subprocess.DEVNULL)
            out = subprocess.run([py, "-c", "import brandrt; print(brandrt.__file__)"], cwd=tmp, check=True,
                                 capture_output=True, text=True).stdout
            self.assertIn(os.path.join(venv, "lib"), out)
            out = subprocess.run([py, "-c", SPEED], cwd=tmp, check=True, capture_output=True, text=True).stdout.strip()
            print("\nCRC32C in a fresh environment with the package installed: %s" % out, file=sys.stderr)
            self.assertTrue(out.startswith("crc32c module "), out)


if __name__ == "__main__":
    unittest.main()
