"""rounds.png: the 8 KB runs of this record, round by round: LitData and
brandrt with the labels inline (one run), brandrt as before (the next),
epoch 1 and epochs 2 on.  python3 plot.py (in this directory)"""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from table import parse  # noqa: E402

rounds = [1, 2, 3, 4]
series = [("LitData", "new", "litdata", "tab:blue"), ("brandrt, labels inline", "new", "brandrt-window K=64", "tab:red"),
          ("brandrt before", "old", "brandrt-window K=64", "tab:gray")]
fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
for ax, e, title in ((axes[0], 0, "epoch 1 (cold)"), (axes[1], 1, "epochs 2 on")):
    for i, (label, run, system, color) in enumerate(series):
        ys = [parse("8KB-%s-r%d.log" % (run, r))[0][system][e] for r in rounds]
        xs = [r + (i - 1) * 0.27 for r in rounds]
        ax.bar(xs, ys, width=0.27, color=color, label=label)
    ax.set_xticks(rounds, ["round %d" % r for r in rounds])
    ax.set_ylabel("files per second")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
handles, labels = axes[0].get_legend_handles_labels()
fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=9)
fig.suptitle("400,000 files of 8 KB, one node, NAS, a quarter in memory, 4 DataLoader workers, batch 64", fontsize=10)
fig.tight_layout(rect=(0, 0.07, 1, 1))
fig.savefig("rounds.png", dpi=100)
