"""hipobj.torch.dcp (issue 38): torch.distributed.checkpoint through our StorageWriter and
StorageReader over RDMA, without a process group here and with torchrun's 2 ranks in
test_torchrun.py; torch's own reader family (s3torchconnector's) reads what we wrote. Every item
a load reads, whole or a part of a stored tensor, is checked against the writer's CRC64NVME
(issue 55); the helpers here run over plain HTTP too (test_no_device_frameworks.py)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

import hipobj
from hipobj.torch.dcp import StorageReader, StorageWriter
from hipobj_server import flip_on_disk

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def state(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "model": {
            "big": torch.randn(2048, 1536, generator=g),  # 12 MiB: a multipart object, parts straight from it
            "w": torch.randn(64, 48, generator=g).to(torch.bfloat16),
            "b": torch.randn(48, generator=g),
            "empty": torch.zeros(0, 5),
            "count": torch.tensor(41, dtype=torch.int64),
        },
        "extra": {"epoch": 3, "name": "run-7", "lrs": [0.1, 0.01]},
    }


def zeroed(s: dict) -> dict:
    out = {}
    for k, v in s.items():
        if isinstance(v, dict):
            out[k] = zeroed(v)
        elif isinstance(v, torch.Tensor):
            out[k] = torch.zeros_like(v)
        else:
            out[k] = None
    return out


def assert_equal(got: dict, want: dict) -> None:
    for k, v in want.items():
        if isinstance(v, dict):
            assert_equal(got[k], v)
        elif isinstance(v, torch.Tensor):
            assert got[k].dtype == v.dtype and torch.equal(got[k], v), k
        else:
            assert got[k] == v, k


# What state() saves and a whole load reads: tensors with bytes ("big", "w", "b", "count"; DCP
# asks nothing of "empty") and byte items ("extra"'s epoch, name and lrs).
STATE_TENSORS, STATE_BYTE_ITEMS = 4, 3


def every_item_verified(reader, tensors: int, byte_items: int = 0) -> None:
    """The reader's counters: each item it read checked against the writer's CRC64NVME."""
    stats = reader.stats
    assert stats["unchecked"] == 0, (stats, reader.checks)
    assert (stats["tensors"], stats["byte_items"], stats["verified"]) == (tensors, byte_items, tensors + byte_items), stats
    assert len(reader.checks) == tensors + byte_items, reader.checks
    assert all(v == "CRC64NVME verified" for v in reader.checks.values()), reader.checks


def stored_record(client, bucket: str, prefix: str, fqn: str):
    """What the writer recorded of the tensor `fqn` (its storage info's ``hipobj``), from the
    checkpoint's metadata under `prefix`."""
    metadata = pickle.loads(client.get_object(Bucket=bucket, Key=f"{prefix}.metadata")["Body"].read())
    [info] = [info for index, info in metadata.storage_data.items() if index.fqn == fqn]
    return info, metadata


def cause(excinfo) -> BaseException:
    """The exception a rank raised inside dcp.save/load (DCP wraps it in a CheckpointException)."""
    return next(iter(excinfo.value.failures.values()))[0]


def path(bucket: str, name: str) -> str:
    return f"s3://{bucket}/dcp/{name}"


def test_save_and_load_without_a_process_group(session, client, bucket):
    want = state(1)
    writer = StorageWriter(client, path(bucket, "plain"), session=session)
    dcp.save(want, storage_writer=writer)
    assert writer.copies and writer.copies[0].multipart  # one object, uploaded from the tensors
    got = zeroed(want)
    reader = StorageReader(client, path(bucket, "plain"), session=session)
    dcp.load(got, storage_reader=reader)
    assert_equal(got, want)
    every_item_verified(reader, STATE_TENSORS, STATE_BYTE_ITEMS)
    assert reader.stats["direct"] == 4 and reader.stats["check_gets"] == 0  # whole chunks: no edge


def box_planner(offsets, lengths):
    """A load planner that asks only the box `offsets` + `lengths` of "model.big" (DCP's
    resharding does so), into its own tensor ``planner.box``."""
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    class Box(DefaultLoadPlanner):
        def create_local_plan(self):
            plan = super().create_local_plan()
            items = [
                type(i)(i.type, i.dest_index, torch.Size([0, 0]), i.storage_index, torch.Size(offsets), torch.Size(lengths))
                if i.dest_index.fqn == "model.big"
                else i
                for i in plan.items
            ]
            return type(plan)(items, plan.storage_data, plan.planner_data)

        def resolve_tensor(self, read_item):
            if read_item.dest_index.fqn == "model.big":
                return self.box
            return super().resolve_tensor(read_item)

    planner = Box()
    planner.box = torch.zeros(*lengths)
    return planner


# (offsets, lengths) of a box of "model.big" (2048 x 1536 float32, 6144 bytes a row, 12 CRC blocks
# of 1 MiB), how it moves, and what its check reads beside it (bytes, edge GETs)
BOXES = [
    # rows 100..1500: bytes 614400..9216000, checked with the blocks 0..8 (9 MiB: more than one
    # 8 MiB part), straight into the destination, the blocks' bytes before and after it read too
    ((100, 0), (1400, 1536), "direct", 614400 + (9437184 - 9216000), 2),
    # rows 100..300: its blocks 0..1 fit in one part: staged as those blocks, no edge GET
    ((100, 0), (200, 1536), "staged", 2097152 - 1228800, 0),
    # columns 100..300 of every row: the span of nearly the whole tensor, staged whole
    ((0, 100), (2048, 200), "staged", 100 * 4 + 1236 * 4, 0),
    # 5 elements inside the first block: that block staged
    ((7, 3), (1, 5), "staged", 1048576 - 20, 0),
    # rows 512..1024: exactly the blocks 3..5, straight into the destination, nothing beside it
    ((512, 0), (512, 1536), "direct", 0, 0),
]


def a_part_is_read_and_checked(session, client, bucket: str, name: str, offsets, lengths, how, extra, edges) -> None:
    """A destination that asks a box of a stored tensor (DCP's resharding) gets exactly it (rows
    in place, a column block or a small box through a staging buffer), and the read is checked
    against the writer's CRC64NVME of the blocks covering it, like every other item."""
    want = state(2)
    where = path(bucket, name)
    dcp.save(want, storage_writer=StorageWriter(client, where, session=session))
    planner = box_planner(offsets, lengths)
    reader = StorageReader(client, where, session=session)
    dcp.load(zeroed(want), storage_reader=reader, planner=planner)
    (r, c), (nr, nc) = offsets, lengths
    assert torch.equal(planner.box, want["model"]["big"][r : r + nr, c : c + nc])
    every_item_verified(reader, STATE_TENSORS, STATE_BYTE_ITEMS)
    assert reader.stats[how] >= 1, reader.stats
    assert reader.checks[f"model.big[{r}:{r + nr}, {c}:{c + nc}]"] == "CRC64NVME verified", reader.checks
    assert (reader.stats["check_bytes"], reader.stats["check_gets"]) == (extra, edges), reader.stats


@pytest.mark.parametrize("offsets, lengths, how, extra, edges", BOXES)
def test_a_part_of_a_stored_tensor_reads_that_part(session, client, bucket, offsets, lengths, how, extra, edges):
    a_part_is_read_and_checked(session, client, bucket, "part", offsets, lengths, how, extra, edges)


def a_rotten_byte_fails_the_reads_of_its_block(session, client, bucket: str, data_dir, name: str) -> None:
    """A byte changed on the server's disk inside "model.big": a ranged read whose blocks hold it,
    in place or staged, fails naming the box, the algorithm and both values (read twice), and a
    staged destination is left as it was; a read of other blocks of that tensor, and the other
    items, load verified."""
    want = state(21)
    where = path(bucket, name)
    dcp.save(want, storage_writer=StorageWriter(client, where, session=session))
    info, _ = stored_record(client, bucket, f"dcp/{name}/", "model.big")
    row = 1536 * 4
    flip_on_disk(data_dir, bucket, f"dcp/{name}/{info.relative_path}", info.hipobj["data"] + 150 * row + 8)
    boxes = [((100, 0), (1400, 1536), "direct"), ((100, 0), (200, 1536), "staged"), ((0, 0), (2048, 4), "staged")]
    for offsets, lengths, how in boxes:
        planner = box_planner(offsets, lengths)
        reader = StorageReader(client, where, session=session)
        with pytest.raises(CheckpointException) as failed:
            dcp.load(zeroed(want), storage_reader=reader, planner=planner)
        err = cause(failed)
        (r, c), (nr, nc) = offsets, lengths
        assert isinstance(err, hipobj.ChecksumMismatchError), repr(err)
        assert f"model.big[{r}:{r + nr}, {c}:{c + nc}]" in str(err) and "(read twice)" in str(err), str(err)
        assert err.algorithm == "CRC64NVME" and err.expected != err.actual, (err.expected, err.actual)
        assert f"CRC64NVME of what landed is {err.actual}, the writer's is {err.expected}" in str(err), str(err)
        assert reader.stats[how] >= 1, reader.stats
        if how == "staged":  # checked before the copy: the destination never saw the bytes
            assert not planner.box.any()
    planner = box_planner((1000, 0), (200, 1536))  # the blocks 5..7, not the changed one
    reader = StorageReader(client, where, session=session)
    dcp.load(zeroed(want), storage_reader=reader, planner=planner)
    assert torch.equal(planner.box, want["model"]["big"][1000:1200])
    every_item_verified(reader, STATE_TENSORS, STATE_BYTE_ITEMS)


def test_a_rotten_byte_fails_the_reads_of_its_block(session, client, bucket, server):
    a_rotten_byte_fails_the_reads_of_its_block(session, client, bucket, server.data_dir, "rot")


def a_rotten_byte_item_fails_the_load(session, client, bucket: str, data_dir, name: str) -> None:
    """A byte changed on the server's disk inside a byte item ("extra.name"): the load fails
    naming it, read twice."""
    want = state(22)
    where = path(bucket, name)
    dcp.save(want, storage_writer=StorageWriter(client, where, session=session))
    info, _ = stored_record(client, bucket, f"dcp/{name}/", "extra.name")
    flip_on_disk(data_dir, bucket, f"dcp/{name}/{info.relative_path}", info.offset + info.length // 2)
    with pytest.raises(CheckpointException) as failed:
        dcp.load(zeroed(want), storage_reader=StorageReader(client, where, session=session))
    err = cause(failed)
    assert isinstance(err, hipobj.ChecksumMismatchError), repr(err)
    assert str(err).startswith("extra.name: ") and "(read twice)" in str(err), str(err)
    assert err.expected != err.actual and err.expected in str(err) and err.actual in str(err)


def test_a_rotten_byte_item_fails_the_load(session, client, bucket, server):
    a_rotten_byte_item_fails_the_load(session, client, bucket, server.data_dir, "rot-bytes")


def an_older_writers_checkpoint_loads_counted_unchecked(session, client, bucket: str, name: str) -> None:
    """A checkpoint of hipObject's writer before block CRCs (each tensor's whole CRC64NVME only, no
    CRC of byte items): whole tensors load verified, a part of one and the byte items unchecked,
    each counted and saying why."""
    want = state(23)
    where = path(bucket, name)
    dcp.save(want, storage_writer=StorageWriter(client, where, session=session))
    _, metadata = stored_record(client, bucket, f"dcp/{name}/", "model.big")
    for info in metadata.storage_data.values():
        record = info.__dict__.pop("hipobj")
        if "data" in record:  # a tensor record: what the older writer kept
            info.hipobj = {k: record[k] for k in ("data", "shape", "dtype", "CRC64NVME") if k in record}
    client.put_object(Bucket=bucket, Key=f"dcp/{name}/.metadata", Body=pickle.dumps(metadata))
    planner = box_planner((100, 0), (200, 1536))
    reader = StorageReader(client, where, session=session)
    dcp.load(zeroed(want), storage_reader=reader, planner=planner)
    assert torch.equal(planner.box, want["model"]["big"][100:300])
    assert (reader.stats["verified"], reader.stats["unchecked"]) == (3, 1 + STATE_BYTE_ITEMS), reader.stats
    assert reader.checks["model.big[100:300, 0:1536]"].startswith("unchecked: a part of an item whose writer"), reader.checks
    assert reader.checks["extra.epoch"] == "unchecked: the writer recorded no CRC64NVME of this item", reader.checks


def test_an_older_writers_checkpoint_loads_counted_unchecked(session, client, bucket):
    an_older_writers_checkpoint_loads_counted_unchecked(session, client, bucket, "older")


def test_a_changed_byte_is_caught(session, client, bucket):
    want = state(3)
    dcp.save(want, storage_writer=StorageWriter(client, path(bucket, "bad"), session=session))
    key = "dcp/bad/__0_0.distcp"
    blob = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    blob[len(blob) // 2] ^= 0x40  # inside "model.big"'s bytes
    client.put_object(Bucket=bucket, Key=key, Body=bytes(blob))
    with pytest.raises(CheckpointException) as failed:
        dcp.load(zeroed(want), storage_reader=StorageReader(client, path(bucket, "bad"), session=session))
    assert isinstance(cause(failed), hipobj.ChecksumMismatchError)
    assert "CRC64NVME of what landed" in str(cause(failed)) and "(read twice)" in str(cause(failed))


def test_a_save_killed_before_its_metadata_leaves_no_checkpoint(session, server, devices, client, bucket):
    want = state(4)
    dcp.save(want, storage_writer=StorageWriter(client, path(bucket, "killed"), session=session))
    dcp.load(zeroed(want), storage_reader=StorageReader(client, path(bucket, "killed"), session=session))
    from hipobj_server import IDENTITIES

    script = textwrap.dedent(
        f"""
        import os, sys, torch, boto3
        import torch.distributed.checkpoint as dcp
        from botocore.config import Config
        import hipobj
        from hipobj.torch.dcp import StorageWriter

        class Dies(StorageWriter):
            def finish(self, metadata, results):
                os._exit(9)  # the process dies after every rank wrote its data, before the metadata

        s3 = boto3.client("s3", endpoint_url={server.endpoint!r}, aws_access_key_id={IDENTITIES[0][0]!r},
                          aws_secret_access_key={IDENTITIES[0][1]!r}, region_name="us-east-1",
                          config=Config(s3={{"addressing_style": "path"}}))
        with hipobj.Session(nic={devices[0]!r}):
            dcp.save({{"model": {{"w": torch.ones(1000, 1000)}}}}, storage_writer=Dies(s3, {path(bucket, "killed")!r}))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 9, done.stderr[-2000:]
    listed = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="dcp/killed/")["Contents"]]
    assert "dcp/killed/__0_0.distcp" in listed and "dcp/killed/.metadata" not in listed
    with pytest.raises(CheckpointException) as failed:
        dcp.load(zeroed(want), storage_reader=StorageReader(client, path(bucket, "killed"), session=session))
    assert "no checkpoint at s3://" in str(cause(failed))


def s3torch_fs(server):
    from s3torchconnector import S3ClientConfig
    from s3torchconnector._s3client import S3Client
    from s3torchconnector.dcp.s3_file_system import S3FileSystem

    config = S3ClientConfig(force_path_style=True)
    return S3FileSystem("us-east-1", s3_client=S3Client("us-east-1", endpoint=server.endpoint, s3client_config=config))


@pytest.fixture
def aws_credentials(monkeypatch):
    from hipobj_server import IDENTITIES

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", IDENTITIES[0][0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", IDENTITIES[0][1])


def test_s3torchconnector_reads_our_checkpoint_over_http(aws_credentials, session, server, client, bucket):
    from s3torchconnector.dcp import S3StorageReader

    want = state(5)
    dcp.save(want, storage_writer=StorageWriter(client, path(bucket, "theirs-read"), session=session))
    reader = S3StorageReader("us-east-1", path(bucket, "theirs-read"))
    reader.fs = s3torch_fs(server)
    reader.path = reader.fs.init_path(path(bucket, "theirs-read"))
    got = zeroed(want)
    dcp.load(got, storage_reader=reader)
    assert_equal(got, want)


def test_we_read_s3torchconnectors_checkpoint(aws_credentials, session, server, client, bucket):
    from s3torchconnector.dcp import S3StorageWriter

    want = state(6)
    writer = S3StorageWriter("us-east-1", path(bucket, "theirs-written"))
    writer.fs = s3torch_fs(server)
    writer.path = writer.fs.init_path(path(bucket, "theirs-written"))
    dcp.save(want, storage_writer=writer)
    got = zeroed(want)
    reader = StorageReader(client, path(bucket, "theirs-written"), session=session)
    dcp.load(got, storage_reader=reader)
    assert_equal(got, want)
    assert reader.stats["direct"] == 0  # torch.save records: deserialised, as torch's reader does
    # no CRC of ours in their checkpoint: every item read, and counted, unchecked
    assert (reader.stats["verified"], reader.stats["unchecked"]) == (0, STATE_TENSORS + STATE_BYTE_ITEMS), reader.stats


def test_rdma_off_moves_the_same_checkpoint_over_http(session, client, bucket):
    """TransferConfig(transport="http"): the same writer and reader, no token sent (the
    benchmark's "RDMA turned off" baseline)."""
    tokens = []
    client.meta.events.register("before-send.s3", lambda request, **_: tokens.append("x-amz-rdma-token" in request.headers))
    want = state(7)
    http = hipobj.TransferConfig(transport="http")
    dcp.save(want, storage_writer=StorageWriter(client, path(bucket, "http"), session=session, config=http))
    got = zeroed(want)
    dcp.load(got, storage_reader=StorageReader(client, path(bucket, "http"), session=session, config=http))
    assert_equal(got, want)
    assert tokens and not any(tokens)
    tokens.clear()
    dcp.load(zeroed(want), storage_reader=StorageReader(client, path(bucket, "http"), session=session))
    assert any(tokens)  # the default moves the bytes by RDMA
