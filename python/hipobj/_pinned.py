"""The registrations behind tensors and arrays for one operation (a checkpoint's save or load, a
safetensors file): one registration per distinct storage, however many tensors view it, all
released together. Memory RDMA cannot reach (device memory on a Session without a GPU) is staged
through a host copy instead, and says so. On a Session without an RDMA runtime (no usable RDMA
device, issue 39) nothing is registered: a segment is then the tensor's host memory itself (device
memory through a host copy), which the engine moves over plain HTTP."""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple, Union

from ._core import DmabufNotSupportedError, InvalidValueError, Registration
from ._errors import NoDeviceError

log = logging.getLogger("hipobj")

# The memory of one tensor, as the engine takes it: (registration, byte offset in it, bytes), or
# on a Session without an RDMA runtime its bytes in host memory (a flat memoryview).
Segment = Union[Tuple[Registration, int, int], memoryview]


def is_torch(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "untyped_storage")


def nbytes(obj: Any) -> int:
    if is_torch(obj):
        return obj.numel() * obj.element_size()
    return int(obj.nbytes)


def _torch_storage(t: Any) -> Tuple[Tuple[str, int], Any, int]:
    """(key, flat uint8 tensor over the whole storage, offset of `t` in it)."""
    import torch

    storage = t.untyped_storage()
    flat = torch.empty(0, dtype=torch.uint8, device=t.device)
    flat.set_(storage, 0, (storage.nbytes(),))
    return (str(t.device), storage.data_ptr()), flat, t.data_ptr() - storage.data_ptr()


def _numpy_root(a: Any) -> Tuple[Tuple[str, int], Any, int]:
    """(key, the array whose memory `a` views, offset of `a` in it)."""
    import numpy as np

    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    if not root.flags.c_contiguous:
        root = a
    return ("cpu", root.ctypes.data), root, a.ctypes.data - root.ctypes.data


class Pinned:
    """Registrations made for one operation, released by ``close()`` (or ``with``).

    ``segment(t)`` is the registered memory of tensor or array `t` (C-contiguous), registering its
    storage once. When `t` lives in device memory that this Session cannot register (no GPU, or
    no dma-buf), ``staged`` says so and a host copy of `t` is registered instead (``for_write``:
    the copy is written back by ``finish_staged()``). On a Session without an RDMA runtime the
    segment is `t`'s host memory as a memoryview, registered with nothing (device memory: a host
    copy, counted in ``staged`` and written back the same way)."""

    def __init__(self, session: Any):
        self.session = session
        self._regs: Dict[Tuple[str, int], Tuple[Registration, Any]] = {}
        self._write_back: List[Tuple[Any, Any]] = []
        self.staged = 0

    def __enter__(self) -> "Pinned":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def segment(self, t: Any, for_write: bool = False) -> Segment:
        if not _contiguous(t):
            raise InvalidValueError("a tensor or array to move must be contiguous")
        if not self.session._rdma:
            return self._host(t, for_write)
        size = nbytes(t)
        if size == 0:  # nothing moves, and an empty tensor's memory may be NULL: nothing to register
            return memoryview(bytearray())
        key, owner, offset = _torch_storage(t) if is_torch(t) else _numpy_root(t)
        if key not in self._regs:
            try:
                self._regs[key] = (self.session.register(owner), owner)
            except (NoDeviceError, DmabufNotSupportedError) as e:
                return self._stage(t, size, for_write, e)
        return self._regs[key][0], offset, size

    def _stage(self, t: Any, size: int, for_write: bool, why: Exception) -> Segment:
        """`t` through a host copy (registered for this operation)."""
        if self.staged == 0:
            log.info("hipobj: device memory staged through host memory: %s", why)
        self.staged += 1
        host = t.to("cpu", copy=True)
        reg = self.session.register(_torch_storage(host)[1])
        self._regs[("staged", id(host))] = (reg, host)
        if for_write:
            self._write_back.append((host, t))
        return reg, 0, size

    def _host(self, t: Any, for_write: bool) -> memoryview:
        """`t`'s bytes in host memory for plain HTTP (no RDMA runtime): its own memory, or a host
        copy of device memory (``for_write``: an empty one, written back by ``finish_staged()``)."""
        if not (is_torch(t) and t.device.type != "cpu"):
            return _host_bytes(t)
        if self.staged == 0:
            log.info("hipobj: device memory staged through host memory: the Session has no RDMA runtime")
        self.staged += 1
        if not for_write:
            return _host_bytes(t.to("cpu", copy=True))
        host = _empty_host(t)
        self._write_back.append((host, t))
        return _host_bytes(host)

    def finish_staged(self) -> None:
        """Copy what landed in staged host copies to the device tensors they stand for."""
        for host, device in self._write_back:
            device.copy_(host)
        self._write_back.clear()

    def close(self) -> None:
        regs, self._regs = self._regs, {}
        for reg, _owner in regs.values():
            reg.deregister()


def _empty_host(t: Any) -> Any:
    """An uninitialised host tensor of `t`'s dtype and shape (what a download then fills)."""
    import torch

    return torch.empty(t.shape, dtype=t.dtype, device="cpu")


def _host_bytes(t: Any) -> memoryview:
    """The bytes of host tensor or array `t` (C-contiguous) as a flat memoryview of its memory."""
    if is_torch(t):
        import torch

        flat = t.detach().reshape(-1).view(torch.uint8)
        return memoryview(flat.numpy())
    import numpy as np

    return memoryview(t.reshape(-1).view(np.uint8))


def _contiguous(t: Any) -> bool:
    if is_torch(t):
        return bool(t.is_contiguous())
    return bool(t.flags.c_contiguous)


def gather(parts: List[Any]) -> List[Any]:
    """Engine segments from `parts` (bytes, or Segments), adjacent bytes joined and empty pieces
    dropped (``_core.engine_upload_from`` takes the list). A host-memory Segment (a memoryview: a
    Session without an RDMA runtime) becomes bytes of its own."""
    out: List[Any] = []
    for part in parts:
        if isinstance(part, memoryview):
            if part.nbytes:
                out.append(bytes(part))
        elif isinstance(part, (bytes, bytearray)):
            if not len(part):
                continue
            if out and isinstance(out[-1], bytearray):
                out[-1] += part
            else:
                out.append(bytearray(part))
        elif part[2] > 0:
            out.append(part)
    return [bytes(p) if isinstance(p, bytearray) else p for p in out]


def total(segments: List[Any]) -> int:
    return sum(len(s) if isinstance(s, bytes) else s[2] for s in segments)


def upload(session: Any, client: Any, bucket: str, key: str, segments: List[Any], config: Optional[Any] = None) -> Any:
    """The object `bucket/key` made of `segments` (bytes and registered memory) by the engine:
    one RDMA PUT or a multipart upload, parts lying in one registration sent straight from it,
    each carrying its CRC64NVME. A CopyResult."""
    from . import _core
    from ._transfer import CopyResult, TransferConfig

    config = config or TransferConfig()
    store = session._store(client, bucket, key, config=config)
    chunk, threshold = session._upload_sizes(client, bucket, config)
    done = _core.engine_upload_from(store, segments, chunk, threshold, session._concurrency(config))
    return CopyResult(*done, via=store.transport)


def download_host(
    session: Any,
    client: Any,
    bucket: str,
    key: str,
    into: memoryview,
    first: int,
    config: Optional[Any] = None,
    concurrency: Optional[int] = None,
    crc: Optional[str] = None,
    ticket: Any = None,
    stored: Optional[Dict[str, str]] = None,
) -> Any:
    """Object bytes `first .. first + len(into)` of `bucket/key` into host memory `into` by the
    engine, by the path the Session picks (without an RDMA runtime: plain HTTP; `ticket`: the path
    the caller already picked), ranged GETs of ``multipart_chunksize``, `concurrency` at once
    (None: the config's or the Session's). With `crc` (a CRC64NVME the writer recorded of exactly
    these bytes) the engine checks them as they land as it checks an object against its stored
    checksum: a mismatch reads them again once, then raises ChecksumMismatchError. With `stored`
    instead (a HEAD reply's headers, lowercase names; the bytes are the whole object) the check is
    against the stored checksum they name, in ``config.checksum_mode``. A CopyResult."""
    from . import _core
    from ._transfer import CopyResult, TransferConfig

    config = config or TransferConfig()

    def write_at(pos: int, data: bytes) -> None:
        into[pos : pos + len(data)] = data

    store = session._store(client, bucket, key, config=config, ticket=ticket)
    headers, mode = stored, config.checksum_mode
    if crc is not None:
        headers, mode = {"x-amz-checksum-crc64nvme": crc, "x-amz-checksum-type": "FULL_OBJECT"}, "when_supported"
    elif stored is None:
        mode = "off"
    done = _core.engine_download_to(
        store,
        write_at,
        first,
        into.nbytes,
        config.multipart_chunksize,
        concurrency or session._concurrency(config),
        None,
        mode,
        headers,
    )
    return CopyResult(*done, via=store.transport)
