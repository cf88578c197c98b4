#!/usr/bin/env python3
"""Per-kernel time and DRAM traffic from an `ncu --csv` run with the metrics
gpu__time_duration.sum (and optionally dram__bytes_read.sum /
dram__bytes_write.sum): one line per kernel name with calls, total time,
share, and achieved GB/s, so each kernel is measured against the limit.
With --decode-roles, decode GEMV launches (k_gemv_pf) are told apart by the
kernel profiled before them: after the gate/up pair it is the down
projection, after attention the o projection, one reading over 400 MB is
the lm head, any other the q/k/v projection.
usage: python3 bench/ncu_summary.py [--decode-roles] NCU.csv"""
import csv
import re
import sys
from collections import defaultdict

SCALE = {"ns": 1e-9, "us": 1e-6, "usecond": 1e-6, "nsecond": 1e-9, "msecond": 1e-3, "ms": 1e-3,
         "byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def launches(path):
    """[(name, {metric: value})] in launch order"""
    rows = [r for r in csv.reader(l for l in open(path) if l.startswith('"'))]
    head, body = rows[0], rows[1:]
    ki, mi, vi, ui = (head.index(c) for c in ("Kernel Name", "Metric Name", "Metric Value", "Metric Unit"))
    idi = head.index("ID")
    order, per = [], {}
    for r in body:
        if r[idi] not in per:
            per[r[idi]] = (re.sub(r"\(.*", "", r[ki])[:60], {})
            order.append(r[idi])
        per[r[idi]][1][r[mi]] = float(r[vi].replace(",", "")) * SCALE.get(r[ui], 1)
    return [per[i] for i in order]


def role(name, metrics, prev):
    if not name.startswith("void k_gemv_pf") or name.endswith(", 1>"):
        return name
    if metrics.get("dram__bytes_read.sum", 0) > 400e6:
        return name + " lm head"
    if prev and prev.startswith("void k_gemv_pf") and prev.endswith(", 1>"):
        return name + " down"
    if prev and prev.startswith(("void k_attn", "k_attn")):
        return name + " o"
    return name + " q/k/v"


def main():
    args = [a for a in sys.argv[1:] if a != "--decode-roles"]
    roles = len(args) < len(sys.argv) - 1
    per = defaultdict(lambda: defaultdict(float))
    calls = defaultdict(int)
    prev = None
    for name, m in launches(args[0]):
        key = role(name, m, prev) if roles else name
        prev = name
        calls[key] += 1
        for k, v in m.items():
            per[key][k] += v
    total = sum(m.get("gpu__time_duration.sum", 0) for m in per.values())
    print(f"{'kernel':68} {'calls':>5} {'ms':>8} {'share':>6} {'GB/s':>7}")
    for name, m in sorted(per.items(), key=lambda kv: -kv[1].get("gpu__time_duration.sum", 0)):
        t = m.get("gpu__time_duration.sum", 0)
        b = m.get("dram__bytes_read.sum", 0) + m.get("dram__bytes_write.sum", 0)
        bw = f"{b / t / 1e9:7.0f}" if b and t else "      -"
        print(f"{name:68} {calls[name]:5d} {t * 1e3:8.3f} {t / total:6.1%} {bw}")
    print(f"{'total':68} {'':5} {total * 1e3:8.3f}")


if __name__ == "__main__":
    main()
