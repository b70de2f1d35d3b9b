#!/usr/bin/env python3
"""Read one S3 object's first SIZE bytes into host memory with runai-model-streamer's streaming
engine (libstreamer: the C++ core under its SafetensorsStreamer, without torch), for benches/engine.
Concurrency from RUNAI_STREAMER_CONCURRENCY, endpoint and keys from AWS_* (path-style with
RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING=0), 8 MiB ranges.

  python benches/runai_read.py s3://BUCKET/KEY SIZE
Prints the seconds from the request to the last range (the streamer's start-up and teardown, which
include the AWS SDK's, are left out) and exits 0 when every range arrived, 1 with the streamer's
error otherwise."""

import sys
import time

import numpy as np
from runai_model_streamer.libstreamer import libstreamer as ls

CHUNK = 8 << 20


def main() -> int:
    path, size = sys.argv[1], int(sys.argv[2])
    buf = np.empty(size, dtype=np.uint8)
    base = buf.ctypes.data
    offsets = list(range(0, size, CHUNK))
    sizes = [min(CHUNK, size - o) for o in offsets]
    streamer = ls.runai_start()
    try:
        started = time.perf_counter()
        sub = ls.runai_request(streamer, [path], [len(offsets)], offsets, sizes, [base + o for o in offsets])
        left = len(offsets)
        while left:
            r = ls.runai_response(streamer, 120_000)
            if r is None:
                print("runai: the streamer finished early", file=sys.stderr)
                return 1
            code, got_sub, _, index, _ = r
            if code != 0 or got_sub != sub:
                print(f"runai: range {index}: {ls.runai_response_str(code)}", file=sys.stderr)
                return 1
            left -= 1
        print(f"{time.perf_counter() - started:.6f}")
    finally:
        ls.runai_end(streamer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
