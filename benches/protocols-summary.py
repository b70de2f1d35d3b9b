#!/usr/bin/env python3
"""Summarise benches/protocols: per (op, size, streams) the median over rounds of each column's
MB/s and p50 latency (v1 RDMA, v2 RDMA, plain HTTP from both runs), and the ratios v2/v1 and
RDMA/HTTP. Usage: protocols-summary.py DIR (the JSON files v1-N.json, v2-N.json of one boot)."""
import json
import statistics
import sys
from pathlib import Path


def cells(path):
    report = json.loads(path.read_text())
    for c in report["cells"]:
        yield (c["op"], c["size"], c["concurrency"]), c


def main(folder):
    runs = {"v1": [], "v2": []}
    for f in sorted(Path(folder).glob("v*-*.json")):
        runs[f.name.split("-")[0]].append(dict(cells(f)))
    if not runs["v1"] or not runs["v2"]:
        sys.exit("no v1 or no v2 rounds in " + folder)
    keys = sorted(runs["v1"][0], key=lambda k: (k[0], k[1], k[2]))
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    print(f"{'op':4} {'size':>9} {'strm':>4} | {'v1 MB/s':>8} {'v2 MB/s':>8} {'HTTP MB/s':>9} | "
          f"{'v1 p50':>8} {'v2 p50':>8} {'HTTP p50':>8} | {'v2/v1':>6} {'v1/HTTP':>7} {'v2/HTTP':>7} | failed")
    for k in keys:
        v1 = [r[k]["rdma"] for r in runs["v1"] if k in r]
        v2 = [r[k]["rdma"] for r in runs["v2"] if k in r]
        http = [r[k]["http"] for r in runs["v1"] + runs["v2"] if k in r]
        m = {n: med([s["mb_per_s"] for s in xs]) for n, xs in (("v1", v1), ("v2", v2), ("http", http))}
        p = {n: med([s["p50_ms"] for s in xs]) for n, xs in (("v1", v1), ("v2", v2), ("http", http))}
        failed = sum(s["errors"] for s in v1 + v2 + http)
        print(f"{k[0]:4} {k[1]:>9} {k[2]:>4} | {m['v1']:8.1f} {m['v2']:8.1f} {m['http']:9.1f} | "
              f"{p['v1']:7.2f}ms {p['v2']:7.2f}ms {p['http']:7.2f}ms | {m['v2'] / m['v1']:6.2f} "
              f"{m['v1'] / m['http']:7.2f} {m['v2'] / m['http']:7.2f} | {failed}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
