"""Load a ``.safetensors`` object from S3 straight into preallocated arrays: one ranged GET reads
the header, then each tensor's bytes arrive by RDMA into its own numpy array (``device=None``) or
torch tensor (``device="cpu"``, ``"cuda"``, ``"cuda:1"``, a ``torch.device``)."""

from __future__ import annotations

import json
import struct
from typing import Any, Dict, Optional

from ._core import InvalidValueError, S3Error
from ._session import Session, current_session

# The first ranged GET asks for this much: enough for the 8-byte length and most headers.
_HEADER_PROBE = 1 << 16
_MAX_HEADER = 100 << 20

_NUMPY_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
    "U64": "uint64", "U32": "uint32", "U16": "uint16", "U8": "uint8", "BOOL": "bool",
}
_TORCH_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
    "U16": "uint16", "U32": "uint32", "U64": "uint64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
}


def _ranged_get(client: Any, bucket: str, key: str, first: int, last: int) -> bytes:
    response = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={first}-{last}")
    with response["Body"] as body:
        return body.read()


def read_header(client: Any, bucket: str, key: str) -> tuple:
    """(header dict, byte offset of the data section), by one ranged GET (two when the header is
    larger than 64 KiB)."""
    head = _ranged_get(client, bucket, key, 0, _HEADER_PROBE - 1)
    if len(head) < 8:
        raise InvalidValueError(f"{bucket}/{key} is not a safetensors file ({len(head)} bytes)")
    (n,) = struct.unpack("<Q", head[:8])
    if n > _MAX_HEADER:
        raise InvalidValueError(f"{bucket}/{key}: header length {n} is not plausible")
    if 8 + n > len(head):
        head += _ranged_get(client, bucket, key, len(head), 8 + n - 1)
    try:
        header = json.loads(head[8 : 8 + n])
    except ValueError as e:
        raise InvalidValueError(f"{bucket}/{key}: the safetensors header is not JSON ({e})") from None
    return header, 8 + n


def _allocate(dtype: str, shape: list, device: Optional[Any]) -> Any:
    if device is None:
        import numpy as np

        if dtype not in _NUMPY_DTYPES:
            raise InvalidValueError(f"dtype {dtype} has no numpy type: pass device='cpu' for torch")
        return np.empty(shape, dtype=_NUMPY_DTYPES[dtype])
    import torch

    if dtype not in _TORCH_DTYPES or not hasattr(torch, _TORCH_DTYPES[dtype]):
        raise InvalidValueError(f"dtype {dtype} has no torch type here")
    return torch.empty(shape, dtype=getattr(torch, _TORCH_DTYPES[dtype]), device=device)


def load(
    client: Any,
    bucket: str,
    key: str,
    device: Optional[Any] = None,
    session: Optional[Session] = None,
) -> Dict[str, Any]:
    """The tensors of the safetensors object `bucket/key` by name, like
    ``safetensors.numpy.load`` (``device=None``) or ``safetensors.torch.load`` (a torch device).
    Each tensor is allocated first, registered, and filled by one RDMA ranged GET."""
    session = session or current_session()
    header, data_start = read_header(client, bucket, key)
    tensors: Dict[str, Any] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise InvalidValueError(f"{bucket}/{key}: bad header entry for {name!r}") from None
        out = _allocate(dtype, shape, device)
        expected = out.nbytes if hasattr(out, "nbytes") else out.numel() * out.element_size()
        if end - begin != expected:
            raise InvalidValueError(f"{name}: {end - begin} bytes in the file, {expected} for {dtype}{shape}")
        if expected:
            with session.register(out) as reg:
                got = session.get_object(
                    client, bucket, key, into=reg, range=(data_start + begin, data_start + end - 1)
                )
            if got.size != expected:
                raise S3Error(f"{name}: {got.size} bytes arrived, {expected} expected")
        tensors[name] = out
    return tensors
