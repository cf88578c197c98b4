#!/usr/bin/env python3
"""Per-kernel time and DRAM traffic from an `ncu --csv` run with the metrics
gpu__time_duration.sum (and optionally dram__bytes_read.sum /
dram__bytes_write.sum): one line per kernel name with calls, total time,
share, and achieved GB/s, so each kernel is measured against the limit.
usage: python3 bench/ncu_summary.py NCU.csv"""
import csv
import re
import sys
from collections import defaultdict


def main():
    rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
    head, body = rows[0], rows[1:]
    ki, mi, vi, ui = (head.index(c) for c in ("Kernel Name", "Metric Name", "Metric Value", "Metric Unit"))
    idi = head.index("ID")
    scale = {"ns": 1e-9, "us": 1e-6, "usecond": 1e-6, "nsecond": 1e-9, "msecond": 1e-3, "ms": 1e-3,
             "byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}
    per = defaultdict(lambda: defaultdict(float))
    ids = defaultdict(set)
    for r in body:
        name = re.sub(r"\(.*", "", r[ki])[:60]
        v = float(r[vi].replace(",", "")) * scale.get(r[ui], 1)
        per[name][r[mi]] += v
        ids[name].add(r[idi])
    total = sum(m.get("gpu__time_duration.sum", 0) for m in per.values())
    print(f"{'kernel':60} {'calls':>5} {'ms':>8} {'share':>6} {'GB/s':>7}")
    for name, m in sorted(per.items(), key=lambda kv: -kv[1].get("gpu__time_duration.sum", 0)):
        t = m.get("gpu__time_duration.sum", 0)
        b = m.get("dram__bytes_read.sum", 0) + m.get("dram__bytes_write.sum", 0)
        bw = f"{b / t / 1e9:7.0f}" if b and t else "      -"
        print(f"{name:60} {len(ids[name]):5d} {t * 1e3:8.3f} {t / total:6.1%} {bw}")
    print(f"{'total':60} {'':5} {total * 1e3:8.3f}")


if __name__ == "__main__":
    main()
