#!/usr/bin/env python3
"""Summarise benches/gateway-ceph: per (op, size, streams) the median over rounds of MB/s and p50
latency of RDMA through the gateway and of plain HTTP straight to RGW, and their ratio.
Usage: gateway-ceph-summary.py DIR (the JSON files round-N.json of one boot)."""
import json
import statistics
import sys
from pathlib import Path


def main(folder):
    files = sorted(Path(folder).glob("round-*.json"))
    rounds = [json.loads(f.read_text()) for f in files if f.stat().st_size > 0]
    if not rounds:
        sys.exit(f"no completed round in {folder} (a failed bench prints no JSON: see its error above)")
    cells = {}
    for r in rounds:
        for c in r["cells"]:
            cells.setdefault((c["op"], c["size"], c["concurrency"]), []).append(c)
    print(f"gateway {rounds[0]['endpoint']} (RDMA) vs RGW {rounds[0].get('http_endpoint', '?')} (HTTP), "
          f"{len(rounds)} round(s), {rounds[0]['iterations']} operations per thread and cell")
    print(f"{'op':4} {'size':>9} {'strm':>4} | {'RDMA MB/s':>9} {'HTTP MB/s':>9} | "
          f"{'RDMA p50':>9} {'HTTP p50':>9} | {'RDMA/HTTP':>9} | failed")
    med = statistics.median
    for k in sorted(cells, key=lambda k: (k[0], k[1], k[2])):
        cs = cells[k]
        rdma, http = med(c["rdma"]["mb_per_s"] for c in cs), med(c["http"]["mb_per_s"] for c in cs)
        rp, hp = med(c["rdma"]["p50_ms"] for c in cs), med(c["http"]["p50_ms"] for c in cs)
        failed = sum(c["rdma"]["errors"] + c["http"]["errors"] for c in cs)
        print(f"{k[0]:4} {k[1]:>9} {k[2]:>4} | {rdma:9.1f} {http:9.1f} | {rp:7.1f}ms {hp:7.1f}ms | "
              f"{rdma / http if http else 0:9.2f} | {failed}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
