"""brandrt's Python reader: attach to the brandrt rank of this node and
read training files through shared memory. See brandrt.torch for the
PyTorch Dataset and Sampler."""

from .client import BrandError, Client, FileSkipped, RankGone, default_attach_dir
from .layout import RELEASE as __version__

__all__ = ["Client", "BrandError", "FileSkipped", "RankGone", "default_attach_dir"]
