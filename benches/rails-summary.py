#!/usr/bin/env python3
"""The summary of a benches/rails log: per kind the median MB/s over rounds (with min-max and n),
and the ratios the issue asks for, computed from every row of the log.

  python3 benches/rails-summary.py docs/perf/rails-DATE.log
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_summary as s  # noqa: E402

if __name__ == "__main__":
    for line in s.rails_summary(Path(sys.argv[1]).read_text()):
        print(line)
