"""Safetensors checkpoints in S3, moved by RDMA.

``save`` writes tensors (torch or numpy, host or device memory) as one ``.safetensors`` object,
or as shards with a Hugging Face index (``model-00001-of-00003.safetensors`` and
``model.safetensors.index.json``): each object is the header followed by the tensors' own
registered memory, uploaded by the engine without a copy of the tensors.

``load`` reads one file, or every shard of an index: a HEAD gives each file's size and stored
checksum, one ranged GET its header, then the whole object (header and data section) arrives by
concurrent RDMA ranged GETs into one registered destination, is checked against the object's
stored full-object checksum (CRC64NVME, CRC32C or CRC32, by the library's check: read again once
on a mismatch, then ``ChecksumMismatchError``), and the tensors are views of it: numpy arrays
(``device=None``) or torch tensors (``device="cpu"``, ``"cuda"``, ``"cuda:1"``, a
``torch.device``). ``load(..., names=[...])`` reads only those tensors, each checked against
the CRC64NVME ``save`` recorded of it in the file's metadata (``CRC_KEY``); a file without them
(another writer's) loads unchecked, and ``stats`` says so per tensor.

On a Session without an RDMA runtime (no usable RDMA device, issue 39) both move the same bytes
over plain HTTP through the same engine, from and into host memory: the tensors' own (device
tensors through a host copy) for ``save``, the destination's for ``load`` (a device destination
filled through a host copy)."""

from __future__ import annotations

import json
import logging
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from . import _core, _crcs
from ._core import ChecksumMismatchError, InvalidValueError
from ._pinned import Pinned, download_host, gather, is_torch, nbytes, upload
from ._session import Session, _head_with_checksums, current_session
from ._transfer import CopyResult, TransferConfig

log = logging.getLogger("hipobj")

# The first ranged GET asks for this much: enough for the 8-byte length and most headers.
_HEADER_PROBE = 1 << 16
_MAX_HEADER = 100 << 20

# The writer's CRC64NVME of each tensor, in the file's ``__metadata__`` (str -> str, as the format
# asks; the safetensors package and other readers ignore keys they do not know). ``save`` and
# ``hipobj.torch.dcp.SafetensorsStorageWriter`` write both, replacing any value of these keys
# in the caller's metadata:
#   "hipobj.crc64nvme":        JSON {tensor name: CRC64NVME of its bytes} (every non-empty tensor)
#   "hipobj.crc64nvme.blocks": JSON {"block": B, "tensors": {tensor name: [CRC64NVME of each B
#                              bytes of it, the last block shorter]}} (tensors longer than B)
# Values are S3's encoding (base64 of the big-endian digest). A reader checks a whole tensor
# against the first, and any part of one (DCP's resharding) against the blocks that cover it.
CRC_KEY = "hipobj.crc64nvme"
BLOCKS_KEY = "hipobj.crc64nvme.blocks"

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


def _load_one(
    client: Any,
    bucket: str,
    key: str,
    device: Optional[Any],
    session: Session,
    config: TransferConfig,
    checks: Dict[str, str],
    tally: _crcs.Tally,
) -> Dict[str, Any]:
    """The tensors of one file, views of one destination holding the whole object, whose bytes
    were checked against its stored checksum (what the check found: ``checks[key]``), or, when
    the store keeps none, each tensor against the writer's CRC64NVME in the file's metadata. The
    HEAD comes first, so the header read after it and the bytes checked against it are of one
    version of the object: a change in between is a mismatch."""
    size, stored = _head_with_checksums(client, bucket, key)
    header, data_start = read_header(client, bucket, key)
    where = f"{bucket}/{key}"
    entries = _entries(header, where)
    described = data_start + max((end for *_, end in entries), default=0)
    if described != size:
        raise InvalidValueError(
            f"{where}: the object has {size} bytes, its header describes {described} (header and data): "
            "not a safetensors file"
        )
    records = writer_records(header, f"s3://{where}")
    spans = [(name, data_start + b, e - b, records[name][_crcs.CRC]) for name, _, _, b, e in entries if name in records]
    dest = _destination(size, device)
    verdict = _download_checked(session, client, bucket, key, dest, stored, config, spans)
    checks[key] = verdict
    tensors: Dict[str, Any] = {}
    for name, dtype, shape, begin, end in entries:
        t = _view(dest, dtype, shape, data_start + begin, data_start + end, device)
        nbytes = t.nbytes if hasattr(t, "nbytes") else t.numel() * t.element_size()
        if nbytes != end - begin:
            raise InvalidValueError(f"{name}: {end - begin} bytes in the file, {nbytes} for {dtype}{shape}")
        tensors[name] = t
        _count(tally, name, end - begin, _tensor_verdict(verdict, name in records))
    return tensors


# What a tensor's check found, when the whole object's check could not be made but each tensor
# with the writer's CRC64NVME was checked against it.
_PER_TENSOR = f"{_crcs.CRC} verified per tensor (the writer's CRC of each)"


def _tensor_verdict(verdict: str, recorded: bool) -> str:
    """What the check of a whole object (`verdict`) says of one of its tensors."""
    if verdict == _PER_TENSOR:
        return f"{_crcs.CRC} verified (the writer's CRC of this tensor)" if recorded else (
            "unchecked: the store keeps no checksum of the object, and the file records no CRC64NVME of this tensor"
        )
    if " verified" in verdict:
        return f"{verdict} (the whole object's stored checksum)"
    return verdict


def _count(tally: _crcs.Tally, name: str, size: int, verdict: str) -> None:
    tally.stats["tensors"] += 1
    tally.stats["bytes"] += size
    if size == 0:
        tally.stats["empty"] += 1
    elif verdict.startswith("unchecked: "):
        tally.unchecked(name, verdict[len("unchecked: ") :])
    else:
        tally.verified(name, verdict)


def _download_checked(
    session: Session,
    client: Any,
    bucket: str,
    key: str,
    dest: Any,
    stored: Dict[str, str],
    config: TransferConfig,
    spans: Optional[List[Tuple[str, int, int, str]]] = None,
) -> str:
    """The whole object `bucket/key` into `dest` by the engine, checked in ``config.checksum_mode``
    against the stored checksum the HEAD reply's headers `stored` name, by the library's check of
    a whole object (the one ``get_object`` and ``download_file`` make): a mismatch reads it again
    once, then raises ChecksumMismatchError. When the store keeps no checksum the object's check
    can use, `spans` (tensor name, offset in the object, length, the writer's CRC64NVME) are
    checked instead, where the bytes landed; a mismatch reads the object again once, then raises
    naming the tensor. What the check found ("CRC64NVME verified", "unchecked: <why>", or
    ``_PER_TENSOR``)."""
    size = len(dest)
    where = f"s3://{bucket}/{key}"

    def land(get: Callable[[], str]) -> str:
        try:
            return get()
        except ChecksumMismatchError as e:
            raise _mismatch(where, e) from e

    if not session._rdma:
        with Pinned(session) as pinned:
            into = pinned.segment(dest, for_write=True)
            verdict = _checked_per_tensor(
                lambda: land(lambda: download_host(session, client, bucket, key, into, 0, config, stored=stored).checksum),
                lambda at, n: _crcs.of_segment(into[at : at + n]),
                spans, where, config,
            )
            pinned.finish_staged()
        return verdict
    with session.register(dest) as reg:
        return _checked_per_tensor(
            lambda: land(lambda: _download_into_checked(session, client, bucket, key, reg, size, stored, config)),
            lambda at, n: _core.crc_of(reg, at, n, _crcs.CRC),
            spans, where, config,
        )


def _checked_per_tensor(
    land: Callable[[], str],
    crc_at: Callable[[int, int], str],
    spans: Optional[List[Tuple[str, int, int, str]]],
    where: str,
    config: TransferConfig,
) -> str:
    """`land()` the whole object (its own check's verdict); when that check found nothing to check
    against ("unchecked: ...", checksums not off), each span against the writer's CRC64NVME where
    the bytes landed (`crc_at(offset, length)`): a mismatch lands the object again once, then
    raises naming the tensor."""
    for attempt in (1, 2):
        verdict = land()
        if not verdict.startswith("unchecked") or not spans or config.checksum_mode != "when_supported":
            return verdict
        bad = None
        for name, at, n, want in spans:
            got = crc_at(at, n)
            if got != want:
                bad = (name, at, n, got, want)
                break
        if bad is None:
            return _PER_TENSOR
        name, at, n, got, want = bad
        what = f"{where}: tensor {name!r} (bytes {at}+{n})"
        if attempt == 2:
            raise _crcs.mismatch(what, got, want)
        log.warning("hipobj: %s: %s of what landed is %s, the writer's %s; reading the object again", what, _crcs.CRC, got, want)
    raise AssertionError("unreachable")


def _download_into_checked(
    session: Session, client: Any, bucket: str, key: str, reg: Any, size: int, stored: Dict[str, str], config: TransferConfig
) -> str:
    """The whole object into registration `reg` by RDMA ranged GETs, then the check of what landed
    (``_core.check_landed``, where the bytes lie); a mismatch reads it again once."""
    concurrency = session._concurrency(config)
    for attempt in (1, 2):
        store = session._store(client, bucket, key, config=config)
        _core.engine_download_into(store, reg, 0, 0, size, config.multipart_chunksize, concurrency)
        try:
            return _core.check_landed(reg, 0, size, stored, True, f"s3://{bucket}/{key}", config.checksum_mode)
        except ChecksumMismatchError as e:
            if attempt == 2:
                raise
            log.warning("hipobj: %s; reading the object again", e)
    raise AssertionError("unreachable")


def _mismatch(where: str, e: ChecksumMismatchError) -> ChecksumMismatchError:
    """What a safetensors file read twice with a wrong checksum raises, on either path."""
    err = ChecksumMismatchError(
        f"{where}: {e.algorithm} of the whole object that landed is {e.actual}, the server stored "
        f"{e.expected} (read twice): the object changed while it was read, or its bytes were damaged"
    )
    err.algorithm, err.expected, err.actual = e.algorithm, e.expected, e.actual
    return err


def load(
    client: Any,
    bucket: str,
    key: str,
    device: Optional[Any] = None,
    session: Optional[Session] = None,
    config: Optional[TransferConfig] = None,
    checks: Optional[Dict[str, str]] = None,
    names: Optional[Iterable[str]] = None,
    stats: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """The tensors of the safetensors object `bucket/key` by name, like
    ``safetensors.numpy.load`` (``device=None``) or ``safetensors.torch.load`` (a torch device).

    The whole object is planned at once: one destination (host memory, or memory of `device`) is
    registered and filled by concurrent ranged RDMA GETs (``config``: part size and concurrency,
    default the Session's max_transfers), and each tensor is a view of it. What landed is checked
    against the object's stored full-object checksum in ``config.checksum_mode`` (default
    "when_supported"): a mismatch reads the object again once, then raises
    ChecksumMismatchError naming it. When the store keeps no checksum of the object, each tensor
    is checked instead against the writer's CRC64NVME that ``save`` records in the file's
    metadata (``CRC_KEY``). `checks`, when given, is filled with each object's key and what its
    check found ("CRC64NVME verified", "unchecked: <why>", e.g. an object stored with no
    checksum). On a Session without an RDMA runtime the ranged GETs go over plain HTTP into the
    destination's host memory (a device destination: through a host copy), checked as they
    land. A key ending in ``.index.json`` is a sharded checkpoint's index
    (``model.safetensors.index.json``): every shard it names (beside it) is loaded, and the
    tensors of all come back in one dict.

    `names` loads only those tensors (a partial load; of an index, only the shards that hold
    them are read): each tensor's bytes move by their own ranged GETs into one destination and
    are checked against the writer's CRC64NVME of that tensor (a mismatch reads the tensor
    again once, then raises ChecksumMismatchError naming it); a file without those CRCs
    (written by another writer) loads unchecked. `stats`, when given, is filled with
    ``tensors``, ``bytes``, ``verified``, ``unchecked``, ``empty`` and ``retried`` counts of this
    load and ``verdicts``: each tensor's name and what its check found."""
    session = session or current_session()
    config = config or TransferConfig()
    checks = {} if checks is None else checks
    stats = {} if stats is None else stats
    for counter in ("tensors", "bytes", "empty"):
        stats.setdefault(counter, 0)
    tally = _crcs.Tally(stats, stats.setdefault("verdicts", {}))
    wanted = None if names is None else list(dict.fromkeys(names))
    if key.endswith(".index.json"):
        return _load_sharded(client, bucket, key, device, session, config, checks, tally, wanted)
    if wanted is not None:
        return _load_some(client, bucket, key, wanted, device, session, config, tally)
    return _load_one(client, bucket, key, device, session, config, checks, tally)


def _load_some(
    client: Any,
    bucket: str,
    key: str,
    wanted: List[str],
    device: Optional[Any],
    session: Session,
    config: TransferConfig,
    tally: _crcs.Tally,
) -> Dict[str, Any]:
    """The tensors `wanted` of one file: the header (one ranged GET), then each tensor's bytes
    by ranged GETs into its own 64-byte aligned place in one destination (several tensors at
    once), each checked against the writer's CRC64NVME of it where the file records one."""
    header, data_start = read_header(client, bucket, key)
    where = f"s3://{bucket}/{key}"
    entries = {e[0]: e for e in _entries(header, where)}
    missing = [n for n in wanted if n not in entries]
    if missing:
        more = f" (nor {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise InvalidValueError(f"{where} has no tensor {missing[0]!r}{more}")
    records = writer_records(header, where)
    off = config.checksum_mode != "when_supported"
    places: List[Tuple[str, int, int, int, Optional[str]]] = []  # name, place, object offset, size, CRC
    pos = 0
    for name in wanted:
        _, _, _, begin, end = entries[name]
        crc = None if off else records.get(name, {}).get(_crcs.CRC)
        places.append((name, pos, data_start + begin, end - begin, crc))
        pos += -(-(end - begin) // 64) * 64
    dest = _destination(pos, device)
    retried: Dict[str, bool] = {}
    concurrency = session._concurrency(config)

    def fetch_all(fetch: Callable[[str, int, int, int, Optional[str]], bool]) -> None:
        todo = [p for p in places if p[3]]
        with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(todo))), thread_name_prefix="hipobj-st") as pool:
            for (name, *_), again in zip(todo, pool.map(lambda p: fetch(*p), todo)):
                retried[name] = again

    if not session._rdma:
        with Pinned(session) as pinned:
            into = pinned.segment(dest, for_write=True)

            def fetch_host(name: str, place: int, first: int, n: int, crc: Optional[str]) -> bool:
                try:  # the engine checks the bytes against `crc` as they land, reading twice
                    download_host(session, client, bucket, key, into[place : place + n], first, config, concurrency, crc)
                except ChecksumMismatchError as e:
                    raise _crcs.mismatch(f"{where}: tensor {name!r} (bytes {first}+{n})", e.actual, e.expected) from e
                return False

            fetch_all(fetch_host)
            pinned.finish_staged()
    else:
        with session.register(dest) as reg:

            def fetch_rdma(name: str, place: int, first: int, n: int, crc: Optional[str]) -> bool:
                for attempt in (1, 2):
                    store = session._store(client, bucket, key, config=config)
                    _core.engine_download_into(store, reg, place, first, n, config.multipart_chunksize, concurrency)
                    if crc is None:
                        return False
                    got = _core.crc_of(reg, place, n, _crcs.CRC)
                    if got == crc:
                        return attempt == 2
                    what = f"{where}: tensor {name!r} (bytes {first}+{n})"
                    if attempt == 2:
                        raise _crcs.mismatch(what, got, crc)
                    log.warning(
                        "hipobj: %s: %s of what landed is %s, the writer's %s; reading it again", what, _crcs.CRC, got, crc
                    )
                return False

            fetch_all(fetch_rdma)
    tensors: Dict[str, Any] = {}
    for name, place, first, n, crc in places:
        _, dtype, shape, begin, end = entries[name]
        t = _view(dest, dtype, shape, place, place + n, device)
        size = t.nbytes if hasattr(t, "nbytes") else t.numel() * t.element_size()
        if size != n:
            raise InvalidValueError(f"{name}: {n} bytes in the file, {size} for {dtype}{shape}")
        tensors[name] = t
        if crc is not None:
            verdict = f"{_crcs.CRC} verified (the writer's CRC of this tensor)"
        elif off:
            verdict = f"unchecked: checksums off (checksum_mode={config.checksum_mode!r})"
        else:
            verdict = "unchecked: a part of the file, which records no CRC64NVME of this tensor (another writer's)"
        _count(tally, name, n, verdict)
        tally.stats["retried"] += retried.get(name, False)
    return tensors


def read_weight_map(client: Any, bucket: str, key: str) -> Dict[str, str]:
    """The ``weight_map`` (tensor name -> shard file name, beside the index) of the Hugging Face
    index `bucket/key` (``model.safetensors.index.json``)."""
    with client.get_object(Bucket=bucket, Key=key)["Body"] as body:
        try:
            mapped = json.loads(body.read())["weight_map"]
        except (ValueError, KeyError, TypeError):
            raise InvalidValueError(f"{bucket}/{key} is not a safetensors index (no weight_map)") from None
    if not isinstance(mapped, dict) or not all(isinstance(v, str) for v in mapped.values()):
        raise InvalidValueError(f"{bucket}/{key}: its weight_map does not map names to file names")
    return mapped


def _load_sharded(
    client: Any,
    bucket: str,
    key: str,
    device: Optional[Any],
    session: Session,
    config: TransferConfig,
    checks: Dict[str, str],
    tally: _crcs.Tally,
    wanted: Optional[List[str]] = None,
) -> Dict[str, Any]:
    mapped = read_weight_map(client, bucket, key)
    folder = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
    if wanted is not None:
        missing = [n for n in wanted if n not in mapped]
        if missing:
            raise InvalidValueError(f"{bucket}/{key} maps no tensor {missing[0]!r}")
        tensors = {}
        for shard in sorted({mapped[n] for n in wanted}):
            names = [n for n in wanted if mapped[n] == shard]
            tensors.update(_load_some(client, bucket, folder + shard, names, device, session, config, tally))
        return {n: tensors[n] for n in wanted}
    tensors: Dict[str, Any] = {}
    for shard in sorted(set(mapped.values())):
        loaded = _load_one(client, bucket, folder + shard, device, session, config, checks, tally)
        for name in loaded:
            if name in tensors:
                raise InvalidValueError(f"{name} is in more than one shard of {bucket}/{key}")
        tensors.update(loaded)
    missing = set(mapped) - set(tensors)
    if missing:
        raise InvalidValueError(f"{bucket}/{key}: the shards lack {sorted(missing)[:5]}")
    return tensors


# save ----------------------------------------------------------------------------------------

_NUMPY_CODES = {v: k for k, v in _NUMPY_DTYPES.items()}
_TORCH_CODES = {v: k for k, v in _TORCH_DTYPES.items()}


def _dtype_code(t: Any) -> str:
    """The safetensors dtype name of a torch tensor or numpy array."""
    if is_torch(t):
        name = str(t.dtype).split(".")[-1]
        codes = _TORCH_CODES
    else:
        name = t.dtype.name
        codes = _NUMPY_CODES
    if name not in codes:
        raise InvalidValueError(f"dtype {name} has no safetensors name")
    return codes[name]


def _header(tensors: List[Tuple[str, Any]], metadata: Optional[Dict[str, str]]) -> bytes:
    """The 8-byte length and the JSON header of one file holding `tensors` in this order (no gap
    between them, as the format requires), padded with spaces so the data starts 8-byte aligned."""
    header: Dict[str, Any] = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise InvalidValueError("safetensors metadata maps str to str")
        header["__metadata__"] = dict(metadata)
    pos = 0
    for name, t in tensors:
        n = nbytes(t)
        header[name] = {"dtype": _dtype_code(t), "shape": list(t.shape), "data_offsets": [pos, pos + n]}
        pos += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    return struct.pack("<Q", len(text)) + text


def _ordered(tensors: Dict[str, Any]) -> List[Tuple[str, Any]]:
    """Largest elements first, then by name (what the safetensors package writes: every tensor
    stays aligned to its element size)."""
    def itemsize(t: Any) -> int:
        return t.element_size() if is_torch(t) else t.itemsize

    for name, t in tensors.items():
        if not isinstance(name, str):
            raise InvalidValueError(f"tensor names are str, not {type(name).__name__}")
        if not (is_torch(t) or hasattr(t, "__array_interface__")):
            raise InvalidValueError(f"{name}: {type(t).__name__} is neither a torch tensor nor a numpy array")
    return sorted(tensors.items(), key=lambda kv: (-itemsize(kv[1]), kv[0]))


def _shards(ordered: List[Tuple[str, Any]], max_shard_size: Optional[int]) -> List[List[Tuple[str, Any]]]:
    """The tensors cut into shards of at most `max_shard_size` bytes of data (a larger tensor
    alone in its shard), in order, as Hugging Face's ``split_torch_state_dict_into_shards``."""
    if max_shard_size is None:
        return [ordered]
    if max_shard_size <= 0:
        raise InvalidValueError(f"max_shard_size must be > 0, not {max_shard_size}")
    shards: List[List[Tuple[str, Any]]] = [[]]
    size = 0
    for name, t in ordered:
        n = nbytes(t)
        if shards[-1] and size + n > max_shard_size:
            shards.append([])
            size = 0
        shards[-1].append((name, t))
        size += n
    return shards


def _shard_keys(key: str, count: int) -> List[str]:
    if count == 1:
        return [key]
    stem = key[: -len(".safetensors")] if key.endswith(".safetensors") else key
    return [f"{stem}-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def write_index(
    client: Any, bucket: str, key: str, weight_map: Dict[str, str], total_size: int, metadata: Optional[Dict[str, str]] = None
) -> None:
    """The Hugging Face index `bucket/key` (``model.safetensors.index.json``): ``total_size`` (bytes
    of tensor data) and `metadata` under "metadata", and the `weight_map` (name -> shard file)."""
    body = {"metadata": {"total_size": total_size, **(metadata or {})}, "weight_map": weight_map}
    client.put_object(Bucket=bucket, Key=key, Body=json.dumps(body, indent=2).encode())


def crc_metadata(records: Dict[str, Dict[str, Any]], block: int) -> Dict[str, str]:
    """The file metadata (``CRC_KEY``, ``BLOCKS_KEY``) of the writer's records of its tensors
    (``_crcs.record`` of each non-empty one, with blocks of `block` bytes)."""
    whole = {name: r[_crcs.CRC] for name, r in records.items()}
    blocks = {name: r["blocks"] for name, r in records.items() if "blocks" in r}
    return {
        CRC_KEY: json.dumps(whole, sort_keys=True, separators=(",", ":")),
        BLOCKS_KEY: json.dumps({"block": block, "tensors": blocks}, sort_keys=True, separators=(",", ":")),
    }


def writer_records(header: Dict[str, Any], where: str) -> Dict[str, Dict[str, Any]]:
    """What the file's writer recorded of each tensor (``_crcs.record``'s form: ``CRC64NVME`` and,
    with ``BLOCKS_KEY``, ``block`` and ``blocks``), from its metadata; {} for a file without
    ``CRC_KEY`` (written by another writer). Malformed values are refused by name."""
    meta = header.get("__metadata__") or {}
    text = meta.get(CRC_KEY)
    if text is None:
        return {}
    try:
        whole = json.loads(text)
        blocks = json.loads(meta[BLOCKS_KEY]) if BLOCKS_KEY in meta else None
    except ValueError:
        raise InvalidValueError(f"{where}: its {CRC_KEY} metadata is not JSON") from None
    if not isinstance(whole, dict) or not all(isinstance(v, str) for v in whole.values()):
        raise InvalidValueError(f"{where}: its {CRC_KEY} metadata is not a map of tensor names to CRCs")
    records: Dict[str, Dict[str, Any]] = {name: {_crcs.CRC: crc} for name, crc in whole.items()}
    if blocks is None:
        return records  # whole tensors only (hipObject's writers before block CRCs)
    if not isinstance(blocks, dict) or not isinstance(blocks.get("block"), int) or not isinstance(blocks.get("tensors"), dict):
        raise InvalidValueError(f"{where}: its {BLOCKS_KEY} metadata is not {{\"block\": B, \"tensors\": {{...}}}}")
    for name, record in records.items():
        record["block"] = blocks["block"]
        if name in blocks["tensors"]:
            record["blocks"] = blocks["tensors"][name]
    return records


def upload_file(
    session: Session,
    client: Any,
    bucket: str,
    key: str,
    tensors: List[Tuple[str, Any]],
    segments: List[Any],
    metadata: Optional[Dict[str, str]],
    config: Optional[TransferConfig],
    crc_block: int = _crcs.BLOCK,
) -> CopyResult:
    """One safetensors object `bucket/key`: the header of `tensors` (name, tensor; in this order,
    as ``_ordered`` puts them) and their memory `segments` (``Pinned.segment`` of each), uploaded
    by the engine straight from that memory (one PUT or a multipart upload, with CRC64NVME). The
    header's metadata is `metadata` with the writer's CRC64NVME of each tensor and of each
    `crc_block` bytes of it (``CRC_KEY``, ``BLOCKS_KEY``), computed from that memory first."""
    records = {name: _crcs.record(seg, nbytes(t), crc_block) for (name, t), seg in zip(tensors, segments) if nbytes(t)}
    metadata = {**(metadata or {}), **crc_metadata(records, crc_block)}
    return upload(session, client, bucket, key, gather([_header(tensors, metadata), *segments]), config)


def save(
    client: Any,
    bucket: str,
    key: str,
    tensors: Dict[str, Any],
    metadata: Optional[Dict[str, str]] = None,
    max_shard_size: Optional[int] = None,
    session: Optional[Session] = None,
    config: Optional[TransferConfig] = None,
) -> Dict[str, Any]:
    """Write `tensors` (name -> torch tensor or numpy array, contiguous; host memory, or device
    memory where the Session has the GPU, staged through host memory otherwise) as the
    safetensors object `bucket/key`, like ``safetensors.torch.save_file``.

    With `max_shard_size` (bytes) and more data than that, the tensors go into shards named as
    Hugging Face names them (``model-00001-of-00003.safetensors`` for ``model.safetensors``) and
    an index ``<key>.index.json`` maps each tensor to its shard, written after every shard
    arrived. Each object is uploaded by the engine straight from the tensors' registered memory
    (parts inside one tensor) with its CRC64NVME; one registration per tensor storage for the
    whole save. Each file's metadata records each tensor's CRC64NVME and its 1 MiB blocks'
    (``CRC_KEY``, ``BLOCKS_KEY``), computed from the tensors' memory first, against which
    ``load`` checks the tensors it reads. On a Session without an RDMA runtime the engine sends
    the tensors' host bytes over plain HTTP instead (device tensors through a host copy). Returns
    ``{"keys": [...], "index": key or None, "bytes": n, "copies": [CopyResult]}``."""
    session = session or current_session()
    ordered = _ordered(tensors)
    shards = _shards(ordered, max_shard_size)
    keys = _shard_keys(key, len(shards))
    copies: List[CopyResult] = []
    with Pinned(session) as pinned:
        for shard_key, shard in zip(keys, shards):
            segments = [pinned.segment(t) for _, t in shard]
            copies.append(upload_file(session, client, bucket, shard_key, shard, segments, metadata, config))
    index = None
    if len(keys) > 1:
        index = key + ".index.json"
        weight_map = {name: k.rsplit("/", 1)[-1] for k, shard in zip(keys, shards) for name, _ in shard}
        write_index(client, bucket, index, weight_map, sum(nbytes(t) for _, t in ordered), metadata)
    return {"keys": keys, "index": index, "bytes": sum(c.size for c in copies), "copies": copies}
