#!/usr/bin/env python3
"""Summarise benches/protocols: per (op, size, streams) the median over rounds of each column's
MB/s and p50 latency (v1 RDMA, v2 RDMA, plain HTTP from both runs), and the ratios v2/v1 and
RDMA/HTTP; then (issue 39) `--transport auto` against the faster of forced RDMA and forced HTTP
of the same round and protocol: the median over the rounds of auto MB/s / max(RDMA, HTTP) MB/s,
its range and count, and the bytes auto moved over each path. Usage: protocols-summary.py DIR
(the JSON files v1-N.json, v2-N.json of one boot)."""
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
    auto_table(runs)


def auto_table(runs):
    """auto / the faster forced path, per cell and protocol, over the rounds."""
    keys = sorted(runs["v1"][0], key=lambda k: (k[0], k[1], k[2]))
    print(f"\n{'op':4} {'size':>9} {'strm':>4} | {'v1 auto/faster (range, n)':>28} | {'v2 auto/faster (range, n)':>28}")
    worst = {}
    for k in keys:
        row = []
        for proto in ("v1", "v2"):
            ratios = [r[k]["auto"]["mb_per_s"] / max(r[k]["rdma"]["mb_per_s"], r[k]["http"]["mb_per_s"])
                      for r in runs[proto] if k in r and r[k].get("auto")]
            if not ratios:
                row.append(f"{'-':>28}")
                continue
            m = statistics.median(ratios)
            worst[proto] = min(worst.get(proto, m), m)
            row.append(f"{m:>10.2f} ({min(ratios):.2f}-{max(ratios):.2f}, n={len(ratios)})".rjust(28))
        print(f"{k[0]:4} {k[1]:>9} {k[2]:>4} | {row[0]} | {row[1]}")
    for proto, m in sorted(worst.items()):
        print(f"{proto}: lowest cell median auto/faster {m:.2f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
