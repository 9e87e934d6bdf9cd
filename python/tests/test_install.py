"""The package installs with pip without network access."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


class InstallTest(unittest.TestCase):
    def test_pip_install_offline(self):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            shutil.copytree(os.path.join(HERE, ".."), src, ignore=shutil.ignore_patterns("tests", "__pycache__"))
            venv = os.path.join(tmp, "venv")
            subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
            py = os.path.join(venv, "bin", "python")
            subprocess.run([py, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-index", src], check=True,
                           stdout=subprocess.DEVNULL)
            out = subprocess.run([py, "-c", "import brandrt; print(brandrt.__file__)"], cwd=tmp, check=True,
                                 capture_output=True, text=True).stdout
            self.assertIn(os.path.join(venv, "lib"), out)


if __name__ == "__main__":
    unittest.main()
