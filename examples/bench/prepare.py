"""The dataset of the loader benchmark and its copies in every system's own
format, made once in the work directory and reused while their parameters
hold.

    <work>/input/           the generated dataset, unless --input names one
    <work>/files.json       every file: path, size, label, fingerprint
    <work>/chunks-k<K>/     brandrt pack --chunk-files K (one rank)
    <work>/wds/             WebDataset tar shards
    <work>/mds/             Mosaic Streaming MDS shards
    <work>/litdata/         LitData's optimized chunks

Every format holds the same files with the same labels. brandrt pack
shuffles the files itself (--seed); the peers' writers get the files in one
seeded shuffled order, as their documentation advises (a shard should not
hold one class). A format is built into <name>.tmp and renamed when
complete, with its parameters in format.json; a directory whose parameters
differ is rebuilt.
"""

import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
import zlib

ORDER_SEED = 1
# The shard sizes the peers' documentation recommends: WebDataset shards of
# 100 MB to 1 GB ("shards of about 100MB-200MB" for fast local reads),
# Mosaic's default size_limit (1 << 26), LitData's chunk_bytes of 64 MB in
# its examples; made smaller for small datasets so that every DataLoader
# worker gets several shards, and for small budgets so that Mosaic's cache
# holds four shards (it refuses less).
WDS_SHARD = 128 << 20
MDS_SHARD = 64 << 20
LITDATA_CHUNK = 64 << 20


class PrepareError(Exception):
    """The input cannot be benchmarked, with the file and the reason."""


def fingerprint(data, label):
    """What identifies a delivered file cheaply: its size, a CRC of its
    first and last 64 bytes, and its label. The check compares multisets of
    these, so identical files in a dataset are handled."""
    return (len(data), zlib.crc32(data[:64]), zlib.crc32(data[-64:]), int(label))


def list_input(root):
    """[(relative path, size, label)] of an ImageFolder tree (one directory
    per class, labels in sorted order, files found recursively), or of a
    plain tree (label -1), sorted by path, hidden entries skipped: the
    same rule as brandrt pack."""
    if not os.path.isdir(root):
        raise PrepareError("%s: not a directory" % root)
    entries = sorted(e for e in os.listdir(root) if not e.startswith("."))
    folder = bool(entries) and all(os.path.isdir(os.path.join(root, e)) for e in entries)
    out = []
    problems = []
    for label, top in enumerate(entries if folder else [""]):
        base = os.path.join(root, top)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(f for f in filenames if not f.startswith(".")):
                path = os.path.join(dirpath, name)
                try:
                    size = os.stat(path).st_size
                except OSError as e:
                    problems.append("%s: %s" % (path, e.strerror))
                    continue
                out.append((os.path.relpath(path, root), size, label if folder else -1))
    if problems:
        raise PrepareError("cannot read %d inputs:\n  %s" % (len(problems), "\n  ".join(problems[:10])))
    if not out:
        raise PrepareError("%s: no files" % root)
    return out


def generate(work, files, mean_size, classes, log):
    """<work>/input: a generated ImageFolder dataset of random bytes
    (examples/gendata), kept for later runs."""
    out = os.path.join(work, "input")
    stamp = os.path.join(work, "input.json")
    want = {"files": files, "mean_size": mean_size, "classes": classes}
    if _read_json(stamp) == want:
        return out
    repo = _repo()
    log("generating %d files of ~%s in %s …" % (files, _human(mean_size), out))
    shutil.rmtree(out, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(stamp)
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    env = dict(os.environ, GOTOOLCHAIN=os.environ.get("GOTOOLCHAIN", "auto"))
    subprocess.run(["go", "run", "./examples/gendata", "--out", tmp, "--files", str(files),
                    "--classes", str(classes), "--mean-size", str(mean_size)], cwd=repo, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    os.rename(tmp, out)
    _write_json(stamp, want)
    return out


def catalog(work, input_dir, log):
    """<work>/files.json for input_dir: every file with its size, label and
    fingerprint (reads the dataset once), and the shuffled order the peers'
    writers use. Reused while the input's listing is unchanged."""
    listing = list_input(input_dir)
    path = os.path.join(work, "files.json")
    old = _read_json(path)
    key = [input_dir, [[p, s, l] for p, s, l in listing]]
    if old and old.get("key") == key:
        return old
    log("fingerprinting %d files of %s …" % (len(listing), input_dir))
    prints = []
    with Progress("fingerprint", sum(s for _, s, _ in listing), log) as bar:
        for rel, size, label in listing:
            with open(os.path.join(input_dir, rel), "rb") as f:
                data = f.read()
            if len(data) != size:
                raise PrepareError("%s: changed while read (%d bytes, then %d)" % (rel, size, len(data)))
            prints.append(list(fingerprint(data, label)))
            bar.add(size)
    order = list(range(len(listing)))
    random.Random(ORDER_SEED).shuffle(order)
    cat = {"key": key, "input": input_dir, "files": [[p, s, l] for p, s, l in listing], "prints": prints,
           "order": order, "bytes": sum(s for _, s, _ in listing), "classes": 1 + max(l for _, _, l in listing)}
    _write_json(path, cat)
    return cat


def build(work, name, params, make, log):
    """<work>/<name>, made by make(tmpdir) unless it exists with params."""
    out = os.path.join(work, name)
    if _read_json(os.path.join(out, "format.json")) == params:
        return out
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    start = time.monotonic()
    log("building %s …" % name)
    try:
        make(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _write_json(os.path.join(tmp, "format.json"), params)
    os.rename(tmp, out)
    log("built %s in %.1f s" % (name, time.monotonic() - start))
    return out


def shard_bytes(recommended, cat, workers, min_budget=None):
    """The shard size to write: the recommended one, but at most a
    4 × workers-th of the dataset and, for a format read through a cache
    of the budget, 2/9 of the smallest budget (Mosaic wants its cache to
    hold four shards)."""
    size = min(recommended, cat["bytes"] // (4 * workers))
    if min_budget is not None:
        size = min(size, min_budget * 2 // 9)
    return int(max(64 << 10, size))


def chunks_name(k, ranks=1):
    """The packed dataset's directory for K (0: pack's default chunks) and
    a number of ranks: chunks-kK or chunks-default, then -rN for N > 1."""
    return ("chunks-k%d" % k if k else "chunks-default") + ("-r%d" % ranks if ranks > 1 else "")


def chunks(work, cat, k, brandrt, log, ranks=1):
    """brandrt pack of the input with K files per chunk (0: pack's default,
    chunks of up to 16 MiB and 64 files), for ranks ranks (chunks_name)."""

    def make(tmp):
        subprocess.run([brandrt, "pack", "--input", cat["input"], "--out", tmp] + (["--chunk-files", str(k)] if k else []) +
                       ["--ranks", str(ranks), "--seed", str(ORDER_SEED)], check=True, stdout=subprocess.DEVNULL)

    name = chunks_name(k, ranks)
    return build(work, name, {"key": _digest(cat), "k": k, "ranks": ranks} if ranks > 1 else {"key": _digest(cat), "k": k},
                 make, log)


def _samples(cat):
    """(index, data, label) of every file, in the shuffled order."""
    for i in cat["order"]:
        rel, _, label = cat["files"][i]
        with open(os.path.join(cat["input"], rel), "rb") as f:
            yield i, f.read(), label


def webdataset_shards(work, cat, workers, log):
    """WebDataset tar shards: each sample a .bin member and a .cls label."""
    size = shard_bytes(WDS_SHARD, cat, workers)

    def make(tmp):
        import webdataset as wds

        os.makedirs(tmp)
        with Progress("webdataset", cat["bytes"], log) as bar, \
                wds.ShardWriter(os.path.join(tmp, "shard-%06d.tar"), maxsize=size, maxcount=1 << 30,
                                verbose=0) as w:
            for i, data, label in _samples(cat):
                w.write({"__key__": "%09d" % i, "bin": data, "cls": str(label).encode()})
                bar.add(len(data))

    return build(work, "wds", {"key": _digest(cat), "shard": size}, make, log)


def mds_shards(work, cat, workers, min_budget, log):
    """Mosaic Streaming MDS shards, columns data (bytes) and label (int),
    uncompressed (the bytes are random or JPEG: nothing to gain)."""
    size = shard_bytes(MDS_SHARD, cat, workers, min_budget)

    def make(tmp):
        from streaming import MDSWriter

        with Progress("mds", cat["bytes"], log) as bar, \
                MDSWriter(out=tmp, columns={"data": "bytes", "label": "int"}, size_limit=size, progress_bar=False) as w:
            for _, data, label in _samples(cat):
                w.write({"data": data, "label": label})
                bar.add(len(data))

    return build(work, "mds", {"key": _digest(cat), "shard": size}, make, log)


def _litdata_item(arg):
    path, label = arg
    with open(path, "rb") as f:
        return {"data": f.read(), "label": label}


def litdata_chunks(work, cat, workers, min_budget, log):
    """LitData's optimized format (litdata.optimize), items {data, label}."""
    size = shard_bytes(LITDATA_CHUNK, cat, workers, min_budget)

    def make(tmp):
        import litdata

        inputs = [(os.path.join(cat["input"], cat["files"][i][0]), cat["files"][i][2]) for i in cat["order"]]
        # optimize stages its chunks in TMPDIR/chunks and TMPDIR/data
        # unless told otherwise, and leaves them there
        scratch = tmp + ".scratch"
        saved = {k: os.environ.get(k) for k in ("DATA_OPTIMIZER_CACHE_FOLDER", "DATA_OPTIMIZER_DATA_CACHE_FOLDER")}
        os.environ.update(DATA_OPTIMIZER_CACHE_FOLDER=os.path.join(scratch, "chunks"),
                          DATA_OPTIMIZER_DATA_CACHE_FOLDER=os.path.join(scratch, "data"))
        with open(os.devnull, "w") as null:
            old = sys.stdout
            sys.stdout = null  # optimize prints a progress line per worker
            try:
                litdata.optimize(fn=_litdata_item, inputs=inputs, output_dir=tmp, chunk_bytes=size, num_workers=1,
                                 mode="overwrite")
            finally:
                sys.stdout = old
                shutil.rmtree(scratch, ignore_errors=True)
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v

    return build(work, "litdata", {"key": _digest(cat), "chunk": size}, make, log)


class Progress:
    """A progress line on stderr for long preparation steps (a terminal
    only), in MB and percent."""

    def __init__(self, what, total, log):
        self.what, self.total, self.done, self.last = what, max(total, 1), 0, 0.0
        self.tty = sys.stderr.isatty()

    def add(self, n):
        self.done += n
        now = time.monotonic()
        if self.tty and now - self.last > 0.5:
            self.last = now
            sys.stderr.write("\r  %s: %d of %d MB (%d%%)" % (self.what, self.done >> 20, self.total >> 20,
                                                              100 * self.done // self.total))
            sys.stderr.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.tty:
            sys.stderr.write("\r" + " " * 60 + "\r")


def _digest(cat):
    return "%08x" % zlib.crc32(json.dumps(cat["key"]).encode())


def _repo():
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _human(n):
    return "%.0f KB" % (n / 1e3) if n < 1e6 else "%.1f MB" % (n / 1e6)


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)
