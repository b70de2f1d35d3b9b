"""Round trips by real RDMA through hipobj-server with boto3: byte checks, ranges, buffer kinds,
many threads, and what goes on the wire (signed token, HTTP from the NIC's address)."""

from __future__ import annotations

import mmap
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import hipobj
from conftest import pattern

SIZES = [1, 4095, 4096, 1 << 20, (8 << 20) + 3, 32 << 20]


@pytest.mark.parametrize("size", SIZES)
def test_round_trip(session, client, bucket, size):
    src = np.frombuffer(pattern(size, size), dtype=np.uint8).copy()
    dst = np.zeros(size, dtype=np.uint8)
    with session.register(src) as s, session.register(dst) as d:
        put = session.put_object(client, bucket, f"rt-{size}", from_=s)
        assert put.via == "rdma" and put.size == size
        got = session.get_object(client, bucket, f"rt-{size}", into=d)
    assert got.via == "rdma" and got.size == size
    assert np.array_equal(src, dst)
    # checked end to end against the CRC the server stored (docs/protocol.md section 15)
    assert got.checksum.endswith(" verified"), got.checksum
    # the object is stored: a plain boto3 GET returns the same bytes, which botocore validates
    # against the checksum the server stored while RDMA moved them (CRC64NVME needs awscrt)
    plain = client.get_object(Bucket=bucket, Key=f"rt-{size}", ChecksumMode="ENABLED")
    assert plain["Body"].read() == src.tobytes()
    assert plain.get("ChecksumType") == "FULL_OBJECT", plain.get("ChecksumType")


def test_ranged_get_into_offset(session, client, bucket):
    obj = pattern(1 << 20, 11)
    client.put_object(Bucket=bucket, Key="ranged", Body=obj)
    dst = bytearray(b"\xab" * 400_000)
    first, last, offset = 1000, 300_999, 5000
    with session.register(dst) as reg:
        got = session.get_object(client, bucket, "ranged", into=reg, offset=offset, range=(first, last))
        assert got.size == last - first + 1
        again = session.get_object(client, bucket, "ranged", into=reg, offset=0, range="bytes=0-99")
        assert again.size == 100
        assert got.checksum == again.checksum == "unchecked: a range of the object (its checksum is of the whole)"
    assert dst[offset : offset + got.size] == obj[first : last + 1]
    assert dst[:100] == obj[:100]
    assert dst[100:offset] == b"\xab" * (offset - 100)
    assert dst[offset + got.size :] == b"\xab" * (len(dst) - offset - got.size)


def test_a_get_of_bytes_changed_on_the_server_raises_after_reading_twice(session, client, bucket, server):
    size = 3 << 20
    src = np.frombuffer(pattern(size, 12), dtype=np.uint8).copy()
    dst = np.zeros(size, dtype=np.uint8)
    with session.register(src) as s, session.register(dst) as d:
        session.put_object(client, bucket, "rot", from_=s)
        # one byte changed in place on the server's disk, after its checksum was stored
        with open(server.data_dir / bucket / "rot", "r+b") as f:
            f.seek(size // 2)
            f.write(bytes([src[size // 2] ^ 0x04]))
        with pytest.raises(hipobj.ChecksumMismatchError) as e:
            session.get_object(client, bucket, "rot", into=d)
        assert e.value.retries == 1, "read again once"
        assert e.value.expected != e.value.actual and e.value.algorithm in str(e.value)
        assert f"{bucket}/rot" in str(e.value)
        off = session.get_object(client, bucket, "rot", into=d, checksum_mode="off")
        assert off.checksum == "unchecked: checksums off"
    assert dst[size // 2] == src[size // 2] ^ 0x04
    # boto3 alone (botocore's own validation, with awscrt for CRC64NVME) refuses it as well
    with pytest.raises(Exception) as plain:
        client.get_object(Bucket=bucket, Key="rot", ChecksumMode="ENABLED")["Body"].read()
    assert "checksum" in str(plain.value).lower(), plain.value


def test_put_from_offset_with_size(session, client, bucket):
    src = pattern(10_000, 12)
    with session.register(src) as reg:  # bytes: read-only, fine for a PUT
        session.put_object(client, bucket, "part", from_=reg, offset=123, size=4567)
    assert client.get_object(Bucket=bucket, Key="part")["Body"].read() == src[123 : 123 + 4567]


def test_buffer_kinds(session, client, bucket):
    data = pattern(65536, 13)
    anon = mmap.mmap(-1, len(data))
    kinds = {
        "bytearray": bytearray(len(data)),
        "memoryview": memoryview(bytearray(len(data))),
        "mmap": anon,
        "numpy-f32": np.zeros(len(data) // 4, dtype=np.float32),
    }
    session.put_object(client, bucket, "kinds", from_=data)  # registered for this call only
    for name, buf in kinds.items():
        got = session.get_object(client, bucket, "kinds", into=buf)
        assert got.size == len(data), name
        assert bytes(memoryview(buf).cast("B")) == data, name
    anon.close()


class DLPackOnly:
    """A host array seen only through DLPack (as a CPU torch tensor is)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_dlpack_host_tensor(session, client, bucket):
    data = pattern(3 * 4096, 14)
    session.put_object(client, bucket, "dlpack", from_=data)
    array = np.zeros((3, 1024), dtype=np.int32)
    with session.register(DLPackOnly(array)) as reg:
        assert not reg.device and reg.size == array.nbytes and reg.address == array.ctypes.data
        session.get_object(client, bucket, "dlpack", into=reg)
    assert array.tobytes() == data


def test_eight_threads_at_once(session, client, bucket):
    size = 2 << 20
    inside = 0
    most_inside = 0
    lock = threading.Lock()

    def one(i):
        nonlocal inside, most_inside
        src = pattern(size, 100 + i)
        dst = bytearray(size)
        with session.register(src) as s, session.register(dst) as d:
            for round_ in range(3):
                with lock:
                    inside += 1
                    most_inside = max(most_inside, inside)
                try:
                    session.put_object(client, bucket, f"t{i}", from_=s)
                    session.get_object(client, bucket, f"t{i}", into=d)
                finally:
                    with lock:
                        inside -= 1
                assert dst == src, (i, round_)
                dst[:] = bytes(size)
        return i

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(one, range(8))) == list(range(8))
    assert most_inside > 1  # transfers overlapped: the GIL was not held across them


def test_token_is_signed_and_names_this_nic(session, client, bucket):
    seen = []

    def record(request, **_):
        seen.append(dict(request.headers))

    client.meta.events.register("before-send.s3", record)
    try:
        session.put_object(client, bucket, "signed", from_=b"x" * 100)
    finally:
        client.meta.events.unregister("before-send.s3", record)
    with_token = [h for h in seen if "x-amz-rdma-token" in h]
    assert with_token, seen
    for headers in with_token:
        auth = headers["Authorization"]
        auth = auth.decode() if isinstance(auth, bytes) else auth
        signed = auth.split("SignedHeaders=")[1].split(",")[0].split(";")
        assert "x-amz-rdma-token" in signed
        token = headers["x-amz-rdma-token"]
        token = token.decode() if isinstance(token, bytes) else token
        assert hipobj.token_client_nic(token) == session.nic_address


def test_http_leaves_from_the_nic_address(session, server):
    """The request's peer address (what the server checks against the token's GID) is the
    session's NIC address, whatever route the kernel would pick."""
    import http.server

    peers = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            peers.append(self.client_address[0])
            body = b'<?xml version="1.0"?><ListAllMyBucketsResult><Buckets/></ListAllMyBucketsResult>'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    host = server.address.rsplit(":", 1)[0]
    stub = http.server.HTTPServer((host, 0), Handler)
    thread = threading.Thread(target=stub.serve_forever, daemon=True)
    thread.start()
    try:
        from hipobj_server import make_client

        c = make_client(f"http://{host}:{stub.server_address[1]}", "a", "b")
        c.list_buckets()
        hipobj.bind_http_source(c, session.nic_address)
        c.list_buckets()
    finally:
        stub.shutdown()
    assert session.nic_address
    if host != session.nic_address:
        # unbound, the kernel picks the destination's own address (the lane routes it over lo)
        assert peers[0] != session.nic_address, peers
    assert peers[1] == session.nic_address, peers
