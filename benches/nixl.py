#!/usr/bin/env python3
"""Issue 51's benchmark, in the guest of one lane boot (benches/nixl runs it): KV blocks written
and read back as objects through NIXL's Python agent, by this repository's HIPOBJ plugin (RDMA,
every GET checked) and by NIXL's own OBJ plugin from the wheel (aws-sdk-cpp over HTTP), on the
same hipobj-server, the columns (OBJ, then HIPOBJ under each transport of
HIPOBJ_NIXL_TRANSPORTS, default "auto rdma") alternating round by round (each round starts with
the next column), 256 KiB and 4 MiB blocks in batches of 64.

Each transfer set is one nixl_peer.py process (a process sees either HIPOBJ or the wheel's
plugins: nixl/tests/nixl_env.py) that writes, or reads and compares, COUNT blocks; its time is
that of the NIXL calls of each batch (registering its objects' OBJ segments, initialize_xfer,
transfer, check_xfer_state until DONE, release_xfer_handle), not the process start, the backend's
creation, the DRAM pool's registration or the data pattern.

  python benches/nixl.py ROUNDS COUNT_256K COUNT_4M > report.json

Prints one JSON object: {"transfers": [{"what", "method", "round", "seconds", "bytes", "blocks"}],
"context": {...}}; benches/bench_summary.py nixl prints the figures (ratios of medians, with
spread and count)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python/tests"))
sys.path.insert(0, str(REPO / "nixl/tests"))

from hipobj_server import IDENTITIES, Server, device_address, device_pair  # noqa: E402
from nixl_env import peer  # noqa: E402

KIB = 1024
BATCH = 64


def methods() -> list:
    """(label, backend, transport) of each column: NIXL's OBJ plugin, then HIPOBJ under each
    transport of HIPOBJ_NIXL_TRANSPORTS (default "auto rdma")."""
    transports = os.environ.get("HIPOBJ_NIXL_TRANSPORTS", "auto rdma").split()
    return [("OBJ", "OBJ", "env")] + [(f"HIPOBJ-{t}", "HIPOBJ", t) for t in transports]


def main() -> int:
    rounds, count_small, count_large = (int(a) for a in sys.argv[1:4])
    columns = methods()
    client_dev, server_dev = device_pair()
    server = Server(server_dev, device_address(server_dev))
    access, secret = IDENTITIES[0]
    bucket = "bench-nixl"
    server.client().create_bucket(Bucket=bucket)
    log: list = []
    try:
        for size, count in ((256 * KIB, count_small), (4096 * KIB, count_large)):
            for rnd in range(rounds):
                # each round starts with the next column: every column goes first once a cycle
                order = columns[rnd % len(columns):] + columns[:rnd % len(columns)]
                for method, backend, transport in order:
                    common = ["--backend", backend, "--endpoint", server.endpoint, "--bucket", bucket,
                              "--access", access, "--nic", client_dev,
                              "--transport", transport, "--size", str(size), "--batch", str(BATCH)]
                    prefix = f"{method}-{size}-"  # each round overwrites: the store stays bounded
                    for op in ("write", "read"):
                        got = peer(common + [op, prefix, "0", str(count)], secret, timeout=1800)
                        if got["differ"]:
                            raise SystemExit(f"{method} {op} {size}: {got['differ']} blocks differ")
                        log.append({"what": f"{op}-{size // KIB}k", "method": method, "round": rnd,
                                    "seconds": got["seconds"], "bytes": got["bytes"], "blocks": got["blocks"],
                                    "stats": got.get("stats")})
                        print(f"nixl bench: {method} {op} {count} x {size // KIB} KiB: {got['seconds']:.2f} s",
                              file=sys.stderr)
    finally:
        server.stop()
    context = {"rounds": rounds, "batch": BATCH, "counts": {"256k": count_small, "4096k": count_large},
               "devices": [client_dev, server_dev], "columns": [c[0] for c in columns],
               "nixl": "nixl-cu12 1.4.0"}
    print(json.dumps({"transfers": log, "context": context}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
