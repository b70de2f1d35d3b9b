"""docs/protocol.md rule 4.9 end to end: an application's own boto3 client with DEFAULT settings
(flexible checksums on, boto3 >= 1.36) makes token PUTs that work; the checksum boto3 computes of
the empty body becomes the server's checksum of the moved bytes; a real checksum is compared."""

from __future__ import annotations

import base64
import zlib

import boto3
import numpy as np
import pytest

import hipobj
from conftest import pattern
from hipobj_server import IDENTITIES


def _crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


@pytest.fixture(scope="module")
def default_client(server):
    access, secret = IDENTITIES[0]
    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name="us-east-1",
    )


def test_default_boto3_client_token_put(session, default_client, bucket):
    data = pattern((3 << 20) + 7, 41)
    src = np.frombuffer(data, dtype=np.uint8)
    put = session.put_object(default_client, bucket, "defaults", from_=src)
    assert put.via == "rdma" and put.size == len(data)
    head = default_client.head_object(Bucket=bucket, Key="defaults", ChecksumMode="ENABLED")
    assert head["ContentLength"] == len(data)
    assert head.get("ChecksumCRC32") == _crc32(data), "the server stored the moved bytes' CRC32"
    dst = np.zeros(len(data), dtype=np.uint8)
    got = session.get_object(default_client, bucket, "defaults", into=dst)
    assert got.via == "rdma" and dst.tobytes() == data


def test_a_real_checksum_is_compared(session, default_client, bucket):
    data = pattern(100_000, 42)
    src = np.frombuffer(data, dtype=np.uint8)
    ok = session.put_object(default_client, bucket, "crc-ok", from_=src, extra_args={"ChecksumCRC32": _crc32(data)})
    assert ok.via == "rdma"
    with pytest.raises(hipobj.S3Error) as bad:
        session.put_object(default_client, bucket, "crc-bad", from_=src, extra_args={"ChecksumCRC32": _crc32(b"other")})
    assert bad.value.http_status == 400
    with pytest.raises(default_client.exceptions.ClientError):
        default_client.head_object(Bucket=bucket, Key="crc-bad")
