"""hipobj.torch.dcp (issue 38): torch.distributed.checkpoint through our StorageWriter and
StorageReader over RDMA, without a process group here and with torchrun's 2 ranks in
test_torchrun.py; torch's own reader family (s3torchconnector's) reads what we wrote."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

import hipobj
from hipobj.torch.dcp import StorageReader, StorageWriter

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
    assert reader.stats["verified"] == 4 and reader.stats["direct"] == 4  # every whole chunk checked


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


@pytest.mark.parametrize(
    "offsets, lengths, how",
    [((100, 0), (200, 1536), "direct"), ((0, 100), (2048, 200), "staged"), ((7, 3), (1, 5), "direct")],
)
def test_a_part_of_a_stored_tensor_reads_that_part(session, client, bucket, offsets, lengths, how):
    """A destination that asks a box of a stored tensor (DCP's resharding) gets exactly it: rows
    land in place, a column block through a staging buffer."""
    want = state(2)
    where = path(bucket, "part")
    dcp.save(want, storage_writer=StorageWriter(client, where, session=session))
    planner = box_planner(offsets, lengths)
    reader = StorageReader(client, where, session=session)
    dcp.load(zeroed(want), storage_reader=reader, planner=planner)
    (r, c), (nr, nc) = offsets, lengths
    assert torch.equal(planner.box, want["model"]["big"][r : r + nr, c : c + nc])
    assert reader.stats[how] >= 1 and reader.stats["unchecked"] >= 1


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
