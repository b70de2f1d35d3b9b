"""hipobj.torch.dcp in the Hugging Face safetensors layout (issue 38): two ranks save through
SafetensorsStorageWriter (dcp.save's steps run for each rank in this one process, as DCP runs
them on each rank, the coordinator rank 0: no process group, no second torch process), and the
checkpoint is one safetensors file per rank plus model.safetensors.index.json, written last.
The safetensors package reads each file, hipobj.safetensors.load the index, and DCP loads it back
through SafetensorsStorageReader. test_no_device_frameworks.py runs the same over plain HTTP."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load as st_load_torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties
from torch.distributed.checkpoint.planner import SavePlan, TensorWriteData, WriteItem, WriteItemType

import hipobj
import hipobj.safetensors
from hipobj.torch.dcp import SafetensorsStorageReader, SafetensorsStorageWriter
from test_dcp import assert_equal, box_planner, cause, zeroed

INDEX = "model.safetensors.index.json"
DTYPES = [
    torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64,
    torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
]


def _tensor(g: torch.Generator, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    low = 0 if dtype == torch.uint8 else -100
    return torch.randint(low, 100, shape, generator=g, dtype=dtype)


def rank_states(seed: int) -> list:
    """The state dicts of 2 ranks: 13 tensors of each rank's own (mixed dtypes; "model.big", 12
    MiB, a multipart object, on rank 0) and 4 replicated ones both hold (DCP saves each once)."""
    g = torch.Generator().manual_seed(seed)
    shared = {
        "embed.weight": _tensor(g, (1000, 64), torch.float32),
        "norm.weight": _tensor(g, (64,), torch.bfloat16),
        "step": torch.tensor(1234, dtype=torch.int64),
        "empty": torch.zeros(0, 5),
    }
    states = []
    for rank in (0, 1):
        own = {}
        for i in range(12):
            layer = rank * 12 + i
            own[f"layers.{layer}.weight"] = _tensor(g, (96 + layer, 40), DTYPES[layer % len(DTYPES)])
        if rank == 0:
            own["big"] = _tensor(g, (2048, 1536), torch.float32)
        else:
            own["head.bias"] = _tensor(g, (3, 5, 7), torch.float16)
        states.append({"model": {**{k: v.clone() for k, v in shared.items()}, **own}})
    return states


def merged(states: list) -> dict:
    """One nested state dict holding every rank's tensors (what a load asks for)."""
    out: dict = {"model": {}}
    for state in states:
        out["model"].update(state["model"])
    return out


def flat(state: dict) -> dict:
    return {f"model.{k}": v for k, v in state["model"].items()}


def save_as_ranks(states: list, writers: list, finish: bool = True) -> list:
    """dcp.save's steps (torch's _save_state_dict) for len(states) ranks, rank 0 the coordinator:
    each rank's local plan, the coordinator's global plan, each rank's write, then the
    coordinator's finish (finish=False: a save that died before it). The ranks' write results."""
    planners = [DefaultSavePlanner() for _ in states]
    local = []
    for rank, (state, planner, writer) in enumerate(zip(states, planners, writers)):
        planner.set_up_planner(state_dict=state, storage_meta=writer.storage_meta(), is_coordinator=rank == 0)
        writer.set_up_storage_writer(rank == 0, rank=rank, use_collectives=True)
        local.append(writer.prepare_local_plan(planner.create_local_plan()))
    plans, metadata = planners[0].create_global_plan(local)
    plans = writers[0].prepare_global_plan(plans)
    results = [w.write_data(p.finish_plan(plan), p).wait() for w, p, plan in zip(writers, planners, plans)]
    if finish:
        writers[0].finish(metadata, results)
    return results


def get(client, bucket: str, key: str) -> bytes:
    return client.get_object(Bucket=bucket, Key=key)["Body"].read()


def keys_under(client, bucket: str, prefix: str) -> set:
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return {o["Key"][len(prefix):] for o in listed}


def ranks_save_and_everyone_reads(session, client, bucket: str, prefix: str) -> None:
    """Two ranks save; the safetensors package, hipobj.safetensors.load and DCP read it back."""
    states = rank_states(31)
    want = flat(merged(states))
    where = f"s3://{bucket}/{prefix}"
    writers = [SafetensorsStorageWriter(client, where, session=session) for _ in states]
    save_as_ranks(states, writers)
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert keys_under(client, bucket, prefix + "/") == {*files, INDEX}
    assert writers[0].copies[0].multipart  # "model.big": parts straight from the tensor

    index = json.loads(get(client, bucket, f"{prefix}/{INDEX}"))
    assert set(index["weight_map"]) == set(want) and set(index["weight_map"].values()) == set(files)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in want.values())
    seen: dict = {}
    for name in files:  # the safetensors package reads each file; each tensor is in one
        for fqn, t in st_load_torch(get(client, bucket, f"{prefix}/{name}")).items():
            assert fqn not in seen and index["weight_map"][fqn] == name, fqn
            seen[fqn] = t
    assert set(seen) == set(want)
    for fqn, t in want.items():
        assert seen[fqn].dtype == t.dtype and torch.equal(seen[fqn], t), fqn

    checks: dict = {}
    loaded = hipobj.safetensors.load(client, bucket, f"{prefix}/{INDEX}", device="cpu", session=session, checks=checks)
    assert checks == {f"{prefix}/{name}": "CRC64NVME verified" for name in files}, checks
    for fqn, t in want.items():
        assert loaded[fqn].dtype == t.dtype and torch.equal(loaded[fqn], t), fqn

    got = zeroed(merged(states))
    reader = SafetensorsStorageReader(client, where, session=session)
    dcp.load(got, storage_reader=reader)
    assert_equal(got, merged(states))
    nonempty = sum(t.numel() > 0 for t in want.values())  # DCP asks nothing of an empty tensor
    assert reader.stats["verified"] == reader.stats["tensors"] == nonempty, reader.stats  # each checked
    assert reader.stats["unchecked"] == 0, reader.stats

    planner = box_planner((100, 7), (300, 50))  # a resharded read: a block of "model.big"
    reader = SafetensorsStorageReader(client, where, session=session)
    dcp.load(zeroed(merged(states)), storage_reader=reader, planner=planner)
    assert torch.equal(planner.box, want["model.big"][100:400, 7:57])
    # the part checked against the writer's CRC64NVME of the blocks covering it (the file's metadata)
    assert reader.checks["model.big[100:400, 7:57]"] == "CRC64NVME verified", reader.checks
    assert reader.stats["verified"] == nonempty and reader.stats["unchecked"] == 0, reader.stats


def an_unfinished_save_is_no_checkpoint(session, client, bucket: str, prefix: str) -> None:
    """A save over a finished checkpoint that dies before the coordinator's finish leaves the
    new files and no index: neither DCP nor hipobj.safetensors.load takes it for a checkpoint."""
    states = rank_states(32)
    where = f"s3://{bucket}/{prefix}"
    save_as_ranks(states, [SafetensorsStorageWriter(client, where, session=session) for _ in states])
    dcp.load(zeroed(merged(states)), storage_reader=SafetensorsStorageReader(client, where, session=session))
    save_as_ranks(states, [SafetensorsStorageWriter(client, where, session=session) for _ in states], finish=False)
    assert INDEX not in keys_under(client, bucket, prefix + "/")
    with pytest.raises(CheckpointException) as failed:
        dcp.load(zeroed(merged(states)), storage_reader=SafetensorsStorageReader(client, where, session=session))
    assert "no checkpoint at s3://" in str(cause(failed))
    with pytest.raises(client.exceptions.NoSuchKey):
        hipobj.safetensors.load(client, bucket, f"{prefix}/{INDEX}", device="cpu", session=session)


def what_the_layout_cannot_hold_is_refused(session, client, bucket: str, prefix: str) -> None:
    """A non-tensor value, or a tensor split across ranks, is refused by name before anything is
    written: the finished checkpoint already there stays loadable."""
    states = rank_states(33)
    where = f"s3://{bucket}/{prefix}"
    save_as_ranks(states, [SafetensorsStorageWriter(client, where, session=session) for _ in states])
    before = keys_under(client, bucket, prefix + "/")
    with pytest.raises(CheckpointException) as failed:
        dcp.save({"model": {"w": torch.ones(3)}, "epoch": 7}, storage_writer=SafetensorsStorageWriter(client, where, session=session))
    assert isinstance(cause(failed), hipobj.InvalidValueError) and "'epoch' is not a tensor" in str(cause(failed))
    half = WriteItem(
        index=MetadataIndex("model.split", torch.Size([4, 0])),
        type=WriteItemType.SHARD,
        tensor_data=TensorWriteData(
            chunk=ChunkStorageMetadata(offsets=torch.Size([4, 0]), sizes=torch.Size([4, 6])),
            properties=TensorProperties(dtype=torch.float32),
            size=torch.Size([8, 6]),
        ),
    )
    with pytest.raises(hipobj.InvalidValueError, match="'model.split' is split across ranks.*StorageWriter"):
        SafetensorsStorageWriter(client, where, session=session).prepare_local_plan(SavePlan([half]))
    assert keys_under(client, bucket, prefix + "/") == before
    dcp.load(zeroed(merged(states)), storage_reader=SafetensorsStorageReader(client, where, session=session))


def test_two_ranks_save_and_everyone_reads(session, client, bucket):
    ranks_save_and_everyone_reads(session, client, bucket, "dcp-st/two")


def test_an_unfinished_save_is_no_checkpoint(session, client, bucket):
    an_unfinished_save_is_no_checkpoint(session, client, bucket, "dcp-st/unfinished")


def test_what_the_layout_cannot_hold_is_refused(session, client, bucket):
    what_the_layout_cannot_hold_is_refused(session, client, bucket, "dcp-st/refused")
