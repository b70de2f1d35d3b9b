"""A host without an RDMA device (issue 39): a Session opens without the RDMA runtime under
transport "auto", says why once, and moves host memory over plain HTTP through the same engine;
only transport="rdma" fails, naming the missing RDMA device. Runs on the host against
hipobj-server on loopback with RDMA off (`make python`, in its own process): libibverbs is
pointed at an empty driver directory (IBV_CONFIG_DIR, as cli/tests/cli_http.rs does), so the test
holds on a host that has a device too."""

from __future__ import annotations

import io
import logging

import no_rdma  # first, before anything loads libibverbs: no drivers, so no device

import pytest  # noqa: E402

import hipobj  # noqa: E402
from conftest import pattern  # noqa: E402
from hipobj import _core  # noqa: E402

MB = 1 << 20
BUCKET = "nodev"


@pytest.fixture(scope="module", autouse=True)
def no_rdma_device():
    return no_rdma.assert_no_rdma_device()


@pytest.fixture(scope="module")
def client():
    with no_rdma.rdma_off_server(BUCKET) as srv:
        yield srv.client()


def hipobj_warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "hipobj" and r.levelno >= logging.WARNING]


def test_copies_over_http_without_rdma(client, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="hipobj")
    small, large = pattern(300_000, 1), pattern(21 * MB + 5, 2)
    for name, data in (("small", small), ("large", large)):
        (tmp_path / name).write_bytes(data)
    config = hipobj.TransferConfig(multipart_threshold=8 * MB, multipart_chunksize=8 * MB, max_concurrency=3)
    with hipobj.Session() as s:  # nic=None, transport from the environment: auto
        assert (s.transport, s.nic, s.max_transfers) == ("auto", None, 16)
        up_small = s.upload_file(client, str(tmp_path / "small"), BUCKET, "small")
        up_large = s.upload_file(client, str(tmp_path / "large"), BUCKET, "large", config=config)
        assert (up_small.multipart, up_large.multipart, up_large.parts) == (False, True, 3)
        s.download_file(client, BUCKET, "large", str(tmp_path / "large.back"), config=config)
        fileobj = io.BytesIO()
        got = s.download_fileobj(client, BUCKET, "small", fileobj)
        assert got.checksum.endswith("verified")
        put = s.put_object(client, BUCKET, "buf", from_=bytearray(small))
        dst = bytearray(b"\x55" * (len(small) + 10))
        get = s.get_object(client, BUCKET, "buf", into=dst, offset=10)
        stats = s.stats()
    assert (tmp_path / "large.back").read_bytes() == large
    assert fileobj.getvalue() == small
    assert dst == b"\x55" * 10 + small
    assert client.get_object(Bucket=BUCKET, Key="large")["Body"].read() == large
    assert (put.via, put.reason, get.via, get.size) == ("http", "no RDMA device", "http", len(small))
    moved = 2 * len(small) + 2 * len(large) + 2 * len(small)
    assert stats == {
        "rdma": {"transfers": 0, "bytes": 0, "by_reason": {}},
        "http": {"transfers": 6, "bytes": moved, "by_reason": {"no RDMA device": 6}},
        "switches": 0,
    }
    said = [m for m in hipobj_warnings(caplog) if "RDMA" in m]
    assert len(said) == 1, said  # the reason, once
    assert "no RDMA device" in said[0] and "GPU" not in said[0]


def test_forced_rdma_names_the_missing_device(monkeypatch):
    with pytest.raises(hipobj.NicNotFoundError, match="no RDMA device") as info:
        hipobj.Session(transport="rdma").open()
    assert "GPU" not in str(info.value)
    monkeypatch.setenv("HIPOBJ_TRANSPORT", "rdma")
    with pytest.raises(hipobj.NicNotFoundError, match="no RDMA device"):
        hipobj.Session().open()
    assert not _core.is_initialized()
    with pytest.raises(hipobj.NotInitializedError):
        hipobj.current_session()
    with hipobj.Session(transport="http") as s:  # the failed opens left nothing behind
        assert s.transport == "http"


def test_unknown_transport_is_refused(monkeypatch):
    with pytest.raises(hipobj.InvalidValueError, match="expected auto, rdma or http"):
        hipobj.Session(transport="tcp")
    with pytest.raises(hipobj.InvalidValueError):
        hipobj.TransferConfig(transport="fast")
    monkeypatch.setenv("HIPOBJ_TRANSPORT", "bogus")
    with pytest.raises(hipobj.InvalidValueError, match="HIPOBJ_TRANSPORT"):
        hipobj.Session()


def test_without_runtime_register_and_rdma_copies_say_why(client, tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 1000)
    with hipobj.Session() as s:
        with pytest.raises(hipobj.NotInitializedError, match="no RDMA runtime .*nothing to register"):
            s.register(bytearray(16))
        rdma = hipobj.TransferConfig(transport="rdma")
        with pytest.raises(hipobj.NicNotFoundError, match="no RDMA device"):
            s.upload_file(client, str(tmp_path / "f"), BUCKET, "never", config=rdma)
        assert s.stats()["http"]["transfers"] == 0
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    assert "never" not in keys
