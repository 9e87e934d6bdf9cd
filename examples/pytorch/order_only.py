"""Does the order brandrt delivers, and nothing else, change what a model
learns? Trains train.py's CNN on Fashion-MNIST held in memory as tensors,
in the order a policy delivers (`brandrt simulate --order-out` on the packed
dataset, which is serve's order: TestDataLoaderUnderMpirun) or in a true
shuffle, and prints the test accuracy after each epoch. A seed sets both
the model's initialisation and the order, so the runs of two systems with
one seed differ in their order alone: the report pairs them.

Everything convergence.py runs through (serve, the DataLoader, PNG
decoding) is left out, which makes a run about 1.5× faster and its
figures a measure of the order only.

    /usr/bin/python3 examples/pytorch/order_only.py --data /var/tmp/fashion-mnist \\
        --chunks /var/tmp/fashion-mnist-chunks-k256 --mem 10% --seeds 1-20 --out order-only.jsonl
    /usr/bin/python3 examples/pytorch/order_only.py --report --out order-only.jsonl

--class-packed maps the dataset's file ids to images sorted by class, as if
pack had not shuffled the files before cutting them into chunks (every chunk
of one class): a control that shows what an order the model does notice
looks like. --simulate passes flags to simulate (--ramp 8, --lead 2).
"""

import argparse
import ast
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from convergence import fraction, seeds_of  # noqa: E402
from train import model  # noqa: E402  (the same CNN)


def transform():
    import torchvision.transforms as T

    return T.Compose([T.Resize((32, 32)), T.ToTensor()])  # train.py's


def training_set(a):
    """The packed dataset's images by file id (1×32×32, as train.py sees
    them but one grey channel) and labels; cached beside the chunks."""
    cache = a.chunks.rstrip("/") + ".tensors.pt"
    if os.path.exists(cache):
        return torch.load(cache)
    from PIL import Image

    listing = subprocess.run([a.brandrt, "inspect", "--chunks", a.chunks, "--list"], capture_output=True, text=True, check=True).stdout
    tf, xs, ys = transform(), [], []
    for line in listing.splitlines()[1:]:  # id, label, size, rank, path
        fid, label, _, _, path = line.split("\t")
        if path.startswith('"'):  # a name with a control character or a backslash, quoted as Go quotes it
            path = ast.literal_eval(path)
        if int(fid) != len(xs):
            raise SystemExit("%s: file ids out of order at %s" % (a.chunks, fid))
        xs.append(tf(Image.open(os.path.join(a.data, "train", path)).convert("L")))
        ys.append(int(label))
    out = (torch.stack(xs), torch.tensor(ys))
    torch.save(out, cache)
    return out


def test_set(a):
    cache = os.path.join(a.data, "test.tensors.pt")
    if os.path.exists(cache):
        return torch.load(cache)
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    ds = ImageFolder(os.path.join(a.data, "test"), transform=T.Compose([T.Grayscale(), transform()]))
    xs, ys = zip(*[ds[i] for i in range(len(ds))])
    out = (torch.stack(xs), torch.tensor(ys))
    torch.save(out, cache)
    return out


def orders(a, system, seed, n):
    """One order of file ids per epoch."""
    if system == "shuffle":
        g = torch.Generator()
        g.manual_seed(seed)
        return [torch.randperm(n, generator=g) for _ in range(a.epochs)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "order.txt")
        subprocess.run([a.brandrt, "simulate", "--chunks", a.chunks, "--ranks", "1", "--mem-fraction", str(fraction(a.mem)),
                        "--epochs", str(a.epochs), "--seed", str(seed), "--policy", system, "--order-out", path] + a.simulate.split(),
                       check=True, capture_output=True)
        per = [[] for _ in range(a.epochs)]
        with open(path) as f:
            for line in f:
                if not line.startswith("#"):
                    e, _, sn, fid = map(int, line.split())
                    per[e - 1].append((sn, fid))
    return [torch.tensor([fid for _, fid in sorted(p)]) for p in per]


def train(a, X, Y, TX, TY, order, seed):
    torch.manual_seed(seed)
    net = model(10)
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=0.9)
    accs = []
    for o in order:
        for i in range(0, len(o), a.batch_size):
            idx = o[i:i + a.batch_size]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(X[idx].expand(-1, 3, -1, -1)), Y[idx])
            loss.backward()
            opt.step()
        net.eval()
        with torch.no_grad():
            right = sum((net(TX[i:i + 1000].expand(-1, 3, -1, -1)).argmax(1) == TY[i:i + 1000]).sum().item() for i in range(0, len(TY), 1000))
        net.train()
        accs.append(100.0 * right / len(TY))
    return accs


def group(r):
    """Runs comparable with one another: everything but system and seed."""
    return (os.path.basename(r["chunks"].rstrip("/")), r["mem"], r["simulate"], r["class_packed"], r["epochs"], r["batch_size"], r["lr"])


def report(records):
    shuffles = {}
    for r in records:
        if r["system"] == "shuffle":
            shuffles.setdefault((r["epochs"], r["batch_size"], r["lr"]), {})[r["seed"]] = r["accuracy"]
    groups = {}
    for r in records:
        if r["system"] != "shuffle":
            groups.setdefault(group(r), {}).setdefault(r["system"], {})[r["seed"]] = r["accuracy"]
    for g, systems in sorted(groups.items(), key=str):
        chunks, mem, sim, packed, epochs, batch, lr = g
        base = shuffles.get((epochs, batch, lr), {})
        print("## %s, --mem %s%s%s (batch %d, lr %g)" % (chunks, mem, ", simulate " + sim if sim else "",
                                                        ", files packed by class" if packed else "", batch, lr))
        print()
        print("| order | epoch | seeds | test accuracy, mean ± sd | shuffle, same seeds | paired difference, mean ± se | sd ratio |")
        print("|---|---|---|---|---|---|---|")
        for system, runs in sorted(systems.items()):
            seeds = sorted(set(runs) & set(base))
            if len(seeds) < 2:
                continue
            for e in range(epochs):
                xs, bs = [runs[s][e] for s in seeds], [base[s][e] for s in seeds]
                d = [x - b for x, b in zip(xs, bs)]
                se = statistics.stdev(d) / math.sqrt(len(d))
                print("| %s | %d | %d | %.2f ± %.2f | %.2f ± %.2f | %+.2f ± %.2f | %.2f |" % (
                    system, e + 1, len(seeds), statistics.mean(xs), statistics.stdev(xs), statistics.mean(bs), statistics.stdev(bs),
                    statistics.mean(d), se, statistics.stdev(xs) / statistics.stdev(bs)))
        print()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="fashion_mnist.py's output (train/ and test/)")
    ap.add_argument("--chunks", help="the training set packed by brandrt pack (its file ids and its chunks)")
    ap.add_argument("--mem", default="10%", help="memory as a percentage of the dataset (simulate --mem-fraction; serve --mem)")
    ap.add_argument("--systems", default="window,shuffle", help="window, paper and shuffle")
    ap.add_argument("--seeds", default="1-20", help="1,2,3 or 1-20")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--simulate", default="", help="more flags for brandrt simulate, in one string")
    ap.add_argument("--class-packed", action="store_true", help="map file ids to the images sorted by class (a control)")
    ap.add_argument("--brandrt", default=os.path.join(REPO, "bin", "brandrt"))
    ap.add_argument("--out", required=True, help="JSON lines, one per run (appended; runs already there are skipped)")
    ap.add_argument("--report", action="store_true", help="print the tables of --out and stop")
    a = ap.parse_args()
    records = []
    if os.path.exists(a.out):
        with open(a.out) as f:
            records = [json.loads(line) for line in f if line.strip()]
    if a.report:
        report(records)
        return
    if not a.data or not a.chunks:
        ap.error("--data and --chunks, or --report")
    torch.set_num_threads(a.threads)
    X, Y = training_set(a)
    packed = (X, Y)  # the policies' file ids → images
    if a.class_packed:
        by_class = torch.sort(Y, stable=True).indices
        packed = (X[by_class], Y[by_class])
    TX, TY = test_set(a)
    print("command: %s" % " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]), flush=True)
    for seed in seeds_of(a.seeds):
        for system in a.systems.split(","):
            rec = {"system": system, "seed": seed, "chunks": a.chunks, "mem": a.mem, "simulate": a.simulate, "class_packed": a.class_packed,
                   "epochs": a.epochs, "batch_size": a.batch_size, "lr": a.lr}
            if system == "shuffle":  # it depends on none of the order's settings
                rec.update(chunks="", mem="", simulate="", class_packed=False)
            if any(all(r.get(k) == v for k, v in rec.items()) for r in records):
                continue
            start = time.monotonic()
            images = (X, Y) if system == "shuffle" else packed
            rec["accuracy"] = train(a, *images, TX, TY, orders(a, system, seed, len(Y)), seed)
            records.append(rec)
            with open(a.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
            print("%-8s seed %2d: test accuracy %s (%.0f s)" % (system, seed, ", ".join("%.2f" % x for x in rec["accuracy"]),
                                                                  time.monotonic() - start), flush=True)


if __name__ == "__main__":
    main()
