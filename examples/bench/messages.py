"""What a remote file cost in messages, from loaders.py's results.

For every brandrt run in the given results.jsonl files: per epoch, the
files that came from other ranks, the requests the ranks sent for them
(on demand, or, in a build before the window policy pushed, one per
file fetched ahead of its position), the window policy's grants, the files pushed (or fetched)
ahead, and requests and grants per remote file, from the statistics the
ranks printed themselves (serve --stats-json).

    .venv/bin/python examples/bench/messages.py RESULTS.jsonl [...]
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="loaders.py results.jsonl files")
    args = ap.parse_args()
    print("%-46s %5s %12s %9s %8s %11s %12s %13s" % ("run", "epoch", "remote files", "requests", "grants",
                                                       "ahead", "req per file", "grants per file"))
    for name in args.results:
        with open(name) as f:
            for line in f:
                rec = json.loads(line)
                if "own" not in rec or not rec.get("system", "").startswith("brandrt"):
                    continue
                for s in rec["own"]["stats"]:
                    remote = s["remote_files"]
                    ahead = s.get("prefetched", s.get("prefetch_pushes", 0))
                    requests = s["remote_requests"]
                    if "grants" not in s:
                        # a build before the window policy pushed (no grants):
                        # each file fetched ahead was requested too
                        requests += ahead
                    grants = s.get("grants", 0)
                    print("%-46s %5d %12s %9s %8s %11s %12.4f %13.4f" % (
                        name[-46:], s["epoch"], "{:,}".format(remote), "{:,}".format(requests), "{:,}".format(grants),
                        "{:,}".format(ahead), requests / max(remote, 1), grants / max(remote, 1)))


if __name__ == "__main__":
    main()
