"""Tables of the residency sweeps (keep.jsonl, mem.jsonl): epoch 3 of
brandrt simulate --json, by --keep and by memory."""
import json
import sys


def rows(path):
    with open(path) as f:
        return [r for r in map(json.loads, f) if r["epoch"] == 3]


def line(r, first):
    return (f"| {first} | {r['read_amplification']:.3f} | {r['distinct_chunks_per_batch']:.1f} "
            f"({r['distinct_chunks_per_batch_shuffle']:.1f}) | {100 * r['pairs_again']:.3f} % "
            f"({100 * r['pairs_again_shuffle']:.3f} %) | {r['distinct_first_1pct']:.1f} | {r['distinct_last_1pct']:.1f} "
            f"({r['distinct_last_1pct_shuffle']:.1f}) |")


head = ("| storage bytes / dataset | distinct chunks per batch (shuffle) | pairs again (shuffle) "
        "| first 1 % | last 1 % (shuffle) |\n|---|---|---|---|---|---|")
print("| --keep " + head)
for r in rows(sys.argv[1]):
    print(line(r, r["keep"]))
print()
print("| memory, --keep " + head)
for r in rows(sys.argv[2]):
    print(line(r, f"{100 * r['mem_fraction']:g} %, {r['keep']}"))
