"""Writes Fashion-MNIST (Debian's dataset-fashion-mnist: 60,000 training and
10,000 test images, 28×28 grey, 10 classes) as two image folders of PNG
files, one directory per class, for `brandrt pack` and torchvision's
ImageFolder alike:

    OUT/train/0-tshirt/00000.png … OUT/train/9-ankle-boot/…
    OUT/test/…

Class directories sort in label order, so that the labels brandrt pack and
ImageFolder give (a class's index among the sorted directories) are the
dataset's own. PNG keeps every pixel.

    apt-get install dataset-fashion-mnist
    /usr/bin/python3 examples/pytorch/fashion_mnist.py --out /var/tmp/fashion-mnist
"""

import argparse
import gzip
import os
import shutil
import struct
import sys
import tempfile

from PIL import Image

SOURCE = "/usr/share/datasets/fashion-mnist"
CLASSES = ["tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "ankle-boot"]


def read_idx(path, magic):
    """The array of an IDX file: (count, rows, cols, bytes) for images,
    (count, 0, 0, bytes) for labels."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    got, count = struct.unpack_from(">II", data)
    if got != magic:
        raise SystemExit("%s: not an IDX file of the kind expected (magic %#x, want %#x)" % (path, got, magic))
    if magic == 0x803:
        rows, cols = struct.unpack_from(">II", data, 8)
        body = data[16:]
    else:
        rows = cols = 0
        body = data[8:]
    want = count * max(rows * cols, 1)
    if len(body) != want:
        raise SystemExit("%s: %d bytes of data, %d expected for %d items" % (path, len(body), want, count))
    return count, rows, cols, body


def write_split(out, images, labels):
    n, rows, cols, pixels = read_idx(images, 0x803)
    m, _, _, tags = read_idx(labels, 0x801)
    if n != m:
        raise SystemExit("%s has %d images and %s %d labels" % (images, n, labels, m))
    for i, name in enumerate(CLASSES):
        os.makedirs(os.path.join(out, "%d-%s" % (i, name)))
    size = rows * cols
    for k in range(n):
        label = tags[k]
        if label >= len(CLASSES):
            raise SystemExit("%s: label %d of item %d is not one of the 10 classes" % (labels, label, k))
        img = Image.frombytes("L", (cols, rows), pixels[k * size : (k + 1) * size])
        img.save(os.path.join(out, "%d-%s" % (label, CLASSES[label]), "%05d.png" % k))
        if k % 2000 == 0 or k == n - 1:
            sys.stderr.write("\r%s: %d/%d images" % (os.path.basename(out), k + 1, n))
            sys.stderr.flush()
    sys.stderr.write("\n")
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory to create (train/ and test/ inside)")
    ap.add_argument("--source", default=SOURCE, help="where the IDX files are (default: Debian's package)")
    ap.add_argument("--force", action="store_true", help="replace --out if it exists")
    a = ap.parse_args()
    files = {k: os.path.join(a.source, k + "-ubyte.gz") for k in
             ("train-images-idx3", "train-labels-idx1", "t10k-images-idx3", "t10k-labels-idx1")}
    missing = [p for p in files.values() if not os.path.exists(p)]
    if missing:
        raise SystemExit("missing %s: install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist)"
                         % ", ".join(missing))
    if os.path.exists(a.out) and not a.force:
        raise SystemExit("%s exists; pass --force to replace it" % a.out)
    parent = os.path.dirname(os.path.abspath(a.out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="." + os.path.basename(a.out) + ".tmp-", dir=parent)
    try:
        n = write_split(os.path.join(tmp, "train"), files["train-images-idx3"], files["train-labels-idx1"])
        m = write_split(os.path.join(tmp, "test"), files["t10k-images-idx3"], files["t10k-labels-idx1"])
        if os.path.exists(a.out):
            shutil.rmtree(a.out)
        os.rename(tmp, a.out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print("wrote %d training and %d test images to %s" % (n, m, a.out))


if __name__ == "__main__":
    main()
