#!/usr/bin/env python3
"""64 MiB get_object from Python (hipobj + boto3) through hipobj-server over RDMA: median MB/s.

Usage (in the lane, see scripts/bench-python): python benches/python_get.py [SIZE_BYTES] [ROUNDS]
Prints "RESULT python SIZE MiB: GET X MB/s, median of N" (bytes verified each round). The ratio to
the Rust/C core's benches/rdma_throughput.rs in the same boot is computed by scripts/bench-python.
"""

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "tests"))
import hipobj  # noqa: E402
from hipobj_server import Server, device_address, device_pair  # noqa: E402


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    size = int(args[0]) if args else 64 << 20
    rounds = int(args[1]) if len(args) > 1 else 5
    client_dev, server_dev = device_pair()
    server = Server(server_dev, device_address(server_dev))
    try:
        client = server.client()
        client.create_bucket(Bucket="bench")
        with hipobj.Session(nic=client_dev) as session:
            src = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8)
            dst = np.zeros_like(src)
            with session.register(src) as s, session.register(dst) as d:
                session.put_object(client, "bench", "warm-up", from_=s, size=4096)  # pairs the QP
                session.put_object(client, "bench", "object", from_=s)
                mbs = []
                for r in range(rounds):
                    dst[:] = 0
                    t = time.perf_counter()
                    got = session.get_object(client, "bench", "object", into=d)
                    mbs.append(size / (time.perf_counter() - t) / 1e6)
                    assert got.via == "rdma" and got.size == size
                    assert np.array_equal(src, dst), "GET returned different bytes"
                    print(f"python: round {r}: GET {mbs[-1]:.1f} MB/s, {size} bytes verified", flush=True)
        print(f"RESULT python {size >> 20} MiB: GET {statistics.median(mbs):.1f} MB/s, median of {rounds}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
