#!/usr/bin/env python3
"""The summary of a benches/cpu-per-gib log, computed from its lines alone: per path and
direction the rate, our CPU seconds per GiB (client, server, our TCP work on other tasks) and the
NIC's that were left out, the profile against the processes' own counters, and the figure:
memcpy-equivalents (our CPU-s per GiB x one thread's memcpy GiB/s of the same boot) with the
cores it predicts at 25, 50 and 100 GB/s (bench_summary.cpu_summary; the classification rule is
bench_summary.cpu_class).

  python3 benches/cpu-per-gib-summary.py docs/perf/cpu-per-gib-DATE.log [HOST_MEMCPY_GB_S]
      (HOST_MEMCPY_GB_S: one core's memcpy on the host the prediction is for, default 10)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_summary as s  # noqa: E402

if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: benches/cpu-per-gib-summary.py LOG [HOST_MEMCPY_GB_S]")
    memcpy = float(sys.argv[2]) if len(sys.argv) == 3 else 10.0
    for line in s.cpu_summary(Path(sys.argv[1]).read_text(errors="replace"), memcpy):
        print(line)
