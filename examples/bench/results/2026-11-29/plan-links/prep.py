import os, sys
sys.path.insert(0, "/work/main/examples/bench")
import prepare
log = lambda s: print(s, flush=True)
W = "/var/tmp/brandrt-bench/plangrid"
for label, files, size in (("8KB", 60000, 8000), ("110KB", 12000, 110000), ("1MB", 1300, 1000000)):
    work = os.path.join(W, "size-" + label)
    os.makedirs(work, exist_ok=True)
    inp = prepare.generate(work, files, size, 100, log)
    cat = prepare.catalog(work, inp, log)
    print(label, cat["bytes"], flush=True)
    for r in (1, 2, 3, 4):
        prepare.chunks(work, cat, 64, "/work/main/bin/brandrt", log, r)
