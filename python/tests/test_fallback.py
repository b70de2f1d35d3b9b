"""A server with RDMA off answers 501: RdmaNotSupportedError, or the plain-HTTP transfer with
fallback="http", reported in the result."""

from __future__ import annotations

import pytest

import hipobj
from conftest import pattern
from hipobj_server import Server, device_address


@pytest.fixture(scope="module")
def plain_server(devices):
    srv = Server(None, device_address(devices[-1]))  # no --device: RDMA disabled
    yield srv
    srv.stop()


def test_501_and_http_fallback(session, plain_server):
    client = plain_server.client()
    client.create_bucket(Bucket="plain")
    data = pattern(3 << 20, 31)
    src = bytearray(data)
    with session.register(src) as reg:
        with pytest.raises(hipobj.RdmaNotSupportedError, match="501") as info:
            session.put_object(client, "plain", "obj", from_=reg)
        assert info.value.reply == "501" and info.value.http_status == 501
        put = session.put_object(client, "plain", "obj", from_=reg, fallback="http")
    assert put.via == "http" and put.size == len(data)
    assert client.get_object(Bucket="plain", Key="obj")["Body"].read() == data

    dst = bytearray(b"\x44" * (4 << 20))
    with session.register(dst) as reg:
        with pytest.raises(hipobj.RdmaNotSupportedError):
            session.get_object(client, "plain", "obj", into=reg, offset=10)
        assert dst == bytearray(b"\x44" * (4 << 20))  # the refused GET wrote nothing
        got = session.get_object(client, "plain", "obj", into=reg, offset=10, fallback="http")
        ranged = session.get_object(client, "plain", "obj", into=reg, range=(5, 9), fallback="http")
    assert got.via == "http" and got.size == len(data)
    assert dst[10 : 10 + len(data)] == data[:]
    assert ranged.size == 5 and dst[:5] == data[5:10]
    assert dst[10 + len(data) :] == b"\x44" * (len(dst) - 10 - len(data))
