"""The Python package's client of the fault lane: one long-lived process (Python and boto3 take
tens of seconds to start in the TCG lane, so they start once, not per operation) that reads one
operation per line on stdin and answers one line on stdout:

    put BUCKET KEY FILE          -> "ok" | "err MESSAGE"
    get BUCKET KEY SIZE FILE     -> "ok" | "err MESSAGE"
    stats                        -> "stats JSON": Session.rails() (docs/rails.md), [] without

With HIPOBJ_NICS in its environment (the lane's two rails) the Session spreads its transfers over
HIPOBJ_NIC's device and those, and fails over between them.

A GET of a key ending in "-1" is `download_file` (the transfer engine, into a temporary file
renamed over FILE); of any other key `get_object(into=...)` into a buffer then written to FILE.
Both check what landed against the object's stored checksum (issue 37).

It prints "ready" once its hipobj.Session is open. tests/faults/lane.py runs it with
target/python-venv's interpreter, times each operation, and restarts it when a fault killed it."""

from __future__ import annotations

import json
import os
import sys

import boto3
from botocore.config import Config

import hipobj


def client():
    return boto3.client(
        "s3",
        endpoint_url=os.environ["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, connect_timeout=10, read_timeout=60),
    )


def operation(session, s3, words: list) -> None:
    op, bucket, key = words[0], words[1], words[2]
    if op == "put":
        with open(words[3], "rb") as f:
            data = f.read()
        session.put_object(s3, bucket, key, from_=data)
    elif key.endswith("-1"):
        # the transfer engine: a temporary file beside FILE, renamed when complete and checked
        session.download_file(s3, bucket, key, words[4])
    else:
        buf = bytearray(int(words[3]))
        got = session.get_object(s3, bucket, key, into=buf)
        with open(words[4], "wb") as f:
            f.write(buf[: got.size])


def main() -> int:
    s3 = client()
    with hipobj.Session(nic=os.environ["HIPOBJ_NIC"], transport="rdma") as session:
        print("ready", flush=True)
        for line in sys.stdin:
            if line.split() == ["stats"]:
                print(f"stats {json.dumps(session.rails())}", flush=True)
                continue
            try:
                operation(session, s3, line.split())
                print("ok", flush=True)
            except Exception as e:  # the driver counts it; a clear error is one line
                print(f"err {type(e).__name__}: {' '.join(str(e).split())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
