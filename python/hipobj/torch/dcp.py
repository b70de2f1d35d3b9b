"""``torch.distributed.checkpoint`` storage in S3 over RDMA: ``StorageWriter`` and
``StorageReader``, for ``dcp.save`` / ``dcp.load`` with or without a process group.

    import torch.distributed.checkpoint as dcp
    from hipobj.torch.dcp import StorageReader, StorageWriter

    dcp.save(state_dict, storage_writer=StorageWriter(s3, "s3://ckpt/step-1000"))
    dcp.load(state_dict, storage_reader=StorageReader(s3, "s3://ckpt/step-1000"))

Layout: DCP's file-system layout, so that its ``FileSystemReader`` family (s3torchconnector's
``S3StorageReader`` among them) reads our checkpoints, and our reader theirs. Each rank writes
one object ``__<rank>_0.distcp``: its byte items, then one ``torch.save`` record per tensor, whose
tensor bytes are stored as they are in memory. The writer builds each record's few hundred bytes
of zip framing around the tensor without touching the tensor, and the engine uploads the object
straight from the tensors' registered memory (host, or GPU where the Session has it). The
coordinator removes an existing ``.metadata`` before any rank writes and writes the new one last,
so a save that dies on the way leaves no loadable checkpoint.

Each item's ``_StorageInfo`` carries an extra attribute ``hipobj`` (torch's readers ignore it):
a tensor record's says where the raw bytes start, the chunk's shape and dtype, their CRC64NVME and
the CRC64NVME of each ``block`` bytes of them (``blocks``, for a chunk longer than one block); a
byte item's, its CRC64NVME (issue 55; ``hipobj._crcs``). The reader GETs each requested region by
ranged RDMA GETs straight into the destination tensor when the region is contiguous in both,
staged through one registered host buffer otherwise, and checks every read against the writer's
CRCs: a whole chunk against its CRC64NVME, a part of one against the run of whole blocks that
covers it (the blocks' bytes beside the region read into host memory for the check, or the region
staged as whole blocks), a byte item against its own. A mismatch reads once more, then raises
ChecksumMismatchError naming the item, the algorithm and both values, before any staged copy
reaches its destination. Records without the attribute (written by torch's own writers) are read
whole and deserialised with ``torch.load`` as ``FileSystemReader`` does, counted unchecked in
``reader.stats``, as is what an older hipObject writer recorded no CRC of.

On a Session without an RDMA runtime (no usable RDMA device, issue 39) the same checkpoints move
over plain HTTP through the same engine: the writer uploads the tensors' host memory (device
tensors through a host copy) with its CRC64NVME (the library's, from host memory), and the
reader's ranged GETs land in the destination tensors' host memory (device tensors through a host
copy, copied back), checked as above: a read of exactly whole blocks by the engine against the
writer's CRC64NVME as it lands (read twice before ChecksumMismatchError), any other after it
landed.

``SafetensorsStorageWriter`` and ``SafetensorsStorageReader`` keep a checkpoint in the Hugging
Face safetensors layout instead: one ``model-0000r-of-0000N.safetensors`` per rank that has
tensors (names: the FQNs; uploaded as ``hipobj.safetensors.save`` uploads, each tensor's
CRC64NVME and its blocks' in the file's metadata) and ``model.safetensors.index.json``, removed first and written
last by the coordinator. The ``safetensors`` package and ``hipobj.safetensors.load`` read it; the
reader builds DCP's metadata from the files' headers and reads as ``StorageReader`` does. Classes
of their own rather than a layout option: every step differs (plan, file names, what ``finish``
writes, where the reader's metadata comes from) and torch names its pair the same way
(``HuggingFaceStorageWriter``/``Reader``). A tensor split across ranks is refused by name (the
layout holds whole tensors; consolidating would move every sharded byte a second time through
the coordinator), as are non-tensor values."""

from __future__ import annotations

import dataclasses
import io
import logging
import math
import pickle
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
from torch.distributed.checkpoint import StorageReader as _Reader
from torch.distributed.checkpoint import StorageWriter as _Writer
from torch.distributed.checkpoint.filesystem import _StorageInfo, _StoragePrefix
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem, SavePlan, SavePlanner, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from .. import _core, _crcs
from .._core import ChecksumMismatchError, InvalidValueError, S3Error
from .._pinned import Pinned, Segment, download_host, gather, upload
from .._session import Session, current_session
from .._transfer import TransferConfig

log = logging.getLogger("hipobj")

METADATA = ".metadata"
SUFFIX = ".distcp"
CRC = _crcs.CRC


def split_path(path: str) -> Tuple[str, str]:
    """("bucket", "prefix/") of "s3://bucket/prefix"."""
    if not isinstance(path, str) or not path.startswith("s3://"):
        raise InvalidValueError(f"a checkpoint path is s3://bucket/prefix, not {path!r}")
    bucket, _, prefix = path[len("s3://") :].partition("/")
    if not bucket:
        raise InvalidValueError(f"{path!r} names no bucket")
    prefix = prefix.strip("/")
    return bucket, prefix + "/" if prefix else ""


class _Checkpoint:
    """Where a checkpoint lives and how its objects move: `path` is ``s3://bucket/prefix``,
    `client` a boto3 S3 client, `session` the hipobj Session (default: the open one), `config`
    the engine's part size, concurrency and transport."""

    def __init__(
        self,
        client: Any,
        path: str,
        session: Optional[Session] = None,
        config: Optional[TransferConfig] = None,
    ):
        self.client = client
        self._session = session
        self.config = config or TransferConfig()
        self._at(path)
        self.reset()

    def reset(self, checkpoint_id: Any = None) -> None:
        if checkpoint_id:
            self._at(str(checkpoint_id))

    def _at(self, path: str) -> None:
        self.bucket, self.prefix = split_path(str(path))
        self.path = str(path)

    @property
    def session(self) -> Session:
        return self._session or current_session()

    def key(self, name: str) -> str:
        return self.prefix + name

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        return isinstance(checkpoint_id, str) and checkpoint_id.startswith("s3://")


# writing -------------------------------------------------------------------------------------


class _Capture:
    """A write-only stream for ``torch.save`` of a stand-in tensor: keeps the small writes (the
    zip framing and the pickle) and notes where the storage's bytes would go, without reading
    them (torch hands the storage over as one buffer of exactly its size at its address)."""

    def __init__(self, address: int, size: int):
        self.address, self.size = address, size
        self.head, self.tail = bytearray(), bytearray()
        self.data_at: Optional[int] = None
        self.pos = 0

    def write(self, b: Any) -> int:
        view = memoryview(b)
        n = view.nbytes
        if self.data_at is None and n == self.size and n and _address(view) == self.address:
            self.data_at = self.pos
        elif self.data_at is None:
            self.head += view.cast("B")
        else:
            self.tail += view.cast("B")
        self.pos += n
        return n

    def flush(self) -> None:
        pass


def _address(view: memoryview) -> int:
    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data)


def _framing(t: torch.Tensor) -> Tuple[bytes, bytes]:
    """(bytes before, bytes after) the tensor's data in ``torch.save(t)``'s output: the record of
    a CPU tensor of `t`'s dtype and shape, CRC32 fields left 0 (torch.load does not need them)."""
    stand_in = torch.empty(t.shape, dtype=t.dtype)  # never read: its pages stay untouched
    size = stand_in.numel() * stand_in.element_size()
    capture = _Capture(stand_in.data_ptr(), size)
    saved = torch.serialization.get_crc32_options()
    torch.serialization.set_crc32_options(False)
    try:
        torch.save(stand_in, capture)
    finally:
        torch.serialization.set_crc32_options(saved)
    if size and capture.data_at is None:
        raise InvalidValueError("torch.save did not hand the tensor's storage over in one write")
    return bytes(capture.head), bytes(capture.tail)


class StorageWriter(_Checkpoint, _Writer):
    """DCP storage writer: ``StorageWriter(client, "s3://bucket/prefix", session=None, config=None,
    crc_block=1 MiB)``. Each item's storage info records the CRC64NVME of its bytes, and of each
    `crc_block` bytes of a tensor (a multiple of 64), against which the reader checks any range it
    reads. ``copies`` holds what the engine reported of this rank's uploads."""

    rank: Optional[int] = None

    def __init__(
        self,
        client: Any,
        path: str,
        session: Optional[Session] = None,
        config: Optional[TransferConfig] = None,
        crc_block: int = _crcs.BLOCK,
    ):
        if not isinstance(crc_block, int) or crc_block <= 0 or crc_block % 64:
            raise InvalidValueError(f"crc_block is a positive multiple of 64 bytes, not {crc_block!r}")
        self.crc_block = crc_block
        super().__init__(client, path, session, config)

    def reset(self, checkpoint_id: Any = None) -> None:
        super().reset(checkpoint_id)
        self.save_id = str(uuid.uuid4())
        self.copies: List[Any] = []

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.rank = kwargs.get("rank")

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        return plan

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        # The coordinator, before any rank writes: a checkpoint being overwritten stops being one.
        self.client.delete_object(Bucket=self.bucket, Key=self.key(METADATA))
        return [dataclasses.replace(p, storage_data=_StoragePrefix(f"__{i}_")) for i, p in enumerate(plans)]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future:
        name = f"{plan.storage_data.prefix}0{SUFFIX}"
        results: List[WriteResult] = []
        parts: List[Any] = []
        pos = 0
        with Pinned(self.session) as pinned:
            for item in plan.items:
                if item.type == WriteItemType.BYTE_IO:
                    data = bytes(planner.resolve_data(item).getbuffer())
                    info = _StorageInfo(name, pos, len(data))
                    info.hipobj = {CRC: _crcs.of_segment(data)}  # read whole: one CRC
                    parts.append(data)
                else:
                    tensor = planner.resolve_data(item).detach()
                    info, pieces = self._tensor_record(name, pos, tensor, pinned, self.crc_block)
                    parts += pieces
                results.append(WriteResult(index=item.index, size_in_bytes=info.length, storage_data=info))
                pos += info.length
            segments = gather(parts)
            if segments:
                self.copies.append(upload(self.session, self.client, self.bucket, self.key(name), segments, self.config))
        future: Future = Future()
        future.set_result(results)
        return future

    @staticmethod
    def _tensor_record(
        name: str, pos: int, tensor: torch.Tensor, pinned: Pinned, crc_block: int = _crcs.BLOCK
    ) -> Tuple[_StorageInfo, List[Any]]:
        """The storage info and the pieces (framing bytes, registered tensor memory) of one
        tensor's torch.save record at `pos` of the object `name`; the info records the CRC64NVME
        of the tensor's bytes and of each `crc_block` of them, computed where they lie."""
        if not tensor.is_contiguous():
            tensor = tensor.contiguous()
        head, tail = _framing(tensor)
        size = tensor.numel() * tensor.element_size()
        pieces: List[Any] = [head]
        raw: Dict[str, Any] = {"data": pos + len(head), "shape": list(tensor.shape), "dtype": str(tensor.dtype)}
        if size:
            segment = pinned.segment(tensor)
            raw.update(_crcs.record(segment, size, crc_block))
            pieces.append(segment)
        pieces.append(tail)
        info = _StorageInfo(name, pos, len(head) + size + len(tail))
        info.hipobj = raw  # pickled with the info; torch's readers ignore it
        return info, pieces

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        metadata.storage_data = {wr.index: wr.storage_data for rank in results for wr in rank}
        metadata.storage_meta = self.storage_meta()
        metadata.version = metadata.version or "1.0.0"
        body = pickle.dumps(metadata)
        self.client.put_object(Bucket=self.bucket, Key=self.key(METADATA), Body=body)

    def storage_meta(self) -> Optional[StorageMeta]:
        return StorageMeta(checkpoint_id=self.path, save_id=self.save_id)

    @property
    def checkpoint_id(self) -> str:
        return self.path


# reading -------------------------------------------------------------------------------------


def _strides(shape: List[int]) -> List[int]:
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return strides[::-1]


def region_span(shape: List[int], offsets: List[int], lengths: List[int]) -> Tuple[int, int, bool]:
    """(first element, end element, contiguous) of the box `offsets`+`lengths` of a row-major
    array of `shape`: the smallest span of elements covering it, and whether the box is exactly
    that span (every dimension after the first partial one is whole)."""
    if any(n == 0 for n in lengths):
        return 0, 0, True
    strides = _strides(shape)
    first = sum(o * s for o, s in zip(offsets, strides))
    last = sum((o + n - 1) * s for o, n, s in zip(offsets, lengths, strides))
    return first, last + 1, last + 1 - first == math.prod(lengths)


@dataclasses.dataclass
class _Read:
    """One tensor read: object bytes `first..first+size` of `key` into `segment`; then, when
    `staged` is set, the box copied from the staging bytes into `target`. `span`: the writer's
    CRC64NVME the read is checked against (None: unchecked, `why`), over the read's bytes and the
    `edges` (object offset, length) read beside them only to complete the span's blocks."""

    item: ReadItem
    target: torch.Tensor
    key: str
    first: int
    size: int
    segment: Optional[Segment]
    what: str
    span: Optional[_crcs.Span] = None
    why: str = ""
    edges: List[Tuple[int, int]] = dataclasses.field(default_factory=list)
    staged: Optional[Tuple[torch.Tensor, List[int], List[int], int]] = None
    asked: int = 0  # bytes of the box's span (what the load asked for)
    retried: bool = False


def _item_name(item: ReadItem) -> str:
    """The read's box of its tensor, in the tensor's coordinates: ``model.big[100:300, 0:1536]``
    (the stored chunk's offset plus the box's offsets in it); a 0-d tensor by its name."""
    chunk = list(item.storage_index.offset or [0] * len(item.lengths))
    box = [f"{c + o}:{c + o + n}" for c, o, n in zip(chunk, item.storage_offsets, item.lengths)]
    return f"{item.storage_index.fqn}[{', '.join(box)}]" if box else item.storage_index.fqn


class StorageReader(_Checkpoint, _Reader):
    """DCP storage reader: ``StorageReader(client, "s3://bucket/prefix", session=None, config=None)``.
    ``stats`` counts what the last load did and checked: ``verified`` and ``unchecked`` items
    (tensor reads and byte items), ``empty`` tensors (nothing to read), ``retried`` reads (wrong
    bytes once, right the second time), ``check_bytes`` and ``check_gets`` (what was read only
    to complete a ranged read's CRC blocks); ``checks`` maps each item to its verdict."""

    def reset(self, checkpoint_id: Any = None) -> None:
        super().reset(checkpoint_id)
        self.storage_data: Dict[Any, Any] = {}
        self.load_id = str(uuid.uuid4())
        self.stats: Dict[str, int] = {}
        self.checks: Dict[str, str] = {}

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        key = self.key(METADATA)
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except self.client.exceptions.NoSuchKey:
            raise S3Error(
                f"s3://{self.bucket}/{key} does not exist: no checkpoint at {self.path} "
                "(a save that did not finish writes none)"
            ) from None
        metadata = pickle.loads(body)  # the checkpoint's own pickle, as torch's readers load it
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        if metadata.storage_data is None:
            raise InvalidValueError(f"{self.path}: the metadata has no storage data")
        self.storage_data = metadata.storage_data

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        return plans

    @property
    def checkpoint_id(self) -> str:
        return self.path

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future:
        self.stats = {
            "tensors": 0, "byte_items": 0, "bytes": 0, "direct": 0, "staged": 0, "empty": 0,
            "verified": 0, "unchecked": 0, "retried": 0, "check_bytes": 0, "check_gets": 0,
        }
        self.checks = {}
        self._tally = _crcs.Tally(self.stats, self.checks)
        with Pinned(self.session) as pinned:
            reads: List[_Read] = []
            for item in plan.items:
                info = self.storage_data[item.storage_index]
                if item.type == LoadItemType.BYTE_IO:
                    self._read_bytes(item, info, planner)
                elif getattr(info, "hipobj", None) is None:
                    self._read_foreign(item, info, planner)
                else:
                    reads.append(self._plan_read(item, info, planner, pinned))
            self._run(reads)  # every read landed and passed its check, or this raises
            pinned.finish_staged()  # device targets this Session cannot register got host copies
            for read in reads:
                self._finish(read, planner)
        future: Future = Future()
        future.set_result(None)
        return future

    def _checking(self) -> Optional[str]:
        """Why nothing is checked (the config's checksum_mode), or None."""
        mode = self.config.checksum_mode
        return None if mode == "when_supported" else f"checksums off (checksum_mode={mode!r})"

    # one tensor ------------------------------------------------------------------------------
    def _plan_read(self, item: ReadItem, info: _StorageInfo, planner: LoadPlanner, pinned: Pinned) -> _Read:
        """How one box of a stored chunk moves and is checked. The box's bytes `lo..hi` of the
        chunk (the smallest span of elements covering it) are checked against the writer's
        CRC64NVME of the run of whole blocks covering them: a box that is contiguous in the chunk
        and in its destination lands there straight, and what the blocks hold beside it (at most
        one block before, one after) is read into host memory only for the check; a box whose
        blocks fit in one part (``multipart_chunksize``), or that is not contiguous, lands in a
        staging tensor holding the whole blocks."""
        raw = info.hipobj
        target = planner.resolve_tensor(item).detach()
        itemsize = target.element_size()
        shape, offsets, lengths = list(raw["shape"]), list(item.storage_offsets), list(item.lengths)
        first, end, contiguous = region_span(shape, offsets, lengths)
        key = self.key(info.relative_path)
        what = _item_name(item)
        lo, hi = first * itemsize, end * itemsize
        start = raw["data"] + first * itemsize
        if hi == lo:
            return _Read(item, target, key, start, 0, None, what)
        span: Optional[_crcs.Span] = None
        why = self._checking()
        if why is None:
            found = _crcs.span_for(raw, math.prod(shape) * itemsize, lo, hi, f"s3://{self.bucket}/{key}: {what}")
            if isinstance(found, str):
                why = found
            elif found.lo % itemsize or found.hi % itemsize:
                why = f"the writer's CRC blocks are not whole {target.dtype} elements"
            else:
                span = found
        checked = (span.lo, span.hi) if span is not None else (lo, hi)
        # A region whose checked blocks fit in one part (one GET) is staged as those blocks: a
        # copy of at most one part costs less than the two more requests its edges would.
        one_part = max(raw.get("block") or 0, self.config.multipart_chunksize)
        if contiguous and target.is_contiguous() and (checked == (lo, hi) or checked[1] - checked[0] > one_part):
            segment = pinned.segment(target, for_write=True)
            self.stats["direct"] += 1
            edges = [(raw["data"] + a, b - a) for a, b in ((checked[0], lo), (hi, checked[1])) if b > a]
            return _Read(item, target, key, start, hi - lo, segment, what, span, why or "", edges, asked=hi - lo)
        # staged: the checked span's elements, the box copied out of them once they passed
        stage = torch.empty((checked[1] - checked[0]) // itemsize, dtype=target.dtype)
        self.stats["staged"] += 1
        staged = (stage, shape, offsets, checked[0] // itemsize)
        return _Read(
            item, target, key, raw["data"] + checked[0], checked[1] - checked[0], pinned.segment(stage), what,
            span, why or "", staged=staged, asked=hi - lo,
        )

    def _run(self, reads: List[_Read]) -> None:
        """Every read's bytes, `concurrency` reads at once (each of a large one's parts too); the
        edges of each beside it, on a pool of their own."""
        concurrency = self.session._concurrency(self.config)
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="hipobj-dcp-edge") as self._edges:
            with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="hipobj-dcp") as pool:
                list(pool.map(lambda r: self._fetch(r, concurrency), sorted(reads, key=lambda r: -r.size)))

    def _fetch(self, read: _Read, concurrency: int) -> None:
        """One read's bytes, then its check: a mismatch reads them (and the edges) once more;
        a second one raises ChecksumMismatchError naming the item and both values."""
        if read.segment is None or read.size == 0:  # an empty tensor: nothing to read
            return
        if isinstance(read.segment, memoryview) and read.span is not None and not read.edges:
            self._fetch_host_checked(read, read.segment[: read.size], concurrency)
            return
        for attempt in (1, 2):
            got = self._land(read, concurrency)
            if read.span is None:
                return
            if got == read.span.crc:
                read.retried = attempt == 2
                return
            if attempt == 2:
                raise _crcs.mismatch(self._where(read), got, read.span.crc)
            log.warning(
                "hipobj: %s: %s of what landed is %s, the writer's %s; reading it again", self._where(read), CRC, got, read.span.crc
            )

    def _land(self, read: _Read, concurrency: int) -> Optional[str]:
        """The read's bytes into its segment, and the edges beside them into host memory (at
        most a block each: one plain ranged GET each, as byte items, while the read moves); the
        CRC64NVME of the checked span (edges and landed bytes in order), when it is checked."""
        edges = [
            (at, n, self._edges.submit(lambda at, n: _crcs.of_segment(self._http_range(read.key, at, n, relative=False)), at, n))
            for at, n in (read.edges if read.span is not None else [])
        ]
        segment = read.segment
        if isinstance(segment, memoryview):  # no RDMA runtime: plain HTTP into host memory
            into = segment[: read.size]
            download_host(self.session, self.client, self.bucket, read.key, into, read.first, self.config, concurrency)
            landed = _crcs.of_segment(into) if read.span is not None else None
        else:
            store = self.session._store(self.client, self.bucket, read.key, config=self.config)
            reg, offset, _ = segment
            _core.engine_download_into(
                store, reg, offset, read.first, read.size, self.config.multipart_chunksize, concurrency
            )
            landed = _core.crc_of(reg, offset, read.size, CRC) if read.span is not None else None
        if landed is None:
            return None
        pieces = [(read.first, landed, read.size)] + [(at, crc.result(), n) for at, n, crc in edges]
        return _crcs.combine([(crc, n) for _, crc, n in sorted(pieces)])

    def _fetch_host_checked(self, read: _Read, into: memoryview, concurrency: int) -> None:
        """A read of exactly the checked span into host memory (a Session without an RDMA
        runtime): over plain HTTP by the engine, which checks it against the writer's CRC64NVME
        as it lands (read twice before ChecksumMismatchError)."""
        try:
            download_host(
                self.session, self.client, self.bucket, read.key, into, read.first, self.config, concurrency, read.span.crc
            )
        except ChecksumMismatchError as e:
            raise _crcs.mismatch(self._where(read), e.actual, e.expected) from e

    def _where(self, read: _Read) -> str:
        """The item and the bytes its check covers, for a mismatch's message."""
        lo = min([read.first] + [at for at, _ in read.edges])
        hi = max([read.first + read.size] + [at + n for at, n in read.edges])
        return f"{read.what}: s3://{self.bucket}/{read.key} bytes {lo}+{hi - lo}"

    def _finish(self, read: _Read, planner: LoadPlanner) -> None:
        self.stats["tensors"] += 1
        self.stats["bytes"] += read.asked
        if read.size == 0:
            self.stats["empty"] += 1
        elif read.span is not None:
            self._tally.verified(read.what)
            self.stats["retried"] += read.retried
            self.stats["check_bytes"] += (read.span.hi - read.span.lo) - read.asked
            self.stats["check_gets"] += len(read.edges)
        else:
            self._tally.unchecked(read.what, read.why)
        if read.staged is not None:
            stage, shape, offsets, first = read.staged
            strides = _strides(shape)
            box = torch.as_strided(
                stage,
                size=list(read.item.lengths),
                stride=strides,
                storage_offset=sum(o * s for o, s in zip(offsets, strides)) - first,
            )
            read.target.copy_(box)
        planner.commit_tensor(read.item, read.target)

    def _read_foreign(self, item: ReadItem, info: _StorageInfo, planner: LoadPlanner) -> None:
        """A record written by torch's own writers: the whole torch.save record, deserialised."""
        blob = self._http_range(info.relative_path, info.offset, info.length)
        tensor = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
        for dim, (o, n) in enumerate(zip(item.storage_offsets, item.lengths)):
            tensor = tensor.narrow(dim, o, n)
        target = planner.resolve_tensor(item).detach()
        target.copy_(tensor)
        planner.commit_tensor(item, target)
        self.stats["tensors"] += 1
        self._tally.unchecked(_item_name(item), "a torch.save record of another writer: no CRC64NVME recorded")

    def _read_bytes(self, item: ReadItem, info: _StorageInfo, planner: LoadPlanner) -> None:
        """A byte item, read whole and checked against the writer's CRC64NVME of it (a mismatch
        reads it once more, then raises); an older writer's (no CRC) is counted unchecked."""
        what = item.storage_index.fqn
        want = (getattr(info, "hipobj", None) or {}).get(CRC)
        why = self._checking() or (None if want is not None else "the writer recorded no CRC64NVME of this item")
        for attempt in (1, 2):
            data = self._http_range(info.relative_path, info.offset, info.length)
            if why is not None:
                self._tally.unchecked(what, why)
                break
            got = _core.crc_of_buffer(data, CRC)
            if got == want:
                self._tally.verified(what)
                self.stats["retried"] += attempt == 2
                break
            where = f"{what}: s3://{self.bucket}/{self.key(info.relative_path)} bytes {info.offset}+{info.length}"
            if attempt == 2:
                raise _crcs.mismatch(where, got, want)
            log.warning("hipobj: %s: %s of what landed is %s, the writer's %s; reading it again", where, CRC, got, want)
        self.stats["byte_items"] += 1
        planner.load_bytes(item, io.BytesIO(data))

    def _http_range(self, name: str, offset: int, length: int, relative: bool = True) -> bytes:
        """Bytes `offset..offset+length` of the checkpoint's object `name` (`relative`: a name
        under its prefix; else the object's key) by one plain ranged GET."""
        if length == 0:
            return b""
        rng = f"bytes={offset}-{offset + length - 1}"
        key = self.key(name) if relative else name
        data = self.client.get_object(Bucket=self.bucket, Key=key, Range=rng)["Body"].read()
        if len(data) != length:
            raise S3Error(f"s3://{self.bucket}/{key} bytes {offset}+{length}: {len(data)} bytes came")
        return data


# the Hugging Face safetensors layout ----------------------------------------------------------

INDEX = "model.safetensors.index.json"


def _shard_name(number: int, count: int) -> str:
    return f"model-{number:05d}-of-{count:05d}.safetensors"


def _whole_tensor(item: Any) -> bool:
    """A SHARD write item that is in fact its whole tensor (one rank holds all of it)."""
    chunk, size = item.tensor_data.chunk, item.tensor_data.size
    return all(o == 0 for o in chunk.offsets) and list(chunk.sizes) == list(size)


def _refuse_for_safetensors(item: Any) -> None:
    """What the safetensors layout cannot hold, refused by name before anything is written."""
    fqn = item.index.fqn
    if item.type == WriteItemType.BYTE_IO:
        raise InvalidValueError(
            f"{fqn!r} is not a tensor: the safetensors layout holds tensors only; save it with "
            "hipobj.torch.dcp.StorageWriter (DCP's own layout)"
        )
    if item.type == WriteItemType.SHARD and not _whole_tensor(item):
        chunk = item.tensor_data.chunk
        raise InvalidValueError(
            f"{fqn!r} is split across ranks (this rank holds offsets {list(chunk.offsets)}, sizes "
            f"{list(chunk.sizes)} of {list(item.tensor_data.size)}): the safetensors layout holds each "
            "tensor whole in one file; gather it first (a full state dict) or save with "
            "hipobj.torch.dcp.StorageWriter (DCP's own layout)"
        )


class SafetensorsStorageWriter(StorageWriter):
    """DCP storage writer in the Hugging Face safetensors layout:
    ``SafetensorsStorageWriter(client, "s3://bucket/prefix", session=None, config=None,
    crc_block=1 MiB)``.

    Each rank that has tensors to write (after DCP's planner gave each replicated tensor to one
    rank) writes one file ``model-0000r-of-0000N.safetensors`` (r counts those ranks from 1),
    tensor names being the FQNs, uploaded as ``hipobj.safetensors.save`` uploads (the header, then
    the tensors' registered memory, each tensor's CRC64NVME and its blocks' in the file's
    metadata); the coordinator removes an existing
    ``model.safetensors.index.json`` before any rank writes and writes the new one (the
    ``weight_map``) last, so a save that dies on the way leaves no loadable checkpoint. The
    ``safetensors`` package reads each file, ``hipobj.safetensors.load`` the index, and
    ``SafetensorsStorageReader`` loads it back through DCP in any sharding. Tensors split across
    ranks (DTensor or ShardedTensor chunks) and non-tensor values are refused by name before
    anything is written: this layout holds whole tensors."""

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        for item in plan.items:
            _refuse_for_safetensors(item)
        return plan

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        # The coordinator, before any rank writes: a checkpoint being overwritten stops being one.
        self.client.delete_object(Bucket=self.bucket, Key=self.key(INDEX))
        writing = [i for i, p in enumerate(plans) if p.items]
        names = {rank: _shard_name(n, len(writing)) for n, rank in enumerate(writing, start=1)}
        return [dataclasses.replace(p, storage_data=names.get(i)) for i, p in enumerate(plans)]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future:
        from .. import safetensors as st

        results: List[WriteResult] = []
        if plan.items:
            tensors = {item.index.fqn: planner.resolve_data(item).detach().contiguous() for item in plan.items}
            ordered = st._ordered(tensors)
            with Pinned(self.session) as pinned:
                segments = [pinned.segment(t) for _, t in ordered]
                key = self.key(plan.storage_data)
                self.copies.append(
                    st.upload_file(
                        self.session, self.client, self.bucket, key, ordered, segments, {"format": "pt"}, self.config, self.crc_block
                    )
                )
            for item in plan.items:
                t = tensors[item.index.fqn]
                results.append(WriteResult(index=item.index, size_in_bytes=t.numel() * t.element_size(), storage_data=plan.storage_data))
        future: Future = Future()
        future.set_result(results)
        return future

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        from .. import safetensors as st

        writes = [wr for rank in results for wr in rank]
        weight_map = {wr.index.fqn: wr.storage_data for wr in writes}
        st.write_index(self.client, self.bucket, self.key(INDEX), weight_map, sum(wr.size_in_bytes for wr in writes))


class SafetensorsStorageReader(StorageReader):
    """DCP storage reader of the Hugging Face safetensors layout:
    ``SafetensorsStorageReader(client, "s3://bucket/prefix", session=None, config=None)``.

    The checkpoint is ``model.safetensors.index.json`` and the files its ``weight_map`` names
    beside it (written by ``SafetensorsStorageWriter``, ``hipobj.safetensors.save`` or Hugging Face
    tools). DCP's metadata is built from the files' headers, one whole chunk per tensor, as
    torch's ``HuggingFaceStorageReader`` builds it; then each region a rank asks for moves as with
    ``StorageReader`` (ranged GETs straight into the destination, DCP's planner resharding), every
    read, whole tensor or part, checked against the writer's CRC64NVME where the file carries it
    (``hipobj.safetensors``'s metadata keys); a file without them is read unchecked, and counted
    so in ``stats``."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        from .. import safetensors as st

        key = self.key(INDEX)
        try:
            mapped = st.read_weight_map(self.client, self.bucket, key)
        except self.client.exceptions.NoSuchKey:
            raise S3Error(
                f"s3://{self.bucket}/{key} does not exist: no checkpoint at {self.path} "
                "(a save that did not finish writes none)"
            ) from None
        tensors: Dict[str, TensorStorageMetadata] = {}
        storage: Dict[MetadataIndex, _StorageInfo] = {}
        for shard in sorted(set(mapped.values())):
            for fqn, meta, info in self._tensors_of(shard):
                if mapped.get(fqn) == shard:
                    tensors[fqn] = meta
                    storage[MetadataIndex(fqn, [0] * len(meta.size))] = info
        missing = sorted(set(mapped) - set(tensors))
        if missing:
            raise InvalidValueError(f"s3://{self.bucket}/{key}: the files lack {missing[:5]}")
        metadata = Metadata(state_dict_metadata=tensors, storage_data=storage)
        metadata.storage_meta = StorageMeta(checkpoint_id=self.path, load_id=self.load_id)
        return metadata

    def _tensors_of(self, shard: str) -> List[Tuple[str, TensorStorageMetadata, _StorageInfo]]:
        """(FQN, DCP's metadata of the tensor, where its bytes lie) of every tensor of one file,
        from its header (one ranged GET)."""
        from .. import safetensors as st

        header, data_start = st.read_header(self.client, self.bucket, self.key(shard))
        where = f"s3://{self.bucket}/{self.key(shard)}"
        records = st.writer_records(header, where)
        out = []
        for fqn, code, shape, begin, end in st._entries(header, where):
            dtype = getattr(torch, st._TORCH_DTYPES.get(code, ""), None)
            if not isinstance(dtype, torch.dtype):
                raise InvalidValueError(f"{where}: {fqn!r} has dtype {code}, which has no torch type here")
            size = torch.Size(shape)
            chunk = ChunkStorageMetadata(offsets=torch.Size([0] * len(shape)), sizes=size)
            meta = TensorStorageMetadata(properties=TensorProperties(dtype=dtype), size=size, chunks=[chunk])
            info = _StorageInfo(shard, data_start + begin, end - begin)
            info.hipobj = {"data": data_start + begin, "shape": list(shape), "dtype": str(dtype)}
            info.hipobj.update(records.get(fqn, {}))
            out.append((fqn, meta, info))
        return out
