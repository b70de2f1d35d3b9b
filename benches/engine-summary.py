#!/usr/bin/env python3
"""The table of benches/engine's JSON (docs/perf/engine-*.json), as docs/perf.md carries it."""

import json
import sys


def main() -> None:
    r = json.load(open(sys.argv[1]))
    print(f"size {r['size_bytes'] >> 20} MiB; MB/s (ratio to perftest -q N of the same boot)")
    print("| streams | cp GET | cp PUT | safetensors.load | ib_write_bw | ib_read_bw | aws s3 cp GET (HTTP) | runai streamer (HTTP) |")
    print("|---|---|---|---|---|---|---|---|")
    for row in r["rows"]:
        print(f"| {row['streams']} | {row['cp_get_MBps']:.1f} ({row['cp_get_vs_ib_write_bw']:.2f}) "
              f"| {row['cp_put_MBps']:.1f} ({row['cp_put_vs_ib_read_bw']:.2f}) "
              f"| {row['safetensors_load_MBps']:.1f} ({row['safetensors_load_vs_ib_write_bw']:.2f}) "
              f"| {row['ib_write_bw_MBps']:.1f} | {row['ib_read_bw_MBps']:.1f} "
              f"| {row['awscli_get_MBps']:.1f} | {row['runai_get_MBps']:.1f} |")


if __name__ == "__main__":
    main()
