"""hipobj.safetensors.load equals safetensors.numpy.load of the same bytes."""

from __future__ import annotations

import numpy as np
import safetensors.numpy

import hipobj.safetensors


def check_equal(got, expected):
    assert sorted(got) == sorted(expected)
    for name, ref in expected.items():
        assert got[name].dtype == ref.dtype, name
        assert got[name].shape == ref.shape, name
        assert np.array_equal(got[name], ref), name


def test_load_equals_reference(session, client, bucket):
    rng = np.random.default_rng(41)
    tensors = {
        "embed.weight": rng.standard_normal((512, 256)).astype(np.float32),
        "layer.0.bias": rng.standard_normal(256).astype(np.float16),
        "layer.0.weight": rng.standard_normal((256, 256)),
        "ids": rng.integers(-(2**40), 2**40, (7, 3), dtype=np.int64),
        "mask": rng.integers(0, 2, (5, 5)).astype(bool),
        "bytes": rng.integers(0, 256, 1001, dtype=np.uint8),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.int32),
    }
    blob = safetensors.numpy.save(tensors, metadata={"format": "np"})
    client.put_object(Bucket=bucket, Key="model.safetensors", Body=blob)
    got = hipobj.safetensors.load(client, bucket, "model.safetensors")
    check_equal(got, safetensors.numpy.load(blob))


def test_large_header_needs_a_second_range(session, client, bucket):
    tensors = {f"t{i:02d}": np.full((i + 1, 3), i, dtype=np.int16) for i in range(12)}
    blob = safetensors.numpy.save(tensors, metadata={"notes": "x" * 70_000})
    client.put_object(Bucket=bucket, Key="many.safetensors", Body=blob)
    header, start = hipobj.safetensors.read_header(client, bucket, "many.safetensors")
    assert start > 1 << 16  # larger than the first ranged GET
    got = hipobj.safetensors.load(client, bucket, "many.safetensors")
    check_equal(got, safetensors.numpy.load(blob))
