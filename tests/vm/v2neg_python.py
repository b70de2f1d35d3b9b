"""Python get_object/put_object against a hipobj-rc-v2-only server (tests/vm/e2e.d/29-v2-negotiation):
nothing but the endpoint is given; the Session negotiates (docs/protocol.md 10.1). Prints one line per
transfer and, last, "rdma transfers: N" for the caller to compare with the server's log.
Usage: v2neg_python.py URL NIC BUCKET"""

import faulthandler
import os
import sys
import time

import boto3
from botocore.config import Config

import hipobj


def main() -> int:
    url, nic, bucket = sys.argv[1:4]
    faulthandler.dump_traceback_later(180, repeat=True)  # where it is, if a transfer hangs
    client = boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        config=Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}),
    )
    transfers = 0
    with hipobj.Session(nic=nic) as s:
        for size in (1, 4096, 1 << 20, 64 << 20):
            src = bytearray(os.urandom(size))
            t0 = time.monotonic()
            put = s.put_object(client, bucket, f"py-{size}", src)
            dst = bytearray(size)
            t1 = time.monotonic()
            got = s.get_object(client, bucket, f"py-{size}", dst)
            t2 = time.monotonic()
            transfers += 2
            assert (put.via, put.protocol, got.via, got.protocol) == ("rdma", "v2", "rdma", "v2"), (put, got)
            assert got.size == size, got.size
            assert dst == src, f"{size} bytes came back different"
            print(f"put/get {size} B over {put.protocol}: {(t1 - t0) * 1e3:.1f} / {(t2 - t1) * 1e3:.1f} ms, "
                  f"{put.requests}/{got.requests} requests, bytes equal")
        part = bytearray(5000)
        got = s.get_object(client, bucket, f"py-{1 << 20}", part, range=(1000, 5999))
        transfers += 1
        whole = bytearray(1 << 20)
        s.get_object(client, bucket, f"py-{1 << 20}", whole)
        transfers += 1
        assert part == whole[1000:6000], "the range differs"
        print(f"get of bytes 1000-5999 over {got.protocol}: equal")
        print(f"rdma_protocol(): {s.rdma_protocol(client, bucket)}")
    with hipobj.Session(nic=nic, protocol="v1") as s:
        try:
            s.get_object(client, bucket, "py-4096", bytearray(4096))
            print("protocol='v1' against a v2-only server succeeded")
            return 1
        except hipobj.RdmaNotSupportedError as e:
            print(f"protocol='v1': RdmaNotSupportedError ({e.http_status})")
        r = s.get_object(client, bucket, "py-4096", bytearray(4096), fallback="http")
        assert r.via == "http", r
        print("protocol='v1', fallback='http': over plain HTTP")
    print(f"rdma transfers: {transfers}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
