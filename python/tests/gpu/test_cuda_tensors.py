"""Issue 38 on a GPU host without an RDMA NIC (the project's NVIDIA device machine): CUDA tensors
through hipobj.torch.dcp and hipobj.safetensors. The Session opens without RDMA (no device: the
bytes move over plain HTTP, said once) and stages device memory through host copies; every
tensor must come back equal, on the GPU, and the reader's CRC64NVME check stays on. Fails, not
skips, without CUDA. python/tests/gpu/run-on-device runs it (hipobj-server on loopback, RDMA off)."""

from __future__ import annotations

import no_rdma  # noqa: F401  (first: this host has no RDMA NIC; the same holds on one that has)
import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

import hipobj
import hipobj.safetensors as hst
from hipobj.torch.dcp import StorageReader, StorageWriter

BUCKET = "gpu"


@pytest.fixture(scope="module")
def client():
    with no_rdma.rdma_off_server(BUCKET) as srv:
        yield srv.client()


@pytest.fixture(scope="module")
def session():
    assert torch.cuda.is_available(), "this test needs a CUDA GPU"
    with hipobj.Session() as s:  # no RDMA NIC here: auto moves the bytes over plain HTTP
        yield s


def state(seed: int, device: str) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "model": {
            "big": torch.randn(2048, 1536, generator=g).to(device),  # 12 MiB: a multipart object
            "w": torch.randn(64, 48, generator=g).to(torch.bfloat16).to(device),
            "b": torch.randn(48, generator=g).to(device),
            "count": torch.tensor(41, dtype=torch.int64),
        },
        "step": 7,
    }


def zeroed(s: dict) -> dict:
    return {k: zeroed(v) if isinstance(v, dict) else (torch.zeros_like(v) if isinstance(v, torch.Tensor) else None)
            for k, v in s.items()}


def assert_equal(got: dict, want: dict) -> None:
    for k, v in want.items():
        if isinstance(v, dict):
            assert_equal(got[k], v)
        elif isinstance(v, torch.Tensor):
            assert got[k].device == v.device, k
            assert torch.equal(got[k], v), k
        else:
            assert got[k] == v, k


def test_dcp_save_and_load_cuda_tensors(session, client):
    want = state(1, "cuda")
    where = f"s3://{BUCKET}/dcp/cuda"
    dcp.save(want, storage_writer=StorageWriter(client, where, session=session))
    got = zeroed(want)
    got["step"] = 0
    reader = StorageReader(client, where, session=session)
    dcp.load(got, storage_reader=reader)
    assert_equal(got, want)
    assert reader.stats["verified"] >= 3, reader.stats
    assert session.stats()["http"]["bytes"] > 12 << 20, session.stats()


def test_dcp_a_changed_byte_is_caught_on_cuda(session, client):
    want = state(2, "cuda")
    where = f"s3://{BUCKET}/dcp/bad"
    dcp.save(want, storage_writer=StorageWriter(client, where, session=session))
    key = "dcp/bad/__0_0.distcp"
    blob = bytearray(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    blob[len(blob) // 2] ^= 0x40
    client.put_object(Bucket=BUCKET, Key=key, Body=bytes(blob))
    with pytest.raises(CheckpointException) as failed:
        dcp.load(zeroed(want), storage_reader=StorageReader(client, where, session=session))
    cause = next(iter(failed.value.failures.values()))[0]
    assert isinstance(cause, hipobj.ChecksumMismatchError), repr(cause)


def test_safetensors_save_sharded_and_load_to_cuda(session, client):
    g = torch.Generator().manual_seed(3)
    tensors = {f"layer{i}.weight": torch.randn(256, 1024 + i, generator=g).to("cuda") for i in range(6)}
    tensors["embed"] = torch.randn(4000, 512, generator=g).to(torch.float16).to("cuda")
    hst.save(client, BUCKET, "st/model.safetensors", tensors, max_shard_size=4 << 20, session=session)
    index = client.get_object(Bucket=BUCKET, Key="st/model.safetensors.index.json")["Body"].read()
    assert b"weight_map" in index
    got = hst.load(client, BUCKET, "st/model.safetensors.index.json", device="cuda", session=session)
    assert set(got) == set(tensors)
    for name, t in tensors.items():
        assert got[name].device.type == "cuda", name
        assert torch.equal(got[name], t), name
