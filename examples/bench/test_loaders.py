"""Tests of the loader benchmark (make test runs them with .venv/bin/python).

The end-to-end tests run loaders.py on a tiny generated dataset, under the
cgroups and cold cache of a real run (root), and read what it wrote: two
systems (random and brandrt), every other system on the same data, and a
run that cannot fit its memory limit and must be shown as failed."""

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import cgroups  # noqa: E402
import cluster  # noqa: E402
import loaders  # noqa: E402
import prepare  # noqa: E402
import report  # noqa: E402
import runner  # noqa: E402

FILES = 240
TINY = ["--files", str(FILES), "--file-size", "24KB", "--classes", "3", "--epochs", "2", "--workers", "2",
        "--batch-size", "16"]


def bench(work, *args, timeout=300):
    """Runs loaders.py; returns (completed process, meta, records)."""
    out = os.path.join(work, "out")
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "loaders.py"), "--work", work, "--out", out] + list(args),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()  # the driver removes what it started
        stdout, stderr = proc.communicate(timeout=30)
        raise AssertionError("loaders.py %s: no result in %d s\n%s" % (" ".join(args), timeout, stderr[-3000:]))
    p = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    p.pid = proc.pid
    meta, recs = bench_results(out)
    return p, meta, recs


def bench_results(out):
    """(meta, records) of out/results.jsonl; no meta and no records when
    it is not there."""
    meta, recs = None, []
    path = os.path.join(out, "results.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("event") == "meta":
                    meta = r
                else:
                    recs.append(r)
    return meta, recs


def need_root(test):
    why = cgroups.available()
    return unittest.skipIf(why, why)(test)


class Work:
    """One tiny dataset shared by the end-to-end tests of a run."""

    dir = None

    @classmethod
    def get(cls):
        if cls.dir is None:
            cls.dir = tempfile.mkdtemp(prefix="brandrt-bench-test-", dir="/var/tmp")
        return cls.dir


def tearDownModule():
    if Work.dir:
        shutil.rmtree(Work.dir, ignore_errors=True)


class EndToEnd(unittest.TestCase):
    def check_ok(self, rec, p):
        self.assertEqual(rec["status"], "ok", "%s: %s\n%s" % (rec["system"], rec.get("error"), p.stderr[-3000:]))
        self.assertEqual(len(rec["epochs"]), 2)
        for e in rec["epochs"]:
            self.assertEqual(e["files"], FILES)
            self.assertEqual(e["check"], "ok")
            self.assertGreater(e["seconds"], 0)
            self.assertGreater(e["cpu_s"], 0)
            # the split by process adds up to the cgroup's CPU time (the
            # processes' clock ticks are 10 ms)
            by = e["cpu_by"]
            self.assertEqual(sorted(by), ["main", "other", "rank", "workers"])
            self.assertTrue(all(v >= 0 for v in by.values()), by)
            self.assertAlmostEqual(sum(by.values()), e["cpu_s"], delta=0.01 * 8 + 0.05 * e["cpu_s"])
        # over the run, the main process took some, and only brandrt has
        # a rank (whose CPU in so small a run may stay under a clock tick)
        run = {k: sum(e["cpu_by"][k] for e in rec["epochs"]) for k in ("main", "rank")}
        self.assertGreater(run["main"], 0)
        if not rec["system"].startswith("brandrt"):
            self.assertEqual(run["rank"], 0)
        self.assertEqual(rec["limit_bytes"], rec["budget_bytes"] + (768 << 20))
        self.assertLessEqual(rec["memory"]["peak_bytes"], rec["limit_bytes"])

    @need_root
    def test_two_systems(self):
        p, meta, recs = bench(Work.get(), "--systems", "random,brandrt-paper", "--mem", "25%", *TINY)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertEqual([r["system"] for r in recs], ["random", "brandrt-paper"])
        for r in recs:
            self.check_ok(r, p)
        data = meta["bytes"]
        rnd, brt = recs
        # Cold: epoch 1 read the dataset from the disk, as the kernel counts it.
        self.assertGreaterEqual(rnd["epochs"][0]["read_bytes"], data)
        # brandrt read whole chunks, and said so itself.
        stats = brt["own"]["stats"]
        self.assertEqual([s["files_delivered"] for s in stats], [FILES, FILES])
        self.assertGreaterEqual(brt["epochs"][0]["read_bytes"], stats[0]["chunk_bytes"])
        self.assertEqual(brt["chunk_files"], 64)
        # what the processes beside the rank held, measured and said
        self.assertGreater(brt["memory"]["others_held_peak_bytes"], 10 << 20)
        self.assertNotIn("others_held_peak_bytes", rnd["memory"])
        self.assertIn("the processes beside the rank (training, DataLoader workers, mpirun) held at most", p.stderr)
        self.assertIn("random", p.stdout)
        self.assertIn("brandrt-paper K=64", p.stdout)
        self.assertIn("×rand", p.stdout)
        self.assertIn("CPU µs per file by process, epoch 1 / epochs 2 on:", p.stdout)
        for name in ("files-per-s-local.png", "read-amp-local.png", "tables.txt"):
            path = os.path.join(Work.get(), "out", name)
            self.assertTrue(os.path.getsize(path) > 0, path)
        with open(os.path.join(Work.get(), "out", "files-per-s-local.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    @need_root
    def test_file_sizes(self):
        # a list of sizes: a dataset, a table and plots each, then the ratios by size
        work = os.path.join(Work.get(), "sizes")
        tiny = [x for x in TINY if x not in ("--file-size", "24KB")]
        p, _, _ = bench(work, "--systems", "random,brandrt-window", "--mem", "25%", "--chunk-files", "16",
                        "--file-size", "8KB,24KB", *tiny)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        for size, mean in (("8KB", 8000), ("24KB", 24000)):
            with open(os.path.join(work, "size-" + size, "input.json")) as f:
                self.assertEqual(json.load(f)["mean_size"], mean)
            meta, recs = bench_results(os.path.join(work, "out", size))
            self.assertEqual(meta["files"], FILES)
            self.assertEqual([r["system"] for r in recs], ["random", "brandrt-window"])
            for r in recs:
                self.check_ok(r, p)
            self.assertTrue(os.path.getsize(os.path.join(work, "out", size, "files-per-s-local.png")) > 0)
        with open(os.path.join(work, "out", "sizes.txt")) as f:
            text = f.read()
        for size in ("8KB", "24KB"):
            self.assertRegex(text, r"(?m)^%s \(240 files\): brandrt-window K=16 against each .*random [0-9.]+×/"
                             % size)
        self.assertIn(text.strip(), p.stdout)

    @need_root
    def test_every_other_system(self):
        systems = ["threads", "coordl", "webdataset", "mosaic", "litdata", "noio"]
        # Mosaic stalled now and then with a cache of 25% of this tiny set (5
        # shards): the run then fails as "stalled"; at 50% it never did.
        tmp = set(os.listdir("/tmp"))
        p, meta, recs = bench(Work.get(), "--systems", ",".join(systems), "--mem", "50%", *TINY)
        # Mosaic's file locks and the workers' pymp-* directories went with
        # each run's own TMPDIR.
        self.assertEqual(set(os.listdir("/tmp")) - tmp, set())
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertEqual([r["system"] for r in recs], systems)
        for r in recs:
            self.check_ok(r, p)
        by = {r["system"]: r for r in recs}
        # The static cache holds files of the budget and serves them from epoch 2.
        self.assertGreater(by["coordl"]["own"]["cached_files"], 0)
        self.assertLessEqual(by["coordl"]["own"]["cached_bytes"], by["coordl"]["budget_bytes"])
        self.assertLess(by["noio"]["epochs"][1]["read_bytes"], meta["bytes"] // 10)  # no storage

    @need_root
    def test_on_a_cluster(self):
        why = cluster.available()
        if why:
            self.skipTest(why)
        systems = ["random", "coordl", "brandrt-window", "noio"]
        p, meta, recs = bench(Work.get(), "--systems", ",".join(systems), "--mem", "50%", "--nodes", "2",
                              "--storage", "nas", "--chunk-files", "16", *TINY)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertEqual([r["system"] for r in recs], systems)
        by = {r["system"]: r for r in recs}
        for r in recs:
            self.assertEqual(r["status"], "ok", "%s: %s\n%s" % (r["system"], r.get("error"), p.stderr[-3000:]))
            self.assertEqual(r["nodes"], 2)
            self.assertLessEqual(r["memory"]["peak_bytes"], r["limit_bytes"])
            for e in r["epochs"]:
                self.assertEqual((e["files"], e["check"]), (FILES, "ok"))  # every file once, over both nodes
                self.assertEqual(len(e["nodes"]), 2)
                self.assertEqual(sum(n["files"] for n in e["nodes"]), FILES)
                self.assertGreater(min(n["files"] for n in e["nodes"]), 0)
        # Cold, epoch 1 came over the NAS's link.
        self.assertGreaterEqual(by["random"]["epochs"][0]["net_bytes"], meta["bytes"])
        # brandrt's ranks sent files to each other over the nodes' links: at
        # least as many bytes crossed them as the ranks say they sent, over
        # the run (not per epoch: a rank pushes the next epoch's first files
        # as soon as its epoch begins, which may be before the runner's).
        brt = by["brandrt-window"]
        for st in brt["own"]["stats"]:
            self.assertGreater(st["network_bytes"], 0)
        self.assertGreaterEqual(sum(e["between_nodes_bytes"] for e in brt["epochs"]),
                                sum(st["network_bytes"] for st in brt["own"]["stats"]))
        # What mpirun started on each node (orted and the rank) is measured
        # apart, within the node's cgroup; other systems start nothing there.
        mem = brt["memory"]
        for rank, held, node in zip(mem["per_node_mpi_peak_bytes"], mem["per_node_mpi_held_peak_bytes"], mem["per_node_peak_bytes"]):
            self.assertGreater(held, 1 << 20)
            self.assertLessEqual(held, rank)
            self.assertLess(rank, node)
        self.assertEqual(by["coordl"]["memory"]["per_node_mpi_peak_bytes"], [0, 0])
        # From epoch 2 coordl fetches what the other node keeps from it.
        self.assertGreater(by["coordl"]["epochs"][1]["between_nodes_bytes"], 0)
        self.assertIn("== 2 nodes, NAS, memory 50%", p.stdout)
        # The report states that check: the links carried what the ranks sent.
        ratio = re.search(r"links check, brandrt-window K=\d+ round 1: .* carried .*: ([\d.]+)×", p.stdout)
        self.assertIsNotNone(ratio, p.stdout)
        self.assertGreaterEqual(float(ratio.group(1)), 1.0)
        self.assertTrue(os.path.getsize(os.path.join(Work.get(), "out", "files-per-s-nodes-mem50pct.png")) > 0)
        self.assertEqual(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.count("bb-"), 0)

    @need_root
    def test_a_run_that_fails_is_shown(self):
        p, meta, recs = bench(Work.get(), "--systems", "random", "--mem", "25%", "--allowance", "8MiB", *TINY)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertEqual(len(recs), 1)
        self.assertEqual(recs[0]["status"], "failed")
        self.assertIn("out of memory", recs[0]["error"])
        self.assertIn("random               failed: ", p.stdout)
        self.assertIn("1 of 1 runs failed", p.stderr)
        # Its cgroups are gone.
        for c in ("memory", "blkio", "cpuacct"):
            left = [d for d in os.listdir("/sys/fs/cgroup/" + c) if d.startswith("brandrt-bench-%d-" % p.pid)]
            self.assertEqual(left, [])

    @need_root
    def test_sigterm_ends_a_run_and_leaves_nothing(self):
        # Many epochs, so that the run is still going when it is told to end.
        args = [sys.executable, os.path.join(HERE, "loaders.py"), "--work", Work.get(), "--out",
                os.path.join(Work.get(), "out-term"), "--systems", "random", "--mem", "25%"] + TINY + ["--epochs", "500"]
        shm = set(os.listdir("/dev/shm"))
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            seen = []
            for line in proc.stderr:
                seen.append(line)
                if "random epoch 1:" in line:
                    break
            else:
                self.fail("no epoch before loaders.py ended:\n" + "".join(seen[-30:]))
            proc.terminate()
            rest = proc.communicate(timeout=20)[1]
            self.assertEqual(proc.returncode, 143, rest[-3000:])
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for c in ("memory", "blkio", "cpuacct"):
            left = [d for d in os.listdir("/sys/fs/cgroup/" + c) if d.startswith("brandrt-bench-%d-" % proc.pid)]
            self.assertEqual(left, [])  # a cgroup is removed only once its processes are gone
        self.assertEqual(set(os.listdir("/dev/shm")) - shm, set())

    @need_root
    def test_what_a_killed_run_left_is_removed(self):
        dead = subprocess.Popen(["true"])
        dead.wait()
        left = [os.path.join("/dev/shm", "brandrt-bench-%d-mosaic-x1" % dead.pid),
                os.path.join("/tmp", "brandrt-bench-%d-3-x1" % dead.pid)]
        live = os.path.join("/dev/shm", "brandrt-bench-%d-mosaic-x2" % os.getpid())
        try:
            for d in left + [live]:
                os.makedirs(os.path.join(d, "sub"))
            loaders.remove_stale()
            for d in left:
                self.assertFalse(os.path.exists(d), d)
            self.assertTrue(os.path.exists(live))  # its driver is alive
        finally:
            for d in left + [live]:
                shutil.rmtree(d, ignore_errors=True)


class Arguments(unittest.TestCase):
    def test_bad_flags_are_named(self):
        p = subprocess.run([sys.executable, os.path.join(HERE, "loaders.py"), "--systems", "random,tfdata",
                            "--storage", "s3", "--mem", "1500%"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("1500%", p.stderr)
        p = subprocess.run([sys.executable, os.path.join(HERE, "loaders.py"), "--systems", "random,tfdata",
                            "--storage", "s3", "--epochs", "0"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        for what in ("unknown system 'tfdata'", "unknown storage 's3'", "--epochs"):
            self.assertIn(what, p.stderr)
        p = subprocess.run([sys.executable, os.path.join(HERE, "loaders.py"), "--file-size", "8KB,1MB,8KB",
                            "--files", "10,20"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        for what in ("--files gives 2 counts for 3 --file-size values", "--file-size names a size twice"):
            self.assertIn(what, p.stderr)

    def test_file_size_lists(self):
        # as large as the default dataset (30,000 files of 110 KB), at most 60,000 files
        self.assertEqual(loaders.file_counts(None, [8000, 110000, 10**6]), [60000, 30000, 3300])
        self.assertEqual(loaders.file_counts(None, [24000]), [30000])
        self.assertEqual(loaders.file_counts([500], [8000, 10**6]), [500, 500])
        self.assertEqual(loaders.file_counts([5, 6], [8000, 10**6]), [5, 6])
        self.assertEqual([loaders.size_label(n) for n in (8000, 110000, 10**6, 1 << 20, 1536, 777)],
                         ["8KB", "110KB", "1MB", "1MiB", "1536B", "777B"])

    def test_allowance(self):
        a = loaders.args_parser().parse_args([])
        small = {"bytes": 30000 * 110000, "files": [None] * 30000}
        big = {"bytes": 3300 * 10**6, "files": [None] * 3300}
        self.assertEqual(loaders.allowance(a, small), 768 << 20)
        # 620 MiB and three batches of 64 files of 1 MB per worker (4)
        self.assertEqual(loaders.allowance(a, big), (620 << 20) + 3 * 4 * 64 * 10**6)
        a = loaders.args_parser().parse_args(["--allowance", "1GiB"])
        self.assertEqual(loaders.allowance(a, big), 1 << 30)

    def test_sizes(self):
        self.assertEqual(loaders.parse_size("110KB"), 110000)
        self.assertEqual(loaders.parse_size("1.5GiB"), 3 << 29)
        self.assertEqual(loaders.parse_size("4096"), 4096)
        self.assertEqual(loaders.parse_mem("25%"), ("%", 25.0))
        self.assertEqual(loaders.parse_mem("110%"), ("%", 110.0))
        self.assertEqual(loaders.parse_mem("512MiB"), ("B", 512 << 20))
        for bad in ("lots", "12XB"):
            with self.assertRaises(argparse.ArgumentTypeError):
                loaders.parse_size(bad)
        with self.assertRaises(argparse.ArgumentTypeError):
            loaders.parse_mem("0%")

    def test_input_listing_follows_pack(self):
        d = tempfile.mkdtemp()
        try:
            for path in ("b/2.bin", "b/sub/1.bin", "a/1.bin", ".hidden/x", "a/.DS_Store"):
                os.makedirs(os.path.join(d, os.path.dirname(path)), exist_ok=True)
                with open(os.path.join(d, path), "wb") as f:
                    f.write(b"x" * len(path))
            self.assertEqual(prepare.list_input(d), [("a/1.bin", 7, 0), ("b/2.bin", 7, 1), ("b/sub/1.bin", 11, 1)])
            with open(os.path.join(d, "loose"), "wb") as f:
                f.write(b"y")
            self.assertEqual([l for _, _, l in prepare.list_input(d)], [-1] * 4)
        finally:
            shutil.rmtree(d)
        with self.assertRaises(prepare.PrepareError):
            prepare.list_input("/nonexistent/dataset")

    def test_report_merges_runs(self):
        def rec(storage, system, secs):
            ep = {"files": 100, "bytes": 1000, "seconds": secs, "read_bytes": 2000, "net_bytes": 0, "cpu_s": 1,
                  "check": "ok"}
            return {"system": system, "storage": storage, "mem": "25%", "budget_bytes": 250, "limit_bytes": 1250,
                    "chunk_files": 64 if system.startswith("brandrt") else None, "round": 1, "status": "ok",
                    "epochs": [ep, ep], "memory": {"peak_bytes": 1, "held_peak_bytes": 1}}

        def write(path, command, recs):
            meta = {"command": command, "machine": "m", "files": 100, "bytes": 1000, "input": "/in",
                    "allowance_bytes": 1000, "workers": 4, "batch_size": 64, "epochs": 2, "threads": 4,
                    "pipe_size": 1 << 20, "event": "meta"}
            with open(path, "w") as f:
                for r in [meta] + recs:
                    f.write(json.dumps(r) + "\n")

        d = tempfile.mkdtemp()
        try:
            a, b = os.path.join(d, "a.jsonl"), os.path.join(d, "b.jsonl")
            # a: local, and a nas part that b ran again
            write(a, "run-a", [rec(s, n, t) for s in ("local", "nas") for n, t in (("random", 1.0), ("brandrt-paper", 4.0))])
            write(b, "run-b", [rec("nas", "random", 1.0), rec("nas", "brandrt-paper", 2.0)])
            cmd = [sys.executable, os.path.join(HERE, "loaders.py"), "--out", d, "--report"]
            p = subprocess.run(cmd + [a + ":local", b], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("command:  run-a\n          run-b\n", p.stdout)
            self.assertIn("brandrt-paper K=64 against each (epoch 1 / epochs 2 on): random 0.25×/0.25×", p.stdout)
            self.assertIn("brandrt-paper K=64 against each (epoch 1 / epochs 2 on): random 0.50×/0.50×", p.stdout)
            for name in ("files-per-s-local.png", "files-per-s-nas.png"):
                self.assertTrue(os.path.exists(os.path.join(d, name)), name)
            p = subprocess.run(cmd + [a, b], capture_output=True, text=True)
            self.assertEqual(p.returncode, 1)
            self.assertIn("nas, memory 25%% is in both %s and %s" % (a, b), p.stderr)
        finally:
            shutil.rmtree(d)


class Checks(unittest.TestCase):
    def test_calibrate_fits(self):
        import calibrate

        # costs recovered from rows they made, none below 0
        rng = __import__("random").Random(1)
        x = [[rng.randrange(1000, 9000), rng.randrange(0, 5000), rng.randrange(0, 10**9)] for _ in range(40)]
        y = [2e-5 * a + 0 * b + 1e-9 * c for a, b, c in x]
        coef = calibrate.nnls(calibrate.np.array(x, dtype=float), calibrate.np.array(y))
        self.assertTrue(all(c >= 0 for c in coef))
        for got, want in zip(coef, (2e-5, 0, 1e-9)):
            self.assertAlmostEqual(got, want, delta=want * 1e-6 + 1e-12)
        # a column that would fit best below 0 is left at 0
        y = [1e-5 * a - 1e-6 * b for a, b, _ in x]
        self.assertEqual(calibrate.nnls(calibrate.np.array(x, dtype=float), calibrate.np.array(y))[1], 0)

    def test_plancheck_time(self):
        import plancheck

        self.assertEqual(plancheck.rate("3gbit"), 375000000)
        self.assertEqual(plancheck.rate("100mbit"), 12500000)
        with self.assertRaises(ValueError):
            plancheck.rate("3 gigs")
        run = {"epochs": [{"seconds": 5.0}, {"seconds": 2.0}]}
        planned = {"epochs": [
            {"epoch": 1, "seconds": 3.0, "bound": "storage", "cpu_seconds": [2.0, 2.0], "ranks": [{"read_bytes": 10**9, "received_bytes": 0}] * 2},
            {"epoch": 2, "seconds": 0.5, "bound": "the node's CPU", "cpu_seconds": [1.0, 1.0], "ranks": [{"read_bytes": 0, "received_bytes": 10**9}] * 2}]}
        costs = {"cores_busy": 0.5, "start_s": 1.0, "host_s_per_read_byte": 1e-9, "host_s_per_moved_byte": 0.0}
        ratios = []
        lines = plancheck.times(run, planned, costs, 2, ratios)
        # epoch 1: (4 s of the nodes + 2 s outside) over 2 cores half busy, and the start: 7 s
        # epoch 2: 2 s over 1 core's worth: 2 s
        self.assertEqual(ratios, [(1, 5.0 / 7.0, 7.0, 5.0), (2, 1.0, 2.0, 2.0)])
        self.assertIn("7.00s", lines[1])
        self.assertEqual(plancheck.spread([(e, r) for e, r, _, _ in ratios]), "measured / planned time: epoch 1 0 of 1 within 20 % (0.71 to 0.71); "
                                                   "later epochs 1 of 1 within 20 % (1.00 to 1.00)")

    def test_plancheck_links(self):
        # the network's plan is what the links carry where plan had costs
        # (link_in_bytes), the files' bytes where it had none
        import plancheck

        run = {"epochs": [{"net_bytes": 100, "between_nodes_bytes": 1030}, {"net_bytes": 50, "between_nodes_bytes": 2060}]}
        ranks = [{"read_bytes": 50, "received_bytes": 500}] * 2
        planned = {"epochs": [{"epoch": 1, "ranks": ranks, "link_in_bytes": [515, 515]},
                              {"epoch": 2, "ranks": ranks, "link_in_bytes": [1030, 1030]}]}
        lines, storage, network = plancheck.table(run, planned)
        self.assertEqual((storage, network), (150 / 200, 1.0))
        self.assertIn("planned on links", lines[0])
        for e in planned["epochs"]:
            del e["link_in_bytes"]
        lines, _, network = plancheck.table(run, planned)
        self.assertEqual(network, 3090 / 2000)
        self.assertIn("planned moved", lines[0])

    def test_calibrate_links(self):
        # what the links carried beyond the files, per file and per byte,
        # from runs' totals
        import calibrate

        data = [({"link_files": f, "link_bytes": b}, {"link": 130 * f + 0.0027 * b}) for f, b in
                ((90000, 7.2e8), (17800, 1.96e9), (1950, 1.95e9), (135000, 1.08e9))]
        coef, n, med, _ = calibrate.fit(data, ("link_files", "link_bytes"), "link")
        self.assertEqual(n, 4)
        self.assertAlmostEqual(coef[0], 130, delta=1e-6)
        self.assertAlmostEqual(coef[1], 0.0027, delta=1e-12)

    def test_calibrate_memory(self):
        # the fills recovered from nodes' peaks they made: held terms (the
        # own files as the pages they write where the budget holds the
        # shard), a process, and shares of the bounds on files in flight
        # and handed on, apart for a training that held each batch
        import calibrate

        rng = __import__("random").Random(2)
        mib = 2**20
        data, runs = [], []
        for i in range(24):
            t = {k: rng.randrange(1, 40) * mib for k in calibrate.HELD + calibrate.IN_FLIGHT + ("Handed",)}
            t.update(Own=rng.randrange(50, 900) * mib, Shard=600 * mib, Budget=rng.choice((150, 600)) * mib)
            t["Written"] = int(t["Own"] * 0.9)
            step = i % 3 == 0
            own = t["Written"] if t["Budget"] >= t["Shard"] else t["Own"]
            peak = own + sum(t[k] for k in calibrate.HELD) + 25 * mib + 0.4 * sum(t[k] for k in calibrate.IN_FLIGHT) + (0.5 if step else 0.2) * t["Handed"]
            run = {"memory": {"per_node_mpi_peak_bytes": [peak]}, "step_s": 0.1 if step else 0}
            data += calibrate.memory_rows(run, {"footprint_terms": [t]})
        fills, n, ratios = calibrate.fit_memory(data)
        self.assertEqual(n, 24)
        for key, want in (("mem_process_bytes", 25 * mib), ("mem_fill_in_flight", 0.4), ("mem_fill_handed", 0.2), ("mem_fill_handed_training", 0.5)):
            self.assertAlmostEqual(fills[key], want, delta=want * 1e-6)
        self.assertTrue(all(abs(r - 1) < 1e-9 for r in ratios))
        # no run whose training held its batches: that fill is left out
        # (plan counts the bound whole), and one past 1 is taken as 1
        fills, _, _ = calibrate.fit_memory([(dict(x, handed_training=0), {"mem": y["mem"] - x["handed_training"] * 0.5 + x["in_flight"] * 0.8, "mem_peak": y["mem_peak"]})
                                            for x, y in data])
        self.assertNotIn("mem_fill_handed_training", fills)
        self.assertEqual(fills["mem_fill_in_flight"], 1)
        lines = calibrate.memory_lines(fills, 24, [1.0] * 24)
        self.assertIn("24 of 24 nodes", lines[0])
        self.assertIn("at their bound", lines[-1])

    def test_peers_inline(self):
        # --peers-inline gives every system's DataLoader BrandLoader's
        # inline tensors; without it, or without workers, the plain collate
        import systems

        spec = {"workers": 4, "batch_size": 64, "repo": REPO}
        self.assertIs(systems.loader_args(spec)["collate_fn"], systems.collate)
        fn = systems.loader_args(dict(spec, peers_inline=True))["collate_fn"]
        from brandrt.inline import InlineSmall  # on the path loader_args put it

        self.assertIsInstance(fn, InlineSmall)
        self.assertIs(fn.collate_fn, systems.collate)
        self.assertIs(systems.loader_args(dict(spec, peers_inline=True, workers=0))["collate_fn"], systems.collate)
        meta = {"command": "c", "machine": "m", "files": 1, "bytes": 1, "input": "/in", "workers": 4, "batch_size": 64,
                "pipe_size": 0, "threads": 4, "epochs": 2}
        self.assertNotIn("--peers-inline", report.tables(meta, []))
        self.assertIn("small tensors inline (--peers-inline)", report.tables(dict(meta, peers_inline=True), []))

    def test_process_kinds(self):
        import runner

        me = os.getpid()
        self.assertEqual(runner.kind(me, 1, [b"python3", b"runner.py"]), "main")
        self.assertEqual(runner.kind(me + 1, 7, [b"/repo/bin/brandrt", b"serve", b"--chunks"]), "rank")
        self.assertEqual(runner.kind(me + 1, me, [b"/usr/bin/python3", b"-W", b"ignore"]), "workers")
        self.assertEqual(runner.kind(me + 1, me, [b"mpirun", b"-np", b"1"]), "other")
        self.assertEqual(runner.kind(me + 1, 7, [b"/usr/bin/python3"]), "other")
        a = (1e9, {1: ("main", 1.0), 2: ("rank", 0.5)})
        b = (4e9, {1: ("main", 2.0), 2: ("rank", 1.5), 3: ("workers", 0.25)})
        self.assertEqual(runner.CPUSplit.between(a, b), {"main": 1.0, "workers": 0.25, "rank": 1.0, "other": 0.75})

    def test_others_held(self):
        # what is held beside a process whose command line is a rank's
        # (brandrt serve): this process's anonymous memory and mapped
        # files, not the rank's
        d = tempfile.mkdtemp()
        try:
            with open(os.path.join(d, "serve"), "w") as f:
                f.write("import time\ntime.sleep(30)\n")
            # Python running the script ./serve, its command line
            # .../brandrt serve
            rank = subprocess.Popen([os.path.join(d, "brandrt"), "serve"], executable=sys.executable, cwd=d)
            try:
                self.assertIsNone(loaders.others_held([os.getpid()]))  # no rank among them
                # its command line shows once it has exec'd: Popen may
                # return before (an empty /proc/PID/cmdline seen here)
                deadline = time.monotonic() + 10
                while (before := loaders.others_held([os.getpid(), rank.pid])) is None and time.monotonic() < deadline:
                    time.sleep(0.01)
                self.assertIsNotNone(before, "the process with the command line brandrt serve")
                ballast = b"\x01" * (64 << 20)  # written: anonymous
                after = loaders.others_held([os.getpid(), rank.pid])
                self.assertGreater(after - before, 60 << 20)
                del ballast
            finally:
                rank.kill()
                rank.wait()
        finally:
            shutil.rmtree(d)

    def test_cpu_steps(self):
        import cpusteps

        raw = os.path.join(tempfile.mkdtemp(dir=Work.get()), "p.txt")
        with open(raw, "w") as f:
            f.write('process 1:"runner";read_epoch (runner.py:120);Connection._recv (multiprocessing/connection.py:378) 30\n')
            f.write('process 1:"runner";<module> (runner.py:4);_find_and_load (<frozen importlib._bootstrap>:1178) 10\n')
            f.write('process 1:"runner";process 2:"w";_worker_loop (torch/utils/data/_utils/worker.py:308);'
                    'BrandDataset._many.<locals>.use (brandrt/torch.py:303) 20\n')
            f.write('process 1:"runner";process 3:"w";Queue._feed (multiprocessing/queues.py:244) 20\n')
        steps = cpusteps.py_steps(raw)
        self.assertEqual(steps["main"], {"pipe: receive batches": 30, "start-up: imports": 10})
        self.assertEqual(steps["workers"], {"copy each file out of shared memory (bytes)": 20, "pickle batches": 20})
        # the kernel's seconds shared out by the samples: 4 s of main, 2 s
        # of workers over 1,000 files
        rec = {"system": "noio", "status": "ok", "profile": {"py": raw},
               "epochs": [{"files": 1000, "cpu_by": {"main": 4.0, "workers": 2.0, "rank": 0.0, "other": 0.5}}]}
        got = cpusteps.breakdown(rec, "/nonexistent")
        self.assertAlmostEqual(got[("main", "pipe: receive batches")], 3000)
        self.assertAlmostEqual(got[("workers", "pickle batches")], 1000)
        self.assertAlmostEqual(got[("other", "mpirun and the rest")], 500)
        self.assertIn("pipe: receive batches", cpusteps.table([rec], "/nonexistent"))
        # on a cluster: the ranks' profiles, and every other kind whole
        rec = {"system": "brandrt-window", "chunk_files": 64, "status": "ok", "profile": {"go_ranks": ["/nonexistent"]},
               "epochs": [{"files": 1000, "cpu_by": {"main": 1.0, "workers": 0.5, "rank": 2.0, "other": 0.0,
                                                     "nas client": 0.25}}]}
        got = cpusteps.breakdown(rec, "/nonexistent")
        self.assertEqual(got, {("main", "all"): 1000, ("workers", "all"): 500, ("other", "all"): 0,
                               ("other", "NAS client (sshfs)"): 250})

    def test_verdict(self):
        a, b, c = (100, 1, 2, 0), (100, 1, 3, 0), (7, 4, 4, 5)
        want = runner.Prints([a, b, c]).sorted()
        self.assertEqual(runner.verdict(runner.Prints([c, a, b]), want, False), "ok")
        self.assertEqual(runner.verdict(runner.Prints([a, a, c]), want, False),
                         "files differ: 1 missing, 1 unexpected (1 repeats)")
        self.assertEqual(runner.verdict(runner.Prints([a, b]), want, False), "files differ: 1 missing, 0 unexpected (0 repeats)")
        # the same file twice in the dataset: delivered twice is right
        self.assertEqual(runner.verdict(runner.Prints([a, a]), runner.Prints([a, a]).sorted(), False), "ok")
        # sizes alone
        sizes = runner.Prints([5, 6, 6]).sorted()
        self.assertEqual(runner.verdict(runner.Prints([6, 5, 6]), sizes, True), "ok")
        self.assertEqual(runner.verdict(runner.Prints([6, 5, 5]), sizes, True), "sizes differ: 1 missing, 1 unexpected (1 repeats)")
        # a catalog is emptied once the expected prints are taken from it
        cat = {"files": [["x", 100, 0], ["y", 7, 5]], "prints": [list(a), list(c)]}
        self.assertEqual(runner.verdict(runner.Prints([c, a]), runner.expected(cat, False), False), "ok")
        self.assertEqual(cat, {})
        # merged from the nodes of a cluster
        total = runner.Prints()
        total.extend(runner.Prints([a]))
        total.extend(runner.Prints([b, c]))
        self.assertEqual(runner.verdict(total, want, False), "ok")

    def test_ratios_are_per_round(self):
        def rec(system, rnd, secs):
            ep = {"files": 100, "bytes": 1000, "seconds": secs, "read_bytes": 2000, "net_bytes": 0, "cpu_s": 1,
                  "check": "ok"}
            return {"system": system, "round": rnd, "status": "ok", "epochs": [ep, ep], "storage": "local",
                    "memory": {"peak_bytes": 1}}

        # brandrt is twice as fast as random in round 1, level in round 2,
        # and random's own speed changes between rounds (a noisy disk).
        rows = report.rows([rec("random", 1, 1.0), rec("brandrt", 1, 0.5), rec("random", 2, 4.0),
                            rec("brandrt", 2, 4.0)])
        b = [r for r in rows if r["label"] == "brandrt"][0]
        self.assertAlmostEqual(b["e1"]["x_random"], 1.5)
        self.assertAlmostEqual(b["steady"]["amp"], 2.0)
        self.assertAlmostEqual(b["steady"]["cpu_k"], 10.0)

    def test_node_split(self):
        # a node's kinds, and its NAS client's CPU from its own cgroup
        a = ((10**9, {1: ("main", 1.0), 2: ("rank", 2.0)}), 5 * 10**9)
        b = ((5 * 10**9, {1: ("main", 2.0), 2: ("rank", 3.5)}), 7 * 10**9)
        self.assertEqual(runner.NodeSplit.between(a, b),
                         {"main": 1.0, "workers": 0.0, "rank": 1.5, "other": 1.5, "nas client": 2.0})

    def test_machine_busy(self):
        # the share of the cores busy, weighted by each epoch's time
        def rec(system, busy):
            eps = [{"files": 100, "bytes": 1000, "seconds": s, "read_bytes": 0, "net_bytes": 0, "cpu_s": 1,
                    "machine_busy": b, "check": "ok"} for s, b in zip((1.0, 1.0, 3.0), busy)]
            return {"system": system, "round": 1, "status": "ok", "epochs": eps, "storage": "local",
                    "memory": {"peak_bytes": 1}}

        lines = report.busy([rec("random", (0.5, 1.0, 0.6)), rec("brandrt", (1.0, 0.2, 1.0))])
        self.assertEqual(lines, ["machine's cores busy (epoch 1 / epochs 2 on): random 50 % / 70 %, "
                                 "brandrt 100 % / 80 %"])
        ticks = runner.machine_ticks()
        self.assertTrue(0 <= ticks[0] <= ticks[1], ticks)
        self.assertEqual(report.busy([dict(rec("random", (1, 1, 1)), epochs=[{"files": 1, "bytes": 1, "seconds": 1,
                                                                               "read_bytes": 0, "net_bytes": 0,
                                                                               "cpu_s": 1, "check": "ok"}] * 2)]), [])


if __name__ == "__main__":
    unittest.main()


class Footprint(unittest.TestCase):
    """footprint.py: serve's footprint and the kernel's peak in a cgroup of it."""

    def test_parse(self):
        import footprint
        line = ("brandrt: rank 0: the rank needs 193 MiB (202571776 bytes) of memory: 111 MiB for its own files in shared memory "
                "(--mem 100 MiB; 1.11× their bytes), 57 MiB for the process; its memory cgroup sets no limit")
        n, terms = footprint.parse_footprint(line)
        self.assertEqual(n, 202571776)
        self.assertEqual(footprint.budget_mib({"terms": terms}), 100)
        self.assertIsNone(footprint.parse_footprint("brandrt: rank 0 serves shards 0-3"))

    @unittest.skipIf(cgroups.available() != "", "cgroups: " + cgroups.available())
    def test_tiny_dataset(self):
        import footprint
        work = tempfile.mkdtemp(prefix="brandrt-footprint-test-")
        self.addCleanup(shutil.rmtree, work, True)
        inp = os.path.join(work, "input", "c")
        os.makedirs(inp)
        for i in range(300):
            with open(os.path.join(inp, "f%03d" % i), "wb") as f:
                f.write(os.urandom(500 + 7 * i))
        chunks = os.path.join(work, "chunks")
        subprocess.run([os.path.join(REPO, "bin", "brandrt"), "pack", "--input", os.path.dirname(inp), "--out", chunks,
                        "--chunk-files", "16"], check=True, capture_output=True)
        out = os.path.join(work, "out")
        footprint.main(["--chunks", chunks, "--mem", "50%,100%", "--epochs", "1", "--out", out])
        with open(os.path.join(out, "footprint.jsonl")) as f:
            recs = [json.loads(line) for line in f]
        self.assertEqual([r["mem"] for r in recs], ["50%", "100%"])
        for r in recs:
            self.assertEqual((r["exit"], r["once"], r["oom_kills"]), (0, 1, 0), r)
            self.assertLessEqual(r["peak_bytes"], r["footprint_bytes"], r)
            self.assertGreater(r["peak_bytes"], 0)
        self.assertGreater(os.path.getsize(os.path.join(out, "footprint.png")), 1000)
