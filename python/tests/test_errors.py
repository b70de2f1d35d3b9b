"""Sessions of their own (one at a time per process), and each documented error: its class, its
code, its message, and that nothing was changed."""

from __future__ import annotations

import numpy as np
import pytest

import hipobj
from conftest import pattern


@pytest.fixture
def open_session(devices):
    with hipobj.Session(nic=devices[0]) as s:
        yield s


def test_classes_and_codes():
    expected = {
        "InvalidValueError": 1, "NotInitializedError": 2, "AlreadyInitializedError": 3,
        "RdmaError": 4, "S3Error": 5, "BufNotRegisteredError": 6, "BufAlreadyRegisteredError": 7,
        "NicNotFoundError": 8, "DmabufNotSupportedError": 9, "SizeTooLargeError": 10,
        "InternalError": 11, "BusyError": 12,
    }
    for name, code in expected.items():
        cls = getattr(hipobj, name)
        assert issubclass(cls, hipobj.HipObjError) and cls.code == code, name
    assert issubclass(hipobj.RdmaNotSupportedError, hipobj.S3Error)
    assert issubclass(hipobj.NoDeviceError, hipobj.InvalidValueError)


def test_nic_not_found():
    with pytest.raises(hipobj.NicNotFoundError, match="nosuchdev0"):
        hipobj.Session(nic="nosuchdev0").open()
    assert not hipobj._core.is_initialized()


def test_bad_session_arguments(devices):
    with pytest.raises(hipobj.InvalidValueError, match="max_transfers"):
        hipobj.Session(nic=devices[0], max_transfers=0).open()
    with pytest.raises(hipobj.InvalidValueError, match="gpu"):
        hipobj.Session(nic=devices[0], gpu=-5).open()
    assert not hipobj._core.is_initialized()


def test_already_initialized(open_session, devices):
    with pytest.raises(hipobj.AlreadyInitializedError):
        hipobj.Session(nic=devices[0]).open()
    assert hipobj.current_session() is open_session


def test_not_initialized_after_close(devices, client, bucket):
    s = hipobj.Session(nic=devices[0]).open()
    buf = bytearray(100)
    reg = s.register(buf)
    s.close()
    assert not reg.registered
    with pytest.raises(hipobj.NotInitializedError):
        s.get_object(client, bucket, "x", into=reg)
    with pytest.raises(hipobj.NotInitializedError):
        s.register(bytearray(10))
    with pytest.raises(hipobj.NotInitializedError):
        hipobj._core.transfer("get", reg, 100, 0, lambda t: "200")
    assert buf == bytearray(100)


def test_registration_errors(open_session, client, bucket):
    s = open_session
    buf = bytearray(4096)
    reg = s.register(buf)
    with pytest.raises(hipobj.BufAlreadyRegisteredError):
        s.register(buf)
    with pytest.raises(BufferError):
        buf.extend(b"x")  # pinned while registered
    reg.deregister()
    buf.extend(b"x")  # released
    with pytest.raises(hipobj.BufNotRegisteredError):
        s.get_object(client, bucket, "x", into=reg)
    with pytest.raises(hipobj.InvalidValueError, match="empty"):
        s.register(bytearray())
    with pytest.raises(hipobj.InvalidValueError, match="buffer protocol"):
        s.register(object())


def test_bad_transfer_arguments_change_nothing(open_session, client, bucket):
    s = open_session
    obj = pattern(8192, 21)
    client.put_object(Bucket=bucket, Key="args", Body=obj)
    dst = bytearray(b"\x5a" * 4096)
    with s.register(dst) as reg:
        with pytest.raises(hipobj.InvalidValueError, match="not inside"):
            s.get_object(client, bucket, "args", into=reg, range=(0, 8191))  # 8192 > 4096
        with pytest.raises(hipobj.InvalidValueError, match="offset"):
            s.get_object(client, bucket, "args", into=reg, offset=4096)
        with pytest.raises(hipobj.InvalidValueError, match="range"):
            s.get_object(client, bucket, "args", into=reg, range="bytes=9-")
        with pytest.raises(hipobj.InvalidValueError, match="fallback"):
            s.get_object(client, bucket, "args", into=reg, fallback="ftp")
        with pytest.raises(hipobj.S3Error, match="400"):
            # the whole object does not fit: the server refuses (400) and writes nothing
            s.get_object(client, bucket, "args", into=reg)
    assert dst == bytearray(b"\x5a" * 4096)
    with s.register(obj) as ro:
        with pytest.raises(hipobj.InvalidValueError, match="read-only"):
            s.get_object(client, bucket, "args", into=ro)
    with s.register(dst) as reg:
        with pytest.raises(hipobj.InvalidValueError, match="not inside"):
            s.put_object(client, bucket, "args", from_=reg, offset=100, size=4096)
    assert client.get_object(Bucket=bucket, Key="args")["Body"].read() == obj


def test_missing_object_is_s3_error_404(open_session, client, bucket):
    dst = bytearray(b"\x11" * 1000)
    with pytest.raises(hipobj.S3Error, match="404") as info:
        open_session.get_object(client, bucket, "no-such-key", into=dst)
    assert info.value.reply == "404"
    # the server's S3 error, as botocore's ClientError carries it
    assert info.value.response["Error"]["Code"] == "NoSuchKey", info.value.response
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert info.value.error_code == "NoSuchKey" and info.value.http_status == 404
    assert "NoSuchKey" in str(info.value)
    assert dst == bytearray(b"\x11" * 1000)


def test_bad_credentials_is_s3_error_with_the_cause(open_session, server, bucket):
    from botocore.exceptions import ClientError

    dst = bytearray(b"\x22" * 1000)
    bad = server.client(secret="wrong-secret")
    with pytest.raises(hipobj.S3Error, match="sendRequest") as info:
        open_session.get_object(bad, bucket, "anything", into=dst)
    assert isinstance(info.value.__cause__, ClientError)
    assert info.value.__cause__.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert dst == bytearray(b"\x22" * 1000)


def test_callback_exception_is_the_cause(open_session):
    dst = bytearray(100)

    def send(token):
        raise ConnectionError("network down")

    with open_session.register(dst) as reg:
        with pytest.raises(hipobj.S3Error) as info:
            hipobj._core.transfer("get", reg, 100, 0, send)
    assert isinstance(info.value.__cause__, ConnectionError)


def test_busy_inside_a_callback(devices, client, bucket):
    """A transfer started from inside another transfer's callback (here: a botocore event of
    the outer request) when every connection is in use gets BusyError at once."""
    client.put_object(Bucket=bucket, Key="busy", Body=pattern(4096, 22))
    inner_errors = []
    with hipobj.Session(nic=devices[0], max_transfers=1) as s:
        outer, inner = bytearray(4096), bytearray(b"\x33" * 4096)
        inner_reg = s.register(inner)

        def nested(request, **_):
            if "x-amz-rdma-token" in request.headers and not inner_errors:
                try:
                    s.get_object(client, bucket, "busy", into=inner_reg)
                except hipobj.BusyError as e:
                    inner_errors.append(e)

        client.meta.events.register("before-send.s3", nested)
        try:
            got = s.get_object(client, bucket, "busy", into=outer)
        finally:
            client.meta.events.unregister("before-send.s3", nested)
    assert len(inner_errors) == 1 and "callback" in str(inner_errors[0])
    assert got.size == 4096 and bytes(outer) == pattern(4096, 22)
    assert inner == bytearray(b"\x33" * 4096)


class FakeDeviceArray:
    """Says it is device memory (__cuda_array_interface__) while pointing at host memory."""

    def __init__(self, array):
        self.array = array
        self.__cuda_array_interface__ = {
            "shape": array.shape, "typestr": array.dtype.str, "data": (array.ctypes.data, False),
            "strides": None, "version": 3,
        }


def test_device_pointer_without_hip_device(open_session):
    assert open_session.gpu is None  # the lane has no GPU
    with pytest.raises(hipobj.NoDeviceError, match="HIP has no device"):
        open_session.register(FakeDeviceArray(np.zeros(1024, dtype=np.float32)))
    assert hipobj._core.is_initialized()


def test_first_transfer_pairs_then_one_request(client, bucket, devices):
    with hipobj.Session(nic=devices[0], max_transfers=1) as s:
        buf = bytearray(pattern(4096, 7))
        with s.register(buf) as reg:
            first = s.put_object(client, bucket, "pairing", from_=reg)
            second = s.put_object(client, bucket, "pairing", from_=reg)
    assert (first.requests, second.requests) == (2, 1)  # 428 + retry, then paired
