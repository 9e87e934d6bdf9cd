"""Writes a small labelled JPEG dataset, one directory per class.

Each class has its own colour and stripe direction, with noise, so that a
small CNN can learn it in an epoch or two.

    /usr/bin/python3 examples/pytorch/make_jpegs.py --out /tmp/jpegs --classes 10 --images 2000
"""

import argparse
import os
import random

from PIL import Image, ImageDraw


def image(cls, classes, size, rng):
    hue = cls / classes
    base = tuple(int(255 * max(0.0, min(1.0, abs(((hue * 6 + k) % 6) - 3) - 1))) for k in (0, 4, 2))
    img = Image.new("RGB", (size, size), base)
    d = ImageDraw.Draw(img)
    step = 4 + cls % 4
    for i in range(-size, size, step):
        if cls % 2:
            d.line([(i, 0), (i + size, size)], fill=(255 - base[0], 255 - base[1], 255 - base[2]), width=1)
        else:
            d.line([(0, i + size), (size, i)], fill=(255 - base[0], 255 - base[1], 255 - base[2]), width=1)
    px = img.load()
    for _ in range(size * size // 8):
        x, y = rng.randrange(size), rng.randrange(size)
        px[x, y] = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
    return img


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--images", type=int, default=2000, help="images in all")
    ap.add_argument("--size", type=int, default=64, help="width and height in pixels")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    for c in range(a.classes):
        os.makedirs(os.path.join(a.out, "class-%03d" % c), exist_ok=True)
    for i in range(a.images):
        c = i % a.classes
        image(c, a.classes, a.size, rng).save(os.path.join(a.out, "class-%03d" % c, "img-%06d.jpg" % i), quality=90)
    print("wrote %d JPEGs in %d classes to %s" % (a.images, a.classes, a.out))


if __name__ == "__main__":
    main()
