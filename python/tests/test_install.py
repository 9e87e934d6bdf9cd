"""The package builds as a wheel and installs with pip without network access, with its declared
dependencies from the wheels .ci/deps fetched (.venv/wheels), and then
checks CRC32C in C, not in numpy; a client of another release is refused
by a rank (bin/brandrt, which make test builds first), saying which."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
WHEELS = os.path.join(HERE, "..", "..", ".venv", "wheels")
BRANDRT = os.path.join(HERE, "..", "..", "bin", "brandrt")

# In the fresh environment: the installed client, told it is of another
# release, attaches to a rank.
OTHER_RELEASE = """
import sys
from brandrt import BrandError, Client, layout
layout.RELEASE = "0.0.9"
try:
    Client(sys.argv[1], timeout=30)
    print("attached")
except BrandError as e:
    print(e)
"""

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
            out = self.other_release(py, tmp)
            print("a client of another release: %s" % out, file=sys.stderr)
            release = subprocess.run([py, "-c", "import brandrt; print(brandrt.__version__)"], cwd=tmp, check=True,
                                     capture_output=True, text=True).stdout.strip()
            self.assertIn("the rank refused this client: this client is brandrt 0.0.9 (attach protocol 6) and the rank brandrt %s" % release, out)
            self.assertIn("pip install dist/brandrt-%s-py3-none-any.whl" % release, out)

    def other_release(self, py, tmp):
        """What the installed client of a faked release says when it
        attaches to a rank serving a dataset of a few files."""
        if not os.access(BRANDRT, os.X_OK):
            self.fail("no %s: run `make build` (make test does)" % BRANDRT)
        files = os.path.join(tmp, "input", "a")
        os.makedirs(files)
        for i in range(16):
            with open(os.path.join(files, "%d.bin" % i), "wb") as f:
                f.write(os.urandom(5000))
        chunks = os.path.join(tmp, "chunks")
        subprocess.run([BRANDRT, "pack", "--input", os.path.dirname(files), "--out", chunks], check=True, capture_output=True)
        env = dict(os.environ, BRANDRT_ATTACH=os.path.join(tmp, "attach"))
        local = os.path.join(tmp, "attach", "local-0")
        serve = subprocess.Popen([BRANDRT, "serve", "--chunks", chunks, "--mem", "100%", "--epochs", "1"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while not os.path.exists(os.path.join(local, "attach.sock")):
                self.assertIsNone(serve.poll(), "brandrt serve ended")
                self.assertLess(time.monotonic(), deadline, "brandrt serve did not listen within 30 s")
                time.sleep(0.05)
            return subprocess.run([py, "-c", OTHER_RELEASE, local], cwd=tmp, env=env, check=True, capture_output=True,
                                  text=True, timeout=60).stdout.strip()
        finally:
            serve.kill()
            serve.wait()


if __name__ == "__main__":
    unittest.main()
