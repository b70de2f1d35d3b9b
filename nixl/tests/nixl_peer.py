#!/usr/bin/env python3
"""One NIXL process that writes or reads KV blocks as objects through one backend, HIPOBJ (this
repository's plugin, NIXL_PLUGIN_DIR set here) or OBJ (NIXL's own, from the wheel), and prints one
JSON line: blocks, bytes, seconds spent in the NIXL calls of the batches (the objects' OBJ
registrations, initialize_xfer, transfer, polling to DONE, release; the data pattern is made and
checked outside that time), blocks whose bytes differ, and the HIPOBJ counters.

The tests use it for NIXL's OBJ plugin (a process sees HIPOBJ or the wheel's plugins, never both:
nixl_env.py) and benches/nixl for both plugins alike.

  nixl_peer.py --backend OBJ|HIPOBJ --endpoint URL --bucket B --access A [--nic DEV]
               [--size BYTES] [--batch N] write|read PREFIX FIRST COUNT
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import nixl_env  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--backend", choices=["OBJ", "HIPOBJ"], required=True)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--bucket", required=True)
    p.add_argument("--access", required=True)
    p.add_argument("--nic", default="")
    p.add_argument("--transport", default="rdma")
    p.add_argument("--size", type=int, default=256 * 1024)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("op", choices=["write", "read"])
    p.add_argument("prefix")
    p.add_argument("first", type=int)
    p.add_argument("count", type=int)
    a = p.parse_args()
    # The secret key comes on standard input, one line: a command line is visible to every user.
    a.secret = sys.stdin.readline().strip()
    if not a.secret:
        p.error("no secret key on standard input")

    if a.backend == "HIPOBJ":
        os.environ["NIXL_PLUGIN_DIR"] = str(nixl_env.PLUGIN_DIR)
        params = nixl_env.hipobj_params(a.endpoint, a.bucket, a.access, a.secret, a.nic, transport=a.transport)
    else:
        os.environ.pop("NIXL_PLUGIN_DIR", None)
        params = nixl_env.obj_params(a.endpoint, a.bucket, a.access, a.secret)
    agent = nixl_env.make_agent(f"peer-{a.backend}-{os.getpid()}", a.backend, params)
    before = nixl_env.stats() if a.backend == "HIPOBJ" else None
    store = nixl_env.KvStore(agent, a.backend, a.batch, a.size, a.batch)
    seconds, differ = 0.0, 0
    for start in range(a.first, a.first + a.count, a.batch):
        ids = list(range(start, min(start + a.batch, a.first + a.count)))
        keys = [f"{a.prefix}{i}" for i in ids]
        if a.op == "write":
            for n, i in enumerate(ids):
                store.slot(n)[:] = nixl_env.block(i, a.size)
        else:
            store.pool[:] = 0
        t0 = time.perf_counter()
        store.move("WRITE" if a.op == "write" else "READ", keys)
        seconds += time.perf_counter() - t0
        if a.op == "read":
            differ += sum(not (store.slot(n) == nixl_env.block(i, a.size)).all() for n, i in enumerate(ids))
    store.close()
    out = {"backend": a.backend, "op": a.op, "blocks": a.count, "bytes": a.count * a.size,
           "seconds": seconds, "differ": differ}
    if before is not None:
        out["stats"] = nixl_env.delta(nixl_env.stats(), before)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
