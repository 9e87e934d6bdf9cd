"""residency.png: what brandrt simulate predicts as memory grows, with
and without partial residency (mem.jsonl, epoch 3)."""
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

with open("mem.jsonl") as f:
    rows = [r for r in map(json.loads, f) if r["epoch"] == 3]
fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
for keep, style in ((0, "o--"), (0.95, "s-")):
    rs = [r for r in rows if r["keep"] == keep]
    x = [100 * r["mem_fraction"] for r in rs]
    label = "--keep 0 (nothing kept)" if keep == 0 else f"--keep {keep} (the default)"
    a.plot(x, [r["read_amplification"] for r in rs], style, label=label)
    b.plot(x, [r["distinct_chunks_per_batch"] for r in rs], style, label=label)
b.plot(x, [r["distinct_chunks_per_batch_shuffle"] for r in rs], ":", color="gray", label="a shuffle")
a.set(xlabel="memory per rank, % of its shard", ylabel="bytes read from storage per epoch / dataset",
      title="Storage read per epoch (epoch 3)", ylim=(0, 1.05))
b.set(xlabel="memory per rank, % of its shard", ylabel="distinct chunks per batch of 256",
      title="How random the order is (epoch 3)")
for ax in (a, b):
    ax.grid(alpha=0.3)
    ax.legend()
fig.suptitle("brandrt simulate --files 60000 --ranks 3 --chunk-files 64 (110 KB files)", fontsize=10)
fig.tight_layout()
fig.savefig("residency.png", dpi=100)
