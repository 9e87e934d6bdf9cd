"""The runs of this record, one line per system and run: files/s (epoch 1 /
epochs 2 on) and CPU µs per file by process from epoch 2, from each run's
log; and brandrt over LitData where both ran in one run.

    python3 table.py LOG...
"""
import re
import sys


def parse(path):
    text = open(path).read()
    rows, cpu = {}, {}
    for m in re.finditer(r"(?m)^(litdata|random|brandrt-window K=64)\s+([\d,]+)\s+\d+\s+[\d.]+×\s+[\d.]+\s+\S+\s+([\d,]+)", text):
        rows[m.group(1)] = (int(m.group(2).replace(",", "")), int(m.group(3).replace(",", "")))
    block = text.split("CPU µs per file by process", 1)[-1]
    for m in re.finditer(r"(?m)^(litdata|random|brandrt-window K=64)\s+(\d+) / (\d+)\s+(\d+) / (\d+)\s+(\d+) / (\d+)", block):
        cpu[m.group(1)] = (int(m.group(3)), int(m.group(5)), int(m.group(7)))
    return rows, cpu


if __name__ == "__main__":
    print("%-22s %-9s %8s %9s   %s" % ("run", "system", "e1 f/s", "e2+ f/s", "µs/file e2+: main workers rank   ÷ LitData e1 / e2+"))
    for path in sys.argv[1:]:
        name = path.rsplit("/", 1)[-1].replace(".log", "")
        rows, cpu = parse(path)
        for sys_, (e1, e2) in rows.items():
            c = cpu.get(sys_, ("-", "-", "-"))
            ratio = ""
            if sys_.startswith("brandrt") and "litdata" in rows:
                l1, l2 = rows["litdata"]
                ratio = "%.2f× / %.2f×" % (e1 / l1, e2 / l2)
            print("%-22s %-9s %8s %9s   %4s %7s %4s   %s" % (name, sys_.split()[0].replace("brandrt-window", "brandrt"), "{:,}".format(e1), "{:,}".format(e2), *c, ratio))
