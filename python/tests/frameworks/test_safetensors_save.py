"""hipobj.safetensors.save (issue 38): a sharded checkpoint with an index, written by RDMA from
the tensors' own memory, read back by the safetensors package and by hipobj.safetensors.load;
each tensor's CRC64NVME in the file's metadata, against which a partial load checks the tensors
it reads (issue 55). The helpers run over plain HTTP too (test_no_device_frameworks.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.numpy import load as st_load_numpy
from safetensors.torch import load as st_load_torch
from safetensors.torch import save as st_save_torch

import hipobj
import hipobj.safetensors
from hipobj_server import flip_on_disk

MIB = 1 << 20


def tensors() -> dict:
    g = torch.Generator().manual_seed(7)
    out = {
        "embed.weight": torch.randn(3000, 1024, generator=g),  # 11.7 MiB: a multipart object
        "head.weight": torch.randn(512, 1024, generator=g).to(torch.bfloat16),
        "head.bias": torch.randn(512, generator=g).to(torch.float16),
        "steps": torch.arange(17, dtype=torch.int32),
        "mask": torch.rand(33, 7, generator=g) > 0.5,
        "scale": torch.tensor(3.5),
    }
    for i in range(6):
        out[f"layers.{i}.weight"] = torch.randn(640, 640, generator=g)
    return out


def twenty() -> dict:
    """20 tensors of mixed dtypes and sizes (one of 1.5 MiB: two CRC blocks)."""
    g = torch.Generator().manual_seed(20)
    dtypes = [torch.float32, torch.bfloat16, torch.int16, torch.float64]
    out = {}
    for i in range(20):
        t = torch.randn(64 + 8 * i, 33, generator=g) * 100
        out[f"layers.{i}.weight"] = t.to(dtypes[i % 4])
    out["layers.19.weight"] = torch.randn(384, 1024, generator=g)
    return out


# What a partial load asks for: 3 of the 20 (the large one among them).
PICK = ["layers.3.weight", "layers.11.weight", "layers.19.weight"]


def partial_load_checks_each_tensor(session, client, bucket, key):
    """save records each tensor's CRC64NVME (of its bytes in memory) in the file's metadata; a
    partial load of 3 of the 20 reads those 3 only, each checked against it."""
    ts = twenty()
    hipobj.safetensors.save(client, bucket, key, ts, metadata={"format": "pt"}, session=session)
    header, _ = hipobj.safetensors.read_header(client, bucket, key)
    meta = header["__metadata__"]
    assert meta["format"] == "pt"
    crcs = json.loads(meta["hipobj.crc64nvme"])
    assert set(crcs) == set(ts)
    for name in PICK:
        assert crcs[name] == hipobj._core.crc_of_buffer(ts[name].view(torch.uint8).numpy()), name
    blocks = json.loads(meta["hipobj.crc64nvme.blocks"])
    assert blocks["block"] == 1 << 20 and set(blocks["tensors"]) == {"layers.19.weight"}
    assert len(blocks["tensors"]["layers.19.weight"]) == 2
    stats = {}
    got = hipobj.safetensors.load(client, bucket, key, device="cpu", session=session, names=PICK, stats=stats)
    assert list(got) == PICK
    for name in PICK:
        assert got[name].dtype == ts[name].dtype and torch.equal(got[name], ts[name]), name
    assert (stats["tensors"], stats["verified"], stats["unchecked"]) == (3, 3, 0), stats
    assert stats["verdicts"] == {n: "CRC64NVME verified (the writer's CRC of this tensor)" for n in PICK}, stats
    numpy = hipobj.safetensors.load(client, bucket, key, session=session, names=PICK[:1])
    assert np.array_equal(numpy[PICK[0]], ts[PICK[0]].numpy())  # a float32 one: numpy has it


def a_rotten_byte_fails_the_partial_load(session, client, bucket, key, data_dir):
    """A byte changed on the server's disk inside one of the 3 tensors: the partial load fails
    naming that tensor, the algorithm and both values (read twice); the other 2 load verified."""
    hipobj.safetensors.save(client, bucket, key, twenty(), session=session)
    header, data_start = hipobj.safetensors.read_header(client, bucket, key)
    begin, end = header[PICK[1]]["data_offsets"]
    flip_on_disk(data_dir, bucket, key, data_start + (begin + end) // 2)
    with pytest.raises(hipobj.ChecksumMismatchError) as e:
        hipobj.safetensors.load(client, bucket, key, device="cpu", session=session, names=PICK)
    assert f"tensor {PICK[1]!r}" in str(e.value) and "(read twice)" in str(e.value), str(e.value)
    assert e.value.algorithm == "CRC64NVME" and e.value.expected != e.value.actual
    assert f"CRC64NVME of what landed is {e.value.actual}, the writer's is {e.value.expected}" in str(e.value)
    stats = {}
    hipobj.safetensors.load(client, bucket, key, device="cpu", session=session, names=[PICK[0], PICK[2]], stats=stats)
    assert (stats["verified"], stats["unchecked"]) == (2, 0), stats


def another_writers_file_loads_counted_unchecked(session, client, bucket, key):
    """A file written by the safetensors package (no CRC of ours in it), uploaded by boto3: a
    partial load reads its 3 tensors unchecked, and counts them so; a whole load checks the
    whole object against the checksum the store keeps (what boto3 sent), and says so."""
    ts = twenty()
    client.put_object(Bucket=bucket, Key=key, Body=st_save_torch(ts))
    stats = {}
    got = hipobj.safetensors.load(client, bucket, key, device="cpu", session=session, names=PICK, stats=stats)
    for name in PICK:
        assert torch.equal(got[name], ts[name]), name
    assert (stats["tensors"], stats["verified"], stats["unchecked"]) == (3, 0, 3), stats
    assert set(stats["verdicts"].values()) == {
        "unchecked: a part of the file, which records no CRC64NVME of this tensor (another writer's)"
    }, stats
    stats, checks = {}, {}
    whole = hipobj.safetensors.load(client, bucket, key, device="cpu", session=session, checks=checks, stats=stats)
    assert set(whole) == set(ts)
    assert checks[key].endswith(" verified"), checks
    assert (stats["tensors"], stats["verified"], stats["unchecked"]) == (20, 20, 0), stats
    assert stats["verdicts"][PICK[0]] == f"{checks[key]} (the whole object's stored checksum)", stats


def get(client, bucket, key) -> bytes:
    return client.get_object(Bucket=bucket, Key=key)["Body"].read()


def whole_object_checked(session, client, bucket, key):
    """load checks the whole object against its stored checksum; the check itself, given a wrong
    stored CRC64NVME, reads twice and raises naming the object; given the right one, passes."""
    checks = {}
    loaded = hipobj.safetensors.load(client, bucket, key, device="cpu", session=session, checks=checks)
    assert checks == {key: "CRC64NVME verified"}, checks
    blob = get(client, bucket, key)
    right = hipobj._core.crc_of_buffer(blob, "CRC64NVME")
    wrong = hipobj._core.crc_of_buffer(blob + b"!", "CRC64NVME")
    config = hipobj.TransferConfig()
    for crc in (wrong, right):
        stored = {"x-amz-checksum-crc64nvme": crc, "x-amz-checksum-type": "FULL_OBJECT"}
        dest = np.zeros(len(blob), dtype=np.uint8)
        if crc == wrong:
            with pytest.raises(hipobj.ChecksumMismatchError) as e:
                hipobj.safetensors._download_checked(session, client, bucket, key, dest, stored, config)
            assert f"s3://{bucket}/{key}" in str(e.value) and "(read twice)" in str(e.value), str(e.value)
            assert (e.value.expected, e.value.actual) == (wrong, right)
        else:
            verdict = hipobj.safetensors._download_checked(session, client, bucket, key, dest, stored, config)
            assert verdict == "CRC64NVME verified" and dest.tobytes() == blob
    return loaded


def changed_while_loading_is_caught(monkeypatch, session, client, bucket, key):
    """The object replaced (one data byte changed, same length) after load's HEAD and header read:
    what lands is not what the HEAD's checksum describes, read twice, ChecksumMismatchError."""
    read_header = hipobj.safetensors.read_header

    def read_then_replace(c, b, k):
        found = read_header(c, b, k)
        blob = bytearray(get(client, bucket, key))
        blob[-3] ^= 0x10
        client.put_object(Bucket=bucket, Key=key, Body=bytes(blob))
        return found

    monkeypatch.setattr(hipobj.safetensors, "read_header", read_then_replace)
    with pytest.raises(hipobj.ChecksumMismatchError, match="changed while it was read") as e:
        hipobj.safetensors.load(client, bucket, key, device="cpu", session=session)
    assert f"s3://{bucket}/{key}" in str(e.value), str(e.value)


def test_three_shards_and_an_index_read_by_the_safetensors_package(session, client, bucket):
    ts = tensors()
    saved = hipobj.safetensors.save(
        client, bucket, "st/model.safetensors", ts, metadata={"format": "pt"}, max_shard_size=6 * MIB, session=session
    )
    assert saved["keys"] == [f"st/model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert saved["index"] == "st/model.safetensors.index.json"
    index = json.loads(get(client, bucket, saved["index"]))
    assert set(index["weight_map"]) == set(ts)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in ts.values())
    back = {}
    for key in saved["keys"]:
        back.update(st_load_torch(get(client, bucket, key)))  # the safetensors package's reader
    assert set(back) == set(ts)
    for name, t in ts.items():
        assert back[name].dtype == t.dtype and torch.equal(back[name], t), name
    assert any(c.multipart for c in saved["copies"])
    loaded = hipobj.safetensors.load(client, bucket, saved["index"], device="cpu", session=session)
    for name, t in ts.items():
        assert torch.equal(loaded[name], t), name


def test_numpy_tensors_one_file(session, client, bucket):
    rng = np.random.default_rng(3)
    ts = {"a": rng.standard_normal((256, 300)).astype(np.float32), "b": rng.integers(0, 9, 1001, dtype=np.int16)}
    saved = hipobj.safetensors.save(client, bucket, "st/np.safetensors", ts, session=session)
    assert saved["keys"] == ["st/np.safetensors"] and saved["index"] is None
    back = st_load_numpy(get(client, bucket, "st/np.safetensors"))
    for name, t in ts.items():
        assert np.array_equal(back[name], t)


def test_bad_input_stores_nothing(session, client, bucket):
    ts = {"ok": torch.ones(4), "strided": torch.ones(8, 8)[:, ::2]}
    with pytest.raises(hipobj.InvalidValueError, match="contiguous"):
        hipobj.safetensors.save(client, bucket, "st/bad.safetensors", ts, session=session)
    with pytest.raises(hipobj.InvalidValueError, match="max_shard_size"):
        hipobj.safetensors.save(client, bucket, "st/bad.safetensors", {"ok": torch.ones(4)}, max_shard_size=0, session=session)
    listed = client.list_objects_v2(Bucket=bucket, Prefix="st/bad").get("Contents", [])
    assert listed == []
    assert session.register(bytearray(8)).deregister() is None  # every registration was released


def test_load_checks_the_whole_object(session, client, bucket):
    ts = tensors()
    hipobj.safetensors.save(client, bucket, "st/crc.safetensors", ts, session=session)
    loaded = whole_object_checked(session, client, bucket, "st/crc.safetensors")
    for name, t in ts.items():
        assert torch.equal(loaded[name], t), name


def test_a_partial_load_checks_each_tensor(session, client, bucket):
    partial_load_checks_each_tensor(session, client, bucket, "st/twenty.safetensors")


def test_a_rotten_byte_fails_the_partial_load(session, client, bucket, server):
    a_rotten_byte_fails_the_partial_load(session, client, bucket, "st/twenty-rot.safetensors", server.data_dir)


def test_another_writers_file_loads_counted_unchecked(session, client, bucket):
    another_writers_file_loads_counted_unchecked(session, client, bucket, "st/theirs.safetensors")


def test_an_object_changed_while_loading_is_caught(monkeypatch, session, client, bucket):
    hipobj.safetensors.save(client, bucket, "st/changed.safetensors", tensors(), session=session)
    changed_while_loading_is_caught(monkeypatch, session, client, bucket, "st/changed.safetensors")
