"""Load a ``.safetensors`` checkpoint (one file, or the shards of a
``model.safetensors.index.json``) from S3 straight into memory: one ranged GET reads each file's
header, then the whole data section arrives by concurrent RDMA ranged GETs into one registered
destination, and the tensors are views of it: numpy arrays (``device=None``) or torch tensors
(``device="cpu"``, ``"cuda"``, ``"cuda:1"``, a ``torch.device``)."""

from __future__ import annotations

import json
import struct
from typing import Any, Dict, List, Optional, Tuple

from . import _core
from ._core import InvalidValueError
from ._session import Session, current_session
from ._transfer import TransferConfig

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


def _entries(header: Dict[str, Any], where: str) -> List[Tuple[str, str, list, int, int]]:
    """(name, dtype, shape, begin, end) of every tensor, checked."""
    out = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], list(info["shape"]), info["data_offsets"]
            begin, end = int(begin), int(end)
        except (KeyError, TypeError, ValueError):
            raise InvalidValueError(f"{where}: bad header entry for {name!r}") from None
        if not 0 <= begin <= end:
            raise InvalidValueError(f"{where}: {name!r} has data offsets {begin}..{end}")
        out.append((name, dtype, shape, begin, end))
    return out


def _destination(size: int, device: Optional[Any]) -> Any:
    """One byte array for the whole data section: numpy on the host, or torch on `device`."""
    if device is None:
        import numpy as np

        return np.empty(size, dtype=np.uint8)
    import torch

    return torch.empty(size, dtype=torch.uint8, device=device)


def _view(dest: Any, dtype: str, shape: list, begin: int, end: int, device: Optional[Any]) -> Any:
    """The tensor at bytes begin..end of `dest`, as a view of it (a copy only when torch cannot
    view those bytes as `dtype`, e.g. an offset not aligned to the element size)."""
    raw = dest[begin:end]
    if device is None:
        import numpy as np

        if dtype not in _NUMPY_DTYPES:
            raise InvalidValueError(f"dtype {dtype} has no numpy type: pass device='cpu' for torch")
        return raw.view(np.dtype(_NUMPY_DTYPES[dtype])).reshape(shape)
    import torch

    if dtype not in _TORCH_DTYPES or not hasattr(torch, _TORCH_DTYPES[dtype]):
        raise InvalidValueError(f"dtype {dtype} has no torch type here")
    want = getattr(torch, _TORCH_DTYPES[dtype])
    try:
        return raw.view(want).reshape(shape)
    except RuntimeError:
        return raw.clone().view(want).reshape(shape)


def _load_one(client: Any, bucket: str, key: str, device: Optional[Any], session: Session, config: TransferConfig) -> Dict[str, Any]:
    header, data_start = read_header(client, bucket, key)
    where = f"{bucket}/{key}"
    entries = _entries(header, where)
    size = max((end for *_, end in entries), default=0)
    dest = _destination(size, device)
    if size:
        with session.register(dest) as reg:
            store = session._store(client, bucket, key)
            _core.engine_download_into(
                store, reg, 0, data_start, size, config.multipart_chunksize, session._concurrency(config)
            )
    tensors: Dict[str, Any] = {}
    for name, dtype, shape, begin, end in entries:
        t = _view(dest, dtype, shape, begin, end, device)
        nbytes = t.nbytes if hasattr(t, "nbytes") else t.numel() * t.element_size()
        if nbytes != end - begin:
            raise InvalidValueError(f"{name}: {end - begin} bytes in the file, {nbytes} for {dtype}{shape}")
        tensors[name] = t
    return tensors


def load(
    client: Any,
    bucket: str,
    key: str,
    device: Optional[Any] = None,
    session: Optional[Session] = None,
    config: Optional[TransferConfig] = None,
) -> Dict[str, Any]:
    """The tensors of the safetensors object `bucket/key` by name, like
    ``safetensors.numpy.load`` (``device=None``) or ``safetensors.torch.load`` (a torch device).

    The whole data section is planned at once: one destination (host memory, or memory of
    `device`) is registered and filled by concurrent ranged RDMA GETs (``config``: part size and
    concurrency, default the Session's max_transfers), and each tensor is a view of it. A key
    ending in ``.index.json`` is a sharded checkpoint's index (``model.safetensors.index.json``):
    every shard it names (beside it) is loaded, and the tensors of all come back in one dict."""
    session = session or current_session()
    config = config or TransferConfig()
    if key.endswith(".index.json"):
        return _load_sharded(client, bucket, key, device, session, config)
    return _load_one(client, bucket, key, device, session, config)


def _load_sharded(client: Any, bucket: str, key: str, device: Optional[Any], session: Session, config: TransferConfig) -> Dict[str, Any]:
    with client.get_object(Bucket=bucket, Key=key)["Body"] as body:
        try:
            index = json.loads(body.read())
            weight_map = index["weight_map"]
        except (ValueError, KeyError, TypeError):
            raise InvalidValueError(f"{bucket}/{key} is not a safetensors index (no weight_map)") from None
    folder = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
    tensors: Dict[str, Any] = {}
    for shard in sorted(set(weight_map.values())):
        loaded = _load_one(client, bucket, folder + shard, device, session, config)
        for name in loaded:
            if name in tensors:
                raise InvalidValueError(f"{name} is in more than one shard of {bucket}/{key}")
        tensors.update(loaded)
    missing = set(weight_map) - set(tensors)
    if missing:
        raise InvalidValueError(f"{bucket}/{key}: the shards lack {sorted(missing)[:5]}")
    return tensors
