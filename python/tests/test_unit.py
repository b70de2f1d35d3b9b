"""Host-only tests of the Python layer (no RDMA device needed; `make python` runs them): argument
parsing, what memory an object names, the boto3 hook and the HTTP source binding."""

from __future__ import annotations

import http.server
import threading

import numpy as np
import pytest

import hipobj
from botocore.exceptions import ClientError
from hipobj._memory import describe
from hipobj._s3 import S3Call, _add_token, prepare_client, token_on_thread
from hipobj._session import _parse_range
from hipobj_server import make_client


def test_parse_range():
    assert _parse_range(None) is None
    assert _parse_range((3, 9)) == (3, 9)
    assert _parse_range("bytes=0-0") == (0, 0)
    for bad in ["bytes=5-", "bytes=9-3", "0-9", (4, 2), (-1, 3), "bytes=a-b", 7]:
        with pytest.raises(hipobj.InvalidValueError):
            _parse_range(bad)


class CAI:
    def __init__(self, array, strides=None, readonly=False):
        self.__cuda_array_interface__ = {
            "shape": array.shape, "typestr": array.dtype.str, "strides": strides,
            "data": (array.ctypes.data, readonly), "version": 3,
        }


class DLPackOnly:
    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_describe():
    a = np.zeros((4, 8), dtype=np.float32)
    assert describe(bytearray(3), has_gpu=False) is None  # buffer protocol
    assert describe(a, has_gpu=False) is None
    mem = describe(CAI(a, readonly=True), has_gpu=True)
    assert (mem.address, mem.size, mem.writable, mem.device) == (a.ctypes.data, 128, False, True)
    with pytest.raises(hipobj.NoDeviceError, match="HIP has no device"):
        describe(CAI(a), has_gpu=False)
    with pytest.raises(hipobj.InvalidValueError, match="contiguous"):
        describe(CAI(a, strides=(4, 16)), has_gpu=True)
    mem = describe(DLPackOnly(a[1:]), has_gpu=False)
    assert (mem.address, mem.size, mem.device) == (a[1:].ctypes.data, 96, False)
    with pytest.raises(hipobj.InvalidValueError, match="contiguous"):
        describe(DLPackOnly(a[:, ::2]), has_gpu=False)
    with pytest.raises(hipobj.InvalidValueError, match="neither"):
        describe(object(), has_gpu=False)


def test_not_initialized_without_session():
    assert not hipobj._core.is_initialized()
    with pytest.raises(hipobj.NotInitializedError):
        hipobj._core.register_buffer(bytearray(10))
    with pytest.raises(hipobj.NotInitializedError):
        hipobj.current_session()


class Recorder(http.server.BaseHTTPRequestHandler):
    seen: list = []

    def do_GET(self):
        Recorder.seen.append((self.client_address[0], dict(self.headers)))
        body = b'<?xml version="1.0"?><ListAllMyBucketsResult><Buckets/></ListAllMyBucketsResult>'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub():
    srv = http.server.HTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    Recorder.seen = []
    yield srv
    srv.shutdown()


def test_token_hook_signs_only_our_requests_and_binds_the_source(stub):
    client = make_client(f"http://127.0.0.1:{stub.server_address[1]}", "a", "b")
    prepare_client(client, "127.0.0.2")
    prepare_client(client, "127.0.0.2")  # once per client
    client.list_buckets()  # no token on the thread: untouched
    with token_on_thread("ab" * 44):
        client.list_buckets()
    (peer0, plain), (peer1, ours) = Recorder.seen
    assert peer0 == peer1 == "127.0.0.2"
    assert "x-amz-rdma-token" not in plain
    assert ours["x-amz-rdma-token"] == "ab" * 44
    assert "x-amz-rdma-token" in ours["Authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
    hipobj.bind_http_source(client, None)
    client.list_buckets()
    assert Recorder.seen[2][0] == "127.0.0.1"


def test_checksum_headers_stay_in_token_requests():
    """docs/protocol.md rule 4.9: the server reads them as describing the RDMA-moved bytes."""
    from botocore.awsrequest import AWSRequest

    request = AWSRequest(method="PUT", url="http://x/b/k", headers={"x-amz-checksum-crc32": "AAAAAA==", "x-amz-sdk-checksum-algorithm": "CRC32", "Range": "bytes=0-1"})
    _add_token(request)  # no token on this thread: nothing changes
    assert "x-amz-rdma-token" not in request.headers
    with token_on_thread("cd" * 44):
        _add_token(request)
    assert request.headers["x-amz-checksum-crc32"] == "AAAAAA=="
    assert request.headers["x-amz-sdk-checksum-algorithm"] == "CRC32"
    assert request.headers["x-amz-rdma-token"] == "cd" * 44 and request.headers["Range"] == "bytes=0-1"


class Failing(http.server.BaseHTTPRequestHandler):
    """Answers every request 500 InternalError, as a server whose RDMA operation failed."""

    seen: list = []

    def do_GET(self):
        Failing.seen.append(self.headers.get("x-amz-rdma-token"))
        body = b'<?xml version="1.0"?><Error><Code>InternalError</Code><Message>the RDMA operation failed</Message></Error>'
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_botocore_never_resends_a_token():
    """botocore retries a 500 by itself; a token request must go out once and its 500 reach the
    library (which retries with a fresh token on a fresh QP), docs/protocol.md 5.3 and 5.5."""
    srv = http.server.HTTPServer(("127.0.0.1", 0), Failing)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    Failing.seen = []
    try:
        client = make_client(f"http://127.0.0.1:{srv.server_address[1]}", "a", "b")
        prepare_client(client, None)
        with pytest.raises(Exception):
            client.list_buckets()  # no token: botocore's own retries stand
        plain = len(Failing.seen)
        assert plain >= 2 and Failing.seen == [None] * plain
        call = S3Call(client, "list_buckets", {})
        with pytest.raises(ClientError) as raised:
            call.send("ef" * 44)
        assert Failing.seen[plain:] == ["ef" * 44]
        assert call.status == 500 and call.exception is raised.value
        assert raised.value.response["Error"]["Code"] == "InternalError"
        with pytest.raises(ClientError):
            call.send("12" * 44)
        assert Failing.seen[plain + 1 :] == ["12" * 44]
    finally:
        srv.shutdown()


class ControlRecorder(http.server.BaseHTTPRequestHandler):
    """Answers every POST as a hipobj-rc-v2-only server answers an unknown PREPARE."""

    seen: list = []

    def do_POST(self):
        ControlRecorder.seen.append((self.client_address[0], self.path, dict(self.headers)))
        self.send_response(501)
        self.send_header("X-Amz-Rdma-Protocol-Status", "unsupported")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_v2_control_requests_are_signed_posts_from_the_nic_address():
    """docs/protocol.md 10.3: SigV4 over POST to the control path, every x-amz-rdma-* header signed,
    Content-Length 0, from the bound source address; the answer's headers come back lowercase."""
    from hipobj._s3 import S3Call

    srv = http.server.HTTPServer(("127.0.0.1", 0), ControlRecorder)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    ControlRecorder.seen = []
    try:
        client = make_client(f"http://127.0.0.1:{srv.server_address[1]}", "a", "b")
        prepare_client(client, "127.0.0.2")
        negotiation = hipobj._core.Negotiation("auto")
        call = S3Call(client, "get_object", {"Bucket": "b", "Key": "k", "Range": "bytes=7-9"}, negotiation)
        headers = [("x-amz-rdma-protocol", "hipobj-rc-v2"), ("x-amz-rdma-op", "GET"), ("x-amz-rdma-size", "3")]
        status, answer = call.control("/.hipobj-rc/prepare", headers, True)
    finally:
        srv.shutdown()
    assert (status, answer["x-amz-rdma-protocol-status"]) == (501, "unsupported")
    assert (call.status, call.headers) == (501, answer)
    ((peer, path, sent),) = ControlRecorder.seen
    assert (peer, path, sent["Content-Length"]) == ("127.0.0.2", "/.hipobj-rc/prepare", "0")
    signed = sent["Authorization"].split("SignedHeaders=")[1].split(",")[0].split(";")
    assert {"x-amz-rdma-protocol", "x-amz-rdma-op", "x-amz-rdma-size", "x-amz-date", "host"} <= set(signed)
    assert call.v2_target() == ("b", "k", [], 7)
    part = S3Call(client, "upload_part", {"Bucket": "b", "Key": "k", "UploadId": "u", "PartNumber": 3, "Body": b""})
    assert part.v2_target() == ("b", "k", [("partNumber", "3"), ("uploadId", "u")], 0)
    assert call.endpoint == f"http://127.0.0.1:{srv.server_address[1]}"


def test_negotiation_choice_and_limits():
    n = hipobj._core.Negotiation("V2")
    assert (n.choice, n.spoken("http://x"), n.max_transfer("http://x")) == ("v2", None, 2**31 - 1)
    assert hipobj._core.Negotiation("v1").max_transfer("http://x") is None
    with pytest.raises(hipobj.InvalidValueError):
        hipobj._core.Negotiation("v3")


NO_SUCH_KEY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchKey</Code>'
    b"<Message>The specified key does not exist.</Message><Key>k</Key>"
    b"<RequestId>body-id</RequestId></Error>"
)


class Refusing(http.server.BaseHTTPRequestHandler):
    """Answers every GET as the server answers a token GET of a missing key."""

    def do_GET(self):
        self.send_response(404)
        self.send_header("x-amz-rdma-reply", "404")
        self.send_header("x-amz-request-id", "req-1")
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(NO_SUCH_KEY)))
        self.end_headers()
        self.wfile.write(NO_SUCH_KEY)

    def log_message(self, *args):
        pass


def test_a_refused_token_request_keeps_the_servers_s3_error():
    """The answer's body reaches the library, which reads the S3 error of it (botocore's
    ClientError shape: what a boto3 user's `except ClientError` reads)."""
    srv = http.server.HTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        client = make_client(f"http://127.0.0.1:{srv.server_address[1]}", "a", "b")
        prepare_client(client, None)
        call = S3Call(client, "get_object", {"Bucket": "b", "Key": "k"})
        assert call.send("ef" * 44) == "404"
        assert call.error_response() == {
            "Error": {"Code": "NoSuchKey", "Message": "The specified key does not exist."},
            "ResponseMetadata": {"HTTPStatusCode": 404, "RequestId": "req-1"},
        }
    finally:
        srv.shutdown()


def test_s3_error_answers_are_read_by_the_library():
    body = (
        b"<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message>"
        b"<RequestId>body-id</RequestId></Error>"
    )
    assert hipobj._core.error_response(404, {}, body) == {
        "Error": {"Code": "NoSuchBucket", "Message": "The specified bucket does not exist"},
        "ResponseMetadata": {"HTTPStatusCode": 404, "RequestId": "body-id"},
    }
    assert hipobj._core.error_response(503, {"retry-after": "2"}, b"")["ResponseMetadata"] == {
        "HTTPStatusCode": 503
    }
    assert hipobj._core.error_response(200, {}, b"<R/>") is None


def test_retry_classes_are_the_librarys():
    """Python keeps only botocore's exception mapping; the classes of statuses and codes are the
    library's (src/engine/retry.rs), e.g. revision 5's 503 as throttling."""
    from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

    from hipobj import _transfer

    assert not [n for n in vars(_transfer) if n.startswith(("_THROTTLING", "_TRANSIENT"))]
    assert _transfer.retry_class(503, None, None) == "throttling"
    assert _transfer.retry_class(400, "SlowDown", None) == "throttling"
    assert _transfer.retry_class(400, "RequestTimeout", None) == "transient"
    assert _transfer.retry_class(404, "NoSuchKey", None) == "fatal"
    assert _transfer.retry_class(200, None, None) is None
    for status in range(300, 600):
        assert _transfer.retry_class(status, None, None) == hipobj._core.retry_class(status, None)
    assert _transfer.retry_class(None, None, ReadTimeoutError(endpoint_url="x")) == "timeout"
    assert _transfer.retry_class(None, None, EndpointConnectionError(endpoint_url="x")) == "transient"


# The RDMA-or-HTTP decision's plumbing (issue 39): modes, the one pick, counters --------------

class FakeClient:
    class meta:
        endpoint_url = "http://10.0.0.1:9000/"


def test_transport_modes(monkeypatch):
    from hipobj import _core

    assert [_core.transport_mode(v) for v in ("auto", " RDMA ", "Http")] == ["auto", "rdma", "http"]
    monkeypatch.delenv("HIPOBJ_TRANSPORT", raising=False)
    assert _core.transport_mode() == "auto" and hipobj.Session().transport == "auto"
    monkeypatch.setenv("HIPOBJ_TRANSPORT", "http")
    assert hipobj.Session().transport == "http"
    assert hipobj.Session(transport="rdma").transport == "rdma"  # the argument wins
    assert hipobj.TransferConfig().transport is None  # the Session's
    assert hipobj.TransferConfig(transport="AUTO").transport == "auto"
    for bad in ("tcp", ""):
        with pytest.raises(hipobj.InvalidValueError):
            hipobj.TransferConfig(transport=bad)


def test_pick_is_the_one_place(monkeypatch):
    monkeypatch.delenv("HIPOBJ_TRANSPORT", raising=False)
    s = hipobj.Session()
    s._rdma = True  # as after a successful hipObjInit (nothing moves here)
    small, large = s._pick(FakeClient, 64 << 10, "get", "host"), s._pick(FakeClient, 4 << 20, "get", "host")
    assert (small.path, small.reason, large.path, large.reason) == ("http", "default start", "rdma", "default start")
    device = s._pick(FakeClient, 4096, "get", "gpu")  # plain HTTP cannot reach device memory
    assert (device.path, device.reason) == ("rdma", "forced")
    forced = s._pick(FakeClient, 4 << 20, "put", "host", "http")  # a TransferConfig's mode
    assert (forced.path, forced.reason) == ("http", "forced")
    with pytest.raises(hipobj.InvalidValueError, match="host memory only"):
        s._pick(FakeClient, 4096, "get", "gpu-bounce", "http")
    for t, n in ((small, 64 << 10), (large, 4 << 20), (forced, 4 << 20)):
        t.record(n)
    stats = s.stats()
    assert stats["rdma"] == {"transfers": 1, "bytes": 4 << 20, "by_reason": {"default start": 1}}
    assert stats["http"] == {"transfers": 2, "bytes": (64 << 10) + (4 << 20), "by_reason": {"default start": 1, "forced": 1}}

    s._rdma = False  # no runtime: auto goes over HTTP and says why; RDMA is refused naming it
    assert s._transport.no_rdma_device("no RDMA device (none here)") is True
    assert s._transport.no_rdma_device("again") is False  # said once
    t = s._pick(FakeClient, 64 << 20, "get", "host")
    assert (t.path, t.reason) == ("http", "no RDMA device")
    with pytest.raises(hipobj.NicNotFoundError, match="no RDMA device \\(none here\\)"):
        s._pick(FakeClient, 64 << 20, "get", "host", "rdma")


def test_store_asks_the_session(monkeypatch):
    monkeypatch.delenv("HIPOBJ_TRANSPORT", raising=False)
    s = hipobj.Session()
    s._rdma = True
    client = make_client("http://127.0.0.1:9", "a", "b")
    auto = s._store(client, "b", "k", config=hipobj.TransferConfig())
    http = s._store(client, "b", "k", config=hipobj.TransferConfig(transport="http"))
    assert auto.transport is None  # until the engine picks
    assert auto.pick(8 << 20, "put", "host").path == "rdma"
    assert (http.pick(8 << 20, "put", "host").path, http.pick(1, "get", "host").reason) == ("http", "forced")


def test_crc_of_buffer_is_the_librarys_crc():
    """CRC64NVME's check value (the CRC of b"123456789", 0xAE8B14860A799888), S3-encoded, from
    bytes and from a numpy array's memory; the other algorithms by name; bad input refused."""
    from hipobj import _core

    want = "rosUhgp5mIg="
    assert _core.crc_of_buffer(b"123456789") == want
    assert _core.crc_of_buffer(memoryview(np.frombuffer(b"123456789", dtype=np.uint8))) == want
    assert _core.crc_of_buffer(b"123456789", "CRC32C") == "4waSgw=="  # 0xE3069283
    assert _core.crc_of_buffer(b"", "CRC32") == "AAAAAA=="
    with pytest.raises(hipobj.InvalidValueError):
        _core.crc_of_buffer(b"x", "MD5")
    with pytest.raises(TypeError):
        _core.crc_of_buffer(12345)


def test_crc_blocks_and_their_combination():
    """The library's CRC of each block of a buffer, and of pieces in a row from their CRCs (issue
    55's block CRCs): any run of whole blocks combines to the CRC of its bytes."""
    from hipobj import _core

    data = np.random.default_rng(55).integers(0, 256, 10_000, dtype=np.uint8).tobytes()
    blocks = _core.crc_blocks_of_buffer(data, 1024)
    assert len(blocks) == 10 and blocks[9] == _core.crc_of_buffer(data[9216:])  # the last one shorter
    pieces = [(crc, min(1024, len(data) - i * 1024)) for i, crc in enumerate(blocks)]
    assert _core.crc_combine(pieces) == _core.crc_of_buffer(data)
    assert _core.crc_combine(pieces[3:7]) == _core.crc_of_buffer(data[3072:7168])
    assert _core.crc_combine([]) == _core.crc_of_buffer(b"")
    assert _core.crc_blocks_of_buffer(b"", 1024) == []
    assert _core.crc_combine([(c, n) for c, n in zip(_core.crc_blocks_of_buffer(data, 4096, "CRC32C"), (4096, 4096, 1808))], "CRC32C") == (
        _core.crc_of_buffer(data, "CRC32C")
    )
    with pytest.raises(hipobj.InvalidValueError, match="at least 1 byte"):
        _core.crc_blocks_of_buffer(data, 0)
    with pytest.raises(hipobj.InvalidValueError, match="is not a CRC64NVME value"):
        _core.crc_combine([("AAAA", 3)])


def test_a_range_is_checked_against_the_blocks_that_cover_it():
    """_crcs.span_for: the writer's CRC64NVME of the smallest run of whole blocks covering any
    range of an item, equal to the CRC of those bytes; what an older record cannot check."""
    from hipobj import _core, _crcs

    data = np.random.default_rng(56).integers(0, 256, 5000, dtype=np.uint8).tobytes()
    record = _crcs.record(memoryview(data), len(data), 1024)
    assert record["CRC64NVME"] == _core.crc_of_buffer(data) and len(record["blocks"]) == 5
    rng = np.random.default_rng(57)
    cases = [(0, 5000), (0, 1), (4999, 5000), (1024, 2048), (1000, 1100), (1023, 1025), (10, 4990)]
    cases += [tuple(sorted(rng.integers(0, 5001, 2))) for _ in range(200)]
    for lo, hi in cases:
        if lo == hi:
            continue
        span = _crcs.span_for(record, len(data), lo, hi, "x")
        assert span.lo <= lo and hi <= span.hi and span.lo % 1024 == 0 and (span.hi % 1024 == 0 or span.hi == 5000)
        assert span.hi - span.lo < (hi - lo) + 2 * 1024
        assert span.crc == _core.crc_of_buffer(data[span.lo : span.hi]), (lo, hi)
    small = _crcs.record(memoryview(data[:700]), 700, 1024)  # one block: no list, the whole CRC
    assert "blocks" not in small and _crcs.span_for(small, 700, 5, 9, "x").crc == small["CRC64NVME"]
    older = {"CRC64NVME": record["CRC64NVME"]}  # a writer of whole CRCs only
    assert _crcs.span_for(older, 5000, 0, 5000, "x").crc == record["CRC64NVME"]
    assert "only the whole item's" in _crcs.span_for(older, 5000, 5, 9, "x")
    assert "no CRC64NVME" in _crcs.span_for({}, 5000, 0, 5000, "x")
    with pytest.raises(hipobj.InvalidValueError, match="do not cover"):
        _crcs.span_for({**record, "blocks": record["blocks"][:4]}, 5000, 5, 9, "x")
