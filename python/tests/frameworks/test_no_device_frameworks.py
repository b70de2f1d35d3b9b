"""The framework layers on a host without an RDMA device (issue 39): hipobj.torch.dcp,
hipobj.safetensors and hipobj.fsspec on a Session opened without the RDMA runtime move the same
objects over plain HTTP through the engine, from and into the tensors' host memory, and every
item a reader lands, whole or a range of it, is checked against the writer's CRC64NVME (issue 55).

Runs on the host in its own process (`make frameworks`, before the lane) against hipobj-server
on loopback with RDMA off: libibverbs is pointed at an empty driver directory (IBV_CONFIG_DIR),
as test_no_device.py does, so it holds on a host that has a device too. The lane's framework run
leaves it out (tests/vm/frameworks). Needs torch, pandas and pyarrow: without them it fails."""

from __future__ import annotations

import logging

import no_rdma  # first, before anything loads libibverbs: no drivers, so no device

import json  # noqa: E402

import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.dataset as ds  # noqa: E402
import pyarrow.fs as pafs  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from safetensors.torch import load as st_load_torch  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402

import hipobj  # noqa: E402
import hipobj.safetensors  # noqa: E402
from hipobj.fsspec import HipObjFileSystem  # noqa: E402
from hipobj.torch.dcp import StorageReader, StorageWriter  # noqa: E402
from hipobj_server import IDENTITIES, Server, flip_on_disk  # noqa: E402
from test_dcp import (  # noqa: E402
    BOXES,
    STATE_BYTE_ITEMS,
    STATE_TENSORS,
    a_part_is_read_and_checked,
    a_rotten_byte_fails_the_reads_of_its_block,
    a_rotten_byte_item_fails_the_load,
    an_older_writers_checkpoint_loads_counted_unchecked,
    assert_equal,
    box_planner,
    cause,
    every_item_verified,
    state,
    zeroed,
)
from test_dcp_safetensors import (  # noqa: E402
    an_unfinished_save_is_no_checkpoint,
    ranks_save_and_everyone_reads,
    what_the_layout_cannot_hold_is_refused,
)
from test_fsspec import frame, parquet_bytes  # noqa: E402
from test_safetensors_save import (  # noqa: E402
    PICK,
    a_rotten_byte_fails_the_partial_load,
    another_writers_file_loads_counted_unchecked,
    changed_while_loading_is_caught,
    partial_load_checks_each_tensor,
    tensors,
    twenty,
    whole_object_checked,
)

MIB = 1 << 20
BUCKET = "nodev-frameworks"


@pytest.fixture(scope="module", autouse=True)
def no_rdma_device():
    return no_rdma.assert_no_rdma_device()


@pytest.fixture(scope="module")
def rdma_off_server():
    with no_rdma.rdma_off_server(BUCKET) as srv:
        yield srv


@pytest.fixture(scope="module")
def s3(rdma_off_server):
    return rdma_off_server.client()


@pytest.fixture(scope="module")
def plain_session():
    """A Session of transport "auto" on a host without an RDMA device: no RDMA runtime."""
    with hipobj.Session() as s:
        assert not s._rdma and s.transport == "auto"
        yield s


def nothing_by_rdma(session) -> int:
    """The HTTP transfers of the Session so far; fails if any copy went by RDMA."""
    stats = session.stats()
    assert stats["rdma"]["transfers"] == 0, stats
    return stats["http"]["transfers"]


def path(name: str) -> str:
    return f"s3://{BUCKET}/dcp/{name}"


def test_dcp_save_and_load_over_http(plain_session, s3):
    before = nothing_by_rdma(plain_session)
    want = state(11)
    writer = StorageWriter(s3, path("plain"), session=plain_session)
    dcp.save(want, storage_writer=writer)
    assert writer.copies and writer.copies[0].multipart  # 12 MiB: a multipart upload
    got = zeroed(want)
    reader = StorageReader(s3, path("plain"), session=plain_session)
    dcp.load(got, storage_reader=reader)
    assert_equal(got, want)
    # every item checked: each whole chunk by the engine as the bytes land, each byte item after
    every_item_verified(reader, STATE_TENSORS, STATE_BYTE_ITEMS)
    assert reader.stats["direct"] == 4 and reader.stats["check_gets"] == 0, reader.stats
    assert nothing_by_rdma(plain_session) > before


@pytest.mark.parametrize("offsets, lengths, how, extra, edges", BOXES)
def test_dcp_a_part_of_a_stored_tensor_over_http(plain_session, s3, offsets, lengths, how, extra, edges):
    """Rows land in the destination's memory, a column block or a small box through a host
    staging tensor; each read checked against the writer's CRC64NVME of its blocks."""
    a_part_is_read_and_checked(plain_session, s3, BUCKET, "part", offsets, lengths, how, extra, edges)


def test_dcp_a_rotten_byte_fails_the_ranged_reads_over_http(plain_session, rdma_off_server, s3):
    a_rotten_byte_fails_the_reads_of_its_block(plain_session, s3, BUCKET, rdma_off_server.data_dir, "rot")


def test_dcp_a_rotten_byte_item_fails_the_load_over_http(plain_session, rdma_off_server, s3):
    a_rotten_byte_item_fails_the_load(plain_session, s3, BUCKET, rdma_off_server.data_dir, "rot-bytes")


def test_dcp_an_older_writers_checkpoint_over_http(plain_session, s3):
    an_older_writers_checkpoint_loads_counted_unchecked(plain_session, s3, BUCKET, "older")


def test_dcp_torchs_own_checkpoint_loads_counted_unchecked(plain_session, s3, tmp_path):
    """A checkpoint of torch's FileSystemWriter (no CRC of ours), uploaded by boto3: it loads,
    every item counted unchecked, saying why."""
    want = state(16)
    dcp.save(want, storage_writer=dcp.FileSystemWriter(str(tmp_path)))
    for f in tmp_path.iterdir():
        s3.upload_file(str(f), BUCKET, f"dcp/torchs/{f.name}")
    got = zeroed(want)
    reader = StorageReader(s3, path("torchs"), session=plain_session)
    dcp.load(got, storage_reader=reader)
    assert_equal(got, want)
    assert (reader.stats["verified"], reader.stats["unchecked"]) == (0, STATE_TENSORS + STATE_BYTE_ITEMS), reader.stats
    assert reader.checks["model.big[0:2048, 0:1536]"] == "unchecked: a torch.save record of another writer: no CRC64NVME recorded"


def test_dcp_a_wrong_landing_is_read_once_more_over_http(monkeypatch, plain_session, s3):
    """A ranged read whose bytes land wrong once (a damaged copy on the way) is read again and
    passes, counted in ``retried``; wrong every time, it fails after the second read."""
    import hipobj.torch.dcp as hdcp

    want = state(17)
    dcp.save(want, storage_writer=StorageWriter(s3, path("again"), session=plain_session))
    real = hdcp.download_host
    landed = []

    def damaging(session, client, bucket, key, into, first, *args, times=1, **kwargs):
        done = real(session, client, bucket, key, into, first, *args, **kwargs)
        landed.append(into.nbytes)
        if into.nbytes == 1400 * 1536 * 4 and landed.count(into.nbytes) <= damage[0]:
            into[7] ^= 0x01  # the box's bytes, after the engine wrote them
        return done

    damage = [1]
    monkeypatch.setattr(hdcp, "download_host", damaging)
    planner = box_planner((100, 0), (1400, 1536))  # direct, with edges: checked by the reader
    reader = StorageReader(s3, path("again"), session=plain_session)
    dcp.load(zeroed(want), storage_reader=reader, planner=planner)
    assert torch.equal(planner.box, want["model"]["big"][100:1500])
    assert reader.stats["retried"] == 1 and reader.stats["unchecked"] == 0, reader.stats
    assert landed.count(1400 * 1536 * 4) == 2
    landed.clear()
    damage[0] = 2
    with pytest.raises(CheckpointException) as failed:
        reader = StorageReader(s3, path("again"), session=plain_session)
        dcp.load(zeroed(want), storage_reader=reader, planner=box_planner((100, 0), (1400, 1536)))
    assert isinstance(cause(failed), hipobj.ChecksumMismatchError) and "(read twice)" in str(cause(failed))
    assert landed.count(1400 * 1536 * 4) == 2, landed


def test_dcp_a_changed_byte_is_caught_over_http(plain_session, s3):
    want = state(13)
    dcp.save(want, storage_writer=StorageWriter(s3, path("bad"), session=plain_session))
    key = "dcp/bad/__0_0.distcp"
    blob = bytearray(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    blob[len(blob) // 2] ^= 0x40  # inside "model.big"'s bytes; stored again, with its own new checksum
    s3.put_object(Bucket=BUCKET, Key=key, Body=bytes(blob))
    with pytest.raises(CheckpointException) as failed:
        dcp.load(zeroed(want), storage_reader=StorageReader(s3, path("bad"), session=plain_session))
    err = cause(failed)
    assert isinstance(err, hipobj.ChecksumMismatchError), repr(err)
    assert "CRC64NVME of what landed" in str(err) and "(read twice)" in str(err)
    assert f"s3://{BUCKET}/{key}" in str(err) and str(err).startswith("model.big[0:2048, 0:1536]: "), str(err)


def test_safetensors_three_shards_and_an_index_over_http(plain_session, s3):
    before = nothing_by_rdma(plain_session)
    ts = tensors()
    saved = hipobj.safetensors.save(
        s3, BUCKET, "st/model.safetensors", ts, metadata={"format": "pt"}, max_shard_size=6 * MIB, session=plain_session
    )
    assert saved["keys"] == [f"st/model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert saved["index"] == "st/model.safetensors.index.json"
    assert any(c.multipart for c in saved["copies"])
    index = json.loads(s3.get_object(Bucket=BUCKET, Key=saved["index"])["Body"].read())
    assert set(index["weight_map"]) == set(ts)
    back = {}
    for key in saved["keys"]:  # the safetensors package reads what went over HTTP
        back.update(st_load_torch(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()))
    checks = {}
    loaded = hipobj.safetensors.load(s3, BUCKET, saved["index"], device="cpu", session=plain_session, checks=checks)
    for name, t in ts.items():
        assert back[name].dtype == t.dtype and torch.equal(back[name], t), name
        assert loaded[name].dtype == t.dtype and torch.equal(loaded[name], t), name
    assert checks == {key: "CRC64NVME verified" for key in saved["keys"]}, checks
    assert nothing_by_rdma(plain_session) > before


def test_safetensors_load_checks_the_whole_object_over_http(plain_session, s3):
    ts = tensors()
    hipobj.safetensors.save(s3, BUCKET, "st/crc.safetensors", ts, session=plain_session)
    loaded = whole_object_checked(plain_session, s3, BUCKET, "st/crc.safetensors")
    for name, t in ts.items():
        assert torch.equal(loaded[name], t), name


def test_safetensors_object_changed_while_loading_over_http(monkeypatch, plain_session, s3):
    hipobj.safetensors.save(s3, BUCKET, "st/changed.safetensors", tensors(), session=plain_session)
    changed_while_loading_is_caught(monkeypatch, plain_session, s3, BUCKET, "st/changed.safetensors")


def test_safetensors_a_partial_load_checks_each_tensor_over_http(plain_session, s3):
    partial_load_checks_each_tensor(plain_session, s3, BUCKET, "st/twenty.safetensors")


def test_safetensors_a_rotten_byte_fails_the_partial_load_over_http(plain_session, rdma_off_server, s3):
    a_rotten_byte_fails_the_partial_load(plain_session, s3, BUCKET, "st/twenty-rot.safetensors", rdma_off_server.data_dir)


def test_safetensors_another_writers_file_over_http(plain_session, s3):
    another_writers_file_loads_counted_unchecked(plain_session, s3, BUCKET, "st/theirs.safetensors")


def test_safetensors_a_store_without_checksums_gets_each_tensor_checked_over_http(plain_session, s3):
    """A store that keeps no checksum of the object (hipobj-server --default-checksum none, the
    file uploaded without one): a whole load checks each tensor against the writer's CRC64NVME
    in the file instead; a byte rotten on that store's disk fails it naming the tensor."""
    from botocore.config import Config

    import boto3

    hipobj.safetensors.save(s3, BUCKET, "st/bare.safetensors", twenty(), session=plain_session)
    blob = s3.get_object(Bucket=BUCKET, Key="st/bare.safetensors")["Body"].read()
    bare = Server(None, "127.0.0.1", ["--default-checksum", "none"])
    try:
        access, secret = IDENTITIES[0]
        plain = boto3.client(
            "s3", endpoint_url=bare.endpoint, aws_access_key_id=access, aws_secret_access_key=secret, region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required"),
        )
        plain.create_bucket(Bucket=BUCKET)
        plain.put_object(Bucket=BUCKET, Key="bare.safetensors", Body=blob)
        stats, checks = {}, {}
        loaded = hipobj.safetensors.load(
            plain, BUCKET, "bare.safetensors", device="cpu", session=plain_session, checks=checks, stats=stats
        )
        for name, t in twenty().items():
            assert torch.equal(loaded[name], t), name
        assert checks == {"bare.safetensors": "CRC64NVME verified per tensor (the writer's CRC of each)"}, checks
        assert (stats["verified"], stats["unchecked"]) == (20, 0), stats
        assert set(stats["verdicts"].values()) == {"CRC64NVME verified (the writer's CRC of this tensor)"}
        header, data_start = hipobj.safetensors.read_header(plain, BUCKET, "bare.safetensors")
        begin, end = header[PICK[0]]["data_offsets"]
        flip_on_disk(bare.data_dir, BUCKET, "bare.safetensors", data_start + begin + 3)
        with pytest.raises(hipobj.ChecksumMismatchError) as e:
            hipobj.safetensors.load(plain, BUCKET, "bare.safetensors", device="cpu", session=plain_session)
        assert f"tensor {PICK[0]!r}" in str(e.value) and "(read twice)" in str(e.value), str(e.value)
        assert e.value.algorithm == "CRC64NVME" and e.value.expected != e.value.actual
    finally:
        bare.stop()


def test_dcp_safetensors_layout_two_ranks_over_http(plain_session, s3):
    before = nothing_by_rdma(plain_session)
    ranks_save_and_everyone_reads(plain_session, s3, BUCKET, "dcp-st/two")
    assert nothing_by_rdma(plain_session) > before


def test_dcp_safetensors_layout_unfinished_save_over_http(plain_session, s3):
    an_unfinished_save_is_no_checkpoint(plain_session, s3, BUCKET, "dcp-st/unfinished")


def test_dcp_safetensors_layout_refusals_over_http(plain_session, s3):
    what_the_layout_cannot_hold_is_refused(plain_session, s3, BUCKET, "dcp-st/refused")


def test_fsspec_pandas_and_pyarrow_over_http(plain_session, rdma_off_server, s3):
    df = frame(300_000, 21)  # about 9 MiB of parquet: its column chunks come through the engine
    blob = parquet_bytes(df)
    s3.put_object(Bucket=BUCKET, Key="fs/a.parquet", Body=blob)
    fs = HipObjFileSystem(client=s3, session=plain_session)
    assert fs.cat_file(f"{BUCKET}/fs/a.parquet") == blob
    access, secret = IDENTITIES[0]
    options = {"endpoint_url": rdma_off_server.endpoint, "key": access, "secret": secret, "session": plain_session}
    pd.testing.assert_frame_equal(pd.read_parquet(f"hipobj://{BUCKET}/fs/a.parquet", storage_options=options), df)
    parts = [frame(120_000, s, first=s * 1_000_000) for s in (22, 23)]
    for i, part in enumerate(parts):
        with fs.open(f"{BUCKET}/fs/ds/part-{i}.parquet", "wb") as f:
            part.to_parquet(f, engine="pyarrow", compression=None)
    arrow_fs = pafs.PyFileSystem(pafs.FSSpecHandler(fs))
    table = ds.dataset(f"{BUCKET}/fs/ds", filesystem=arrow_fs, format="parquet").to_table()
    want = pa.Table.from_pandas(pd.concat(parts, ignore_index=True), preserve_index=False)
    assert table.sort_by("id").equals(want.sort_by("id"))
    assert fs.moved["rdma"] == 0 and fs.moved["http"] >= len(blob), fs.moved
    # cat_file of the whole object checked; pyarrow's ranged reads counted unchecked, saying so
    assert fs.checked["verified"] >= 1 and fs.checked["unchecked"] >= 1, fs.checked
    assert set(fs.checked["by_verdict"]) <= {"CRC32 verified", "CRC64NVME verified", RANGE}, fs.checked
    nothing_by_rdma(plain_session)


RANGE = "unchecked: a range of the object (its checksum is of the whole)"


def test_fsspec_reads_say_what_was_checked(plain_session, rdma_off_server, s3, tmp_path):
    """A read of a whole object (cat_file, get_file, a small file fsspec fetches at once) is
    checked against the stored checksum; a range is counted unchecked; a byte rotten on the
    server's disk fails a whole read after reading twice."""
    fs = HipObjFileSystem(client=s3, session=plain_session)
    fs.pipe_file(f"{BUCKET}/fs/checked", bytes(range(256)) * 40)  # stored with our CRC64NVME
    assert fs.cat_file(f"{BUCKET}/fs/checked") == bytes(range(256)) * 40
    assert fs.cat_file(f"{BUCKET}/fs/checked", start=5, end=9) == bytes(range(5, 9))
    with fs.open(f"{BUCKET}/fs/checked", "rb") as f:  # 10 KiB: fsspec fetches it whole
        assert f.read() == bytes(range(256)) * 40
    fs.get_file(f"{BUCKET}/fs/checked", str(tmp_path / "checked"))
    assert fs.checked == {"verified": 3, "unchecked": 1, "by_verdict": {"CRC64NVME verified": 3, RANGE: 1}}, fs.checked
    flip_on_disk(rdma_off_server.data_dir, BUCKET, "fs/checked", 5000)
    with pytest.raises(hipobj.ChecksumMismatchError, match=f"^s3://{BUCKET}/fs/checked: .*read twice.*CRC64NVME mismatch") as e:
        fs.cat_file(f"{BUCKET}/fs/checked")
    assert e.value.algorithm == "CRC64NVME" and e.value.expected != e.value.actual


def test_fsspec_copies_are_the_decisions(plain_session, s3):
    """Every fsspec read and write, small or large, is a copy the Session's decision picked and
    recorded: the Session's counters grow by each one, and a filesystem of transport "rdma" is
    refused by the decision (no RDMA device here) instead of slipping over HTTP."""
    fs = HipObjFileSystem(client=s3, session=plain_session)
    big = bytes(range(256)) * (12 * MIB // 256)
    before = plain_session.stats()["http"]
    fs.pipe_file(f"{BUCKET}/fs/small", b"0123456789" * 100)  # 1000 bytes
    fs.pipe_file(f"{BUCKET}/fs/big", big)  # 12 MiB: a multipart upload
    assert fs.cat_file(f"{BUCKET}/fs/small", start=10, end=30) == b"01234567890123456789"
    assert fs.cat_file(f"{BUCKET}/fs/big") == big
    after = plain_session.stats()["http"]
    assert after["transfers"] - before["transfers"] == 4, (before, after)
    assert after["bytes"] - before["bytes"] == 1000 + 20 + 2 * len(big), (before, after)
    reason = after["by_reason"]["no RDMA device"] - before["by_reason"].get("no RDMA device", 0)
    assert reason == 4, (before, after)
    assert fs.moved == {"rdma": 0, "http": 1000 + 20 + 2 * len(big)}
    forced = HipObjFileSystem(client=s3, session=plain_session, transport="rdma")
    with pytest.raises(hipobj.NicNotFoundError, match="transport='rdma' needs an RDMA device"):
        forced.cat_file(f"{BUCKET}/fs/small", start=10, end=30)
    with pytest.raises(hipobj.NicNotFoundError):
        forced.pipe_file(f"{BUCKET}/fs/other", b"x" * 10)
    assert plain_session.stats()["http"] == after
    with pytest.raises(hipobj.InvalidValueError):
        HipObjFileSystem(client=s3, session=plain_session, transport="sometimes")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA/ROCm device: device tensors need one")
def test_device_tensors_go_through_host_copies(plain_session, s3, caplog):
    caplog.set_level(logging.INFO, logger="hipobj")
    want = {k: v.to("cuda") for k, v in state(14)["model"].items()}
    dcp.save(want, storage_writer=StorageWriter(s3, path("device"), session=plain_session))
    got = {k: torch.zeros_like(v) for k, v in want.items()}
    reader = StorageReader(s3, path("device"), session=plain_session)
    dcp.load(got, storage_reader=reader)
    for k, v in want.items():
        assert got[k].device == v.device and torch.equal(got[k], v), k
    assert reader.stats["verified"] == 4
    saved = hipobj.safetensors.save(s3, BUCKET, "st/device.safetensors", want, session=plain_session)
    loaded = hipobj.safetensors.load(s3, BUCKET, saved["keys"][0], device="cuda", session=plain_session)
    for k, v in want.items():
        assert loaded[k].device.type == "cuda" and torch.equal(loaded[k], v), k
    assert any("staged through host memory" in r.getMessage() for r in caplog.records if r.name == "hipobj")
