"""One operation of the fault lane through the hipobj Python package (run by tests/faults/lane.py
with target/python-venv's interpreter): put BUCKET KEY FILE, or get BUCKET KEY SIZE FILE.
Exit 0 on success; 1 with the error on stderr otherwise (the driver retries and counts)."""

from __future__ import annotations

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


def main(argv: list) -> int:
    op, bucket, key = argv[1], argv[2], argv[3]
    s3 = client()
    with hipobj.Session(nic=os.environ["HIPOBJ_NIC"]) as session:
        if op == "put":
            with open(argv[4], "rb") as f:
                data = f.read()
            session.put_object(s3, bucket, key, from_=data)
        else:
            buf = bytearray(int(argv[4]))
            got = session.get_object(s3, bucket, key, into=buf)
            with open(argv[5], "wb") as f:
                f.write(buf[: got.size])
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except Exception as e:  # the driver reads the message: a clear error is one line here
        print(f"pyclient: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
