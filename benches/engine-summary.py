#!/usr/bin/env python3
"""The table of benches/engine's JSON (docs/perf/engine-*.json), as docs/perf.md carries it."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_summary import engine_summary  # noqa: E402


def fmt(value, decimals: int = 2) -> str:
    """A figure, or '-' where an older run did not measure it."""
    return "-" if value is None else f"{value:.{decimals}f}"


def main() -> None:
    r = json.load(open(sys.argv[1]))
    # The figures as README and docs/perf.md publish them (benches/figures --check recomputes them).
    for line in engine_summary(r):
        print(line)
    print(f"size {r['size_bytes'] >> 20} MiB; MB/s (ratio to perftest -q N of the same boot)")
    print("| streams | cp GET | cp GET past its setup | cp setup (s) | cp PUT | safetensors.load | its registration (s) | ib_write_bw | ib_write_bw beside copies (copies MB/s) | ib_read_bw | aws s3 cp GET (HTTP) | runai streamer (HTTP) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    before = []
    for row in r["rows"]:
        past = row.get("cp_get_past_setup_vs_ib_write_bw")
        setup = row.get("cp_setup_s")
        print(f"| {row['streams']} | {row['cp_get_MBps']:.1f} ({row['cp_get_vs_ib_write_bw']:.2f}) "
              f"| {fmt(past)} | {fmt(setup)} "
              f"| {row['cp_put_MBps']:.1f} ({row['cp_put_vs_ib_read_bw']:.2f}) "
              f"| {row['safetensors_load_MBps']:.1f} ({row['safetensors_load_vs_ib_write_bw']:.2f}) "
              f"| {fmt(row.get('register_s'))} "
              f"| {row['ib_write_bw_MBps']:.1f} "
              f"| {fmt(row.get('ib_write_bw_beside_copies_MBps'), 1)} ({fmt(row.get('copies_beside_ib_write_bw_MBps'), 0)}) "
              f"| {row['ib_read_bw_MBps']:.1f} "
              f"| {fmt(row.get('awscli_get_MBps'), 1)} | {fmt(row.get('runai_get_MBps'), 1)} |")
        if "cp_get_before_MBps" in row:
            before.append(row)
    if before:
        print()
        print("cp beside an earlier build (HIPOBJ_BENCH_CLI_BEFORE), MB/s (ratio to perftest)")
        print("| streams | cp GET | earlier GET | cp PUT | earlier PUT |")
        print("|---|---|---|---|---|")
        for row in before:
            w, rd = row["ib_write_bw_MBps"], row["ib_read_bw_MBps"]
            print(f"| {row['streams']} | {row['cp_get_MBps']:.1f} ({row['cp_get_MBps'] / w:.2f}) "
                  f"| {row['cp_get_before_MBps']:.1f} ({row['cp_get_before_MBps'] / w:.2f}) "
                  f"| {row['cp_put_MBps']:.1f} ({row['cp_put_MBps'] / rd:.2f}) "
                  f"| {row['cp_put_before_MBps']:.1f} ({row['cp_put_before_MBps'] / rd:.2f}) |")
    cells = [(row["streams"], name, row[f"cpu_{name}"]) for row in r["rows"]
             for name in ("cp_get", "ib_write_bw", "cp_put", "ib_read_bw") if f"cpu_{name}" in row]
    if cells:
        print()
        print("Where the guest's CPUs went (busy: share of all CPUs; the rest in CPU seconds)")
        print("| streams | run | busy | server | command | softirq | system | user |")
        print("|---|---|---|---|---|---|---|---|")
        for streams, name, c in cells:
            print(f"| {streams} | {name} | {fmt(c['busy'])} | {c['server_s']} | {c['command_s']} "
                  f"| {c['softirq_s']} | {c['system_s']} | {c['user_s']} |")


if __name__ == "__main__":
    main()
