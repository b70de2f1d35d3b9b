"""The transfer engine from Python: boto3-shaped upload_file / download_file / download_fileobj
(multipart, concurrent ranged GETs, byte checks, no multipart upload left behind) and a sharded
safetensors checkpoint in one call."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest
import safetensors.numpy

import hipobj
import hipobj.safetensors
from conftest import pattern

MB = 1 << 20
# HIPOBJ_PY_ENGINE_MB: the size of the file round trip (the 1 GiB in tests/vm/e2e-large).
SIZE = int(os.environ.get("HIPOBJ_PY_ENGINE_MB", "48")) * MB + 12345


@pytest.fixture
def workdir(tmp_path_factory):
    # Large files go on the work tree's disk (the guest's /tmp is a small tmpfs).
    base = os.environ.get("HIPOBJ_BIG_DIR")
    if base:
        d = os.path.join(base, f"py-engine-{os.getpid()}")
        os.makedirs(d, exist_ok=True)
        yield d
        for f in os.listdir(d):
            os.unlink(os.path.join(d, f))
        os.rmdir(d)
    else:
        yield str(tmp_path_factory.mktemp("engine"))


def write_pattern(path: str, size: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 16 * MB)
            f.write(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
            left -= n


def same_files(a: str, b: str) -> bool:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(16 * MB), fb.read(16 * MB)
            if x != y:
                return False
            if not x:
                return True


def test_upload_file_and_download_file(session, client, bucket, workdir):
    src, back = os.path.join(workdir, "src"), os.path.join(workdir, "back")
    write_pattern(src, SIZE, 51)
    moved = []
    config = hipobj.TransferConfig(multipart_threshold=8 * MB, multipart_chunksize=8 * MB, max_concurrency=4)
    up = session.upload_file(client, src, bucket, "engine/big", config=config, callback=moved.append)
    assert up.multipart and up.size == SIZE and up.parts == -(-SIZE // (8 * MB))
    assert sum(moved) == SIZE
    assert client.head_object(Bucket=bucket, Key="engine/big")["ContentLength"] == SIZE
    assert not client.list_multipart_uploads(Bucket=bucket).get("Uploads"), "nothing left behind"
    # The core sent each part's CRC64NVME and the whole object's (docs/protocol.md section 15):
    # the server stored the FULL_OBJECT value, and the download is checked against it.
    head = client.head_object(Bucket=bucket, Key="engine/big", ChecksumMode="ENABLED")
    assert head.get("ChecksumType") == "FULL_OBJECT" and head.get("ChecksumCRC64NVME"), head
    down = session.download_file(client, bucket, "engine/big", back, config=config)
    assert down.size == SIZE and down.parts == up.parts
    assert down.checksum == "CRC64NVME verified", down.checksum
    assert same_files(src, back)
    print(f"upload_file/download_file {SIZE} bytes: {up.parts} parts, retries {up.retries}+{down.retries}")


def test_small_upload_is_one_put_and_fileobj_download(session, client, bucket):
    data = pattern(3 * MB + 5, 52)
    import tempfile

    with tempfile.NamedTemporaryFile() as f:
        f.write(data)
        f.flush()
        up = session.upload_file(client, f.name, bucket, "engine/small")
    assert not up.multipart and up.parts == 1
    out = io.BytesIO()
    out.write(b"prefix")
    got = session.download_fileobj(client, bucket, "engine/small", out, config=hipobj.TransferConfig(multipart_chunksize=MB))
    assert got.parts == 4
    assert out.getvalue() == b"prefix" + data
    # Checked end to end (docs/protocol.md section 15) against the CRC the server stored: the
    # one botocore named for the PUT, else the server's default CRC64NVME.
    assert got.checksum in ("CRC64NVME verified", "CRC32 verified", "CRC32C verified"), got.checksum


def test_a_download_of_bytes_changed_on_the_server_raises_and_leaves_no_file(session, client, bucket, server, tmp_path):
    data = pattern(2 * MB + 7, 54)
    src = tmp_path / "src"
    src.write_bytes(data)
    session.upload_file(client, str(src), bucket, "engine/rot")
    # One byte changed in place on the server's disk, after its checksum was stored.
    stored = server.data_dir / bucket / "engine%2Frot"
    with open(stored, "r+b") as f:
        f.seek(MB + 3)
        f.write(bytes([data[MB + 3] ^ 0x40]))
    dest = tmp_path / "dest"
    with pytest.raises(hipobj.ChecksumMismatchError) as e:
        session.download_file(client, bucket, "engine/rot", str(dest), config=hipobj.TransferConfig(multipart_chunksize=MB))
    assert e.value.algorithm in ("CRC64NVME", "CRC32", "CRC32C") and e.value.expected != e.value.actual
    assert e.value.expected in str(e.value) and e.value.actual in str(e.value)
    assert isinstance(e.value, hipobj.S3Error)
    assert not dest.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["src"], "no file left behind"
    # checksum_mode="off" takes the bytes as they are.
    off = session.download_file(client, bucket, "engine/rot", str(dest), config=hipobj.TransferConfig(checksum_mode="off"))
    assert off.checksum == "unchecked: checksums off"
    assert dest.read_bytes() != data and len(dest.read_bytes()) == len(data)


def test_missing_object_raises_without_retries(session, client, bucket, tmp_path):
    with pytest.raises(Exception) as e:
        session.download_file(client, bucket, "engine/none", str(tmp_path / "x"))
    assert "404" in str(e.value) or "Not Found" in str(e.value)
    assert not (tmp_path / "x").exists()


def test_sharded_checkpoint_in_one_call(session, client, bucket):
    rng = np.random.default_rng(53)
    shards = []
    weight_map = {}
    expected = {}
    for i in range(3):
        tensors = {
            f"layer.{i}.weight": rng.standard_normal((512, 512)).astype(np.float32),
            f"layer.{i}.bias": rng.standard_normal(512).astype(np.float16),
            f"layer.{i}.ids": rng.integers(0, 1 << 30, (33, 7), dtype=np.int64),
        }
        name = f"model-{i + 1:05d}-of-00003.safetensors"
        blob = safetensors.numpy.save(tensors)
        client.put_object(Bucket=bucket, Key=f"ckpt/{name}", Body=blob)
        expected.update(safetensors.numpy.load(blob))
        weight_map.update({t: name for t in tensors})
        shards.append(name)
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    client.put_object(Bucket=bucket, Key="ckpt/model.safetensors.index.json", Body=json.dumps(index).encode())
    config = hipobj.TransferConfig(multipart_chunksize=256 * 1024, max_concurrency=4)
    got = hipobj.safetensors.load(client, bucket, "ckpt/model.safetensors.index.json", config=config)
    assert sorted(got) == sorted(expected)
    for name, ref in expected.items():
        assert got[name].dtype == ref.dtype and got[name].shape == ref.shape, name
        assert np.array_equal(got[name], ref), name
    # views of one destination per shard, not one allocation per tensor
    assert got["layer.0.weight"].base is not None


def test_an_upload_from_memory_sends_host_bytes_and_registered_memory(session, client, bucket):
    from hipobj import _core

    header, tail = pattern(1004, 57), pattern(4321, 58)
    tensor = np.frombuffer(pattern(12 * MB + 77, 55), dtype=np.uint8)
    n = tensor.size - 7 - 70
    expected = header + tensor[7 : 7 + n].tobytes() + tail
    moved = []
    with session.register(tensor) as reg:
        # Parts of 5 MiB: the first and the last span segments (copied), the second lies in the
        # registration (sent from there).
        store = session._store(client, bucket, "engine/from-memory")
        done = _core.engine_upload_from(store, [header, (reg, 7, n), tail], 5 * MB, 5 * MB, 3, moved.append)
        size, parts, retries, multipart, _ = done
        assert (size, parts, multipart) == (len(expected), 3, True), done
        # One PUT straight from the registration; the CRC64NVME the server computed itself is
        # the one crc_of reads where the bytes are.
        single = session._store(client, bucket, "engine/from-memory-one")
        one_put = _core.engine_upload_from(single, [(reg, 7, n)], 5 * MB, 16 * MB, 3)
        assert (one_put[1], one_put[3]) == (1, False), one_put
        crc = _core.crc_of(reg, 7, n)
        with pytest.raises(hipobj.InvalidValueError):
            _core.crc_of(reg, 7, tensor.size)
        with pytest.raises(hipobj.InvalidValueError):
            _core.engine_upload_from(single, [(reg, 8, tensor.size)], 5 * MB, 16 * MB, 3)
        with pytest.raises(TypeError):
            _core.engine_upload_from(single, [bytearray(3)], 5 * MB, 16 * MB, 3)
    assert sum(moved) == len(expected)
    assert client.get_object(Bucket=bucket, Key="engine/from-memory")["Body"].read() == expected
    head = client.head_object(Bucket=bucket, Key="engine/from-memory", ChecksumMode="ENABLED")
    assert head.get("ChecksumType") == "FULL_OBJECT" and head.get("ChecksumCRC64NVME"), head
    assert not client.list_multipart_uploads(Bucket=bucket).get("Uploads"), "nothing left behind"
    one = client.head_object(Bucket=bucket, Key="engine/from-memory-one", ChecksumMode="ENABLED")
    assert one.get("ChecksumCRC64NVME") == crc, (one, crc)
    assert client.get_object(Bucket=bucket, Key="engine/from-memory-one")["Body"].read() == expected[1004:-4321]
    print(f"engine_upload_from {size} bytes: {parts} parts, retries {retries}")
