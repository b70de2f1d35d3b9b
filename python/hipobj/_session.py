"""hipobj.Session: hipObjInit/hipObjShutdown as a context manager, registration and the boto3
get_object/put_object transfers."""

from __future__ import annotations

import logging
import os
import re
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

from . import _core
from ._core import (
    AlreadyInitializedError,
    ChecksumMismatchError,
    InvalidValueError,
    NicNotFoundError,
    NotInitializedError,
    Registration,
    S3Error,
)
from ._batch import Batch, open_batch
from ._errors import RdmaNotSupportedError
from ._memory import describe, host_view
from ._s3 import BYTES_HEADER, S3Call, endpoint_of, get_params, prepare_client, read_body_into
from ._transfer import CopyResult, FileObjectWriter, Store, TransferConfig

log = logging.getLogger("hipobj")

_current: Optional["Session"] = None
_current_lock = threading.Lock()

RangeArg = Union[None, str, Tuple[int, int]]
_RANGE = re.compile(r"bytes=(\d+)-(\d+)")
_HTTP_CHUNK = 1 << 20


def current_session() -> "Session":
    """The open Session of this process (hipObject is initialised once per process)."""
    if _current is None:
        raise NotInitializedError("no hipobj.Session is open")
    return _current


@dataclass
class TransferResult:
    """What a get_object/put_object did.

    via: "rdma" or "http": the path the Session's decision picked (``reason`` says why: "default
    start", "measured", "probe", "forced", "no RDMA device", "server declined RDMA"), or "http"
    when the server answered 501 and ``fallback="http"`` moved the bytes over plain HTTP. size: bytes moved (a GET: the object's or the range's length). requests:
    S3 requests sent (2 when the connection was paired first). etag: the object's ETag when the
    server sent one. headers: the last response's headers. protocol: the RC protocol of an RDMA
    transfer ("v1", or "v2": hipobj-rc-v2). checksum: what a GET's end-to-end check found
    ("CRC64NVME verified", "unchecked: <why>"; "not checked" for a PUT)."""

    via: str
    size: int
    requests: int
    etag: Optional[str] = None
    headers: Dict[str, str] = field(default_factory=dict)
    protocol: Optional[str] = None
    checksum: str = "not checked"
    reason: Optional[str] = None


def _parse_range(rng: RangeArg) -> Optional[Tuple[int, int]]:
    """(first, last) inclusive from (first, last) or "bytes=first-last"."""
    if rng is None:
        return None
    if isinstance(rng, str):
        m = _RANGE.fullmatch(rng.strip())
        if not m:
            raise InvalidValueError(f"range {rng!r} is not 'bytes=FIRST-LAST'")
        first, last = int(m.group(1)), int(m.group(2))
    else:
        try:
            first, last = (int(v) for v in rng)
        except (TypeError, ValueError):
            raise InvalidValueError(f"range {rng!r} is not (first, last)") from None
    if first < 0 or last < first:
        raise InvalidValueError(f"range ({first}, {last}): need 0 <= first <= last")
    return first, last


class Session:
    """hipObject for this process: ``with hipobj.Session(nic="rxe0") as s: ...``.

    nic: the RDMA device (e.g. "rxe0"), or several ("rxe0,rxe2": transfers spread over the devices
    whose port is up and fail over between them, docs/rails.md); None lets hipObject choose the
    one closest to the GPU.
    gpu: the HIP device for device buffers; None = the calling thread's device, or none.
    max_transfers: RDMA connections = transfers at once (1..1024; None: HIPOBJ_MAX_TRANSFERS, 16).
    bind_http: make boto3 clients send their requests from the NIC's IP address (the server
    requires the HTTP peer to be the token's GID address); False leaves clients as they are.
    protocol: the RC protocol, "v1", "v2" (hipobj-rc-v2) or "auto" (None: HIPOBJ_RDMA_PROTOCOL,
    else "auto"): v1 first, hipobj-rc-v2 once an endpoint answers 501 with
    ``X-Amz-Rdma-Protocol-Status: unsupported``, remembered per endpoint for the Session.
    transport: "auto", "rdma" or "http" (None: HIPOBJ_TRANSPORT, else "auto"): how each object
    copy moves its bytes. "auto" decides per copy between RDMA and plain HTTP by what it measured
    on that endpoint, size class, direction and destination (docs/transport.md); without a usable
    RDMA device the Session opens without RDMA and moves host memory over plain HTTP (said once,
    logger ``hipobj``). "rdma" always RDMA (no device: NicNotFoundError naming it); "http" never
    opens RDMA. ``stats()`` counts what went each way, and why.

    Only one Session may be open at a time (AlreadyInitializedError otherwise)."""

    def __init__(
        self,
        nic: Optional[str] = None,
        gpu: Optional[int] = None,
        max_transfers: Optional[int] = None,
        bind_http: bool = True,
        protocol: Optional[str] = None,
        transport: Optional[str] = None,
    ):
        self._negotiation = _core.Negotiation(protocol)
        self._transport = _core.Transport(transport)  # an unknown mode: InvalidValueError
        self._rdma = False  # the RDMA runtime is open (hipObjInit succeeded)
        self._config = (nic, gpu, max_transfers)
        self._bind_http = bind_http
        self._open = False
        self._registrations: "weakref.WeakSet[Registration]" = weakref.WeakSet()
        self._batches: "weakref.WeakSet[Batch]" = weakref.WeakSet()
        self.nic: Optional[str] = None
        self.nic_address: Optional[str] = None
        self.gpu: Optional[int] = None
        self.max_transfers: int = 0

    # lifecycle -----------------------------------------------------------------------------
    def open(self) -> "Session":
        """hipObjInit, unless the transport needs no RDMA (see the class). Raises NicNotFoundError
        (also for transport="rdma" without an RDMA device), RdmaError, AlreadyInitializedError."""
        global _current
        nic, gpu, max_transfers = self._config
        with _current_lock:
            if _current is not None:
                raise AlreadyInitializedError("a hipobj.Session is already open in this process")
            self._rdma = self._open_rdma(nic, gpu, max_transfers)
            self._open = True
            _current = self
        if self._rdma:
            self.nic = _core.nic_name()
            self.nic_address = _core.nic_address()
            self.gpu = _core.gpu_device()
            self.max_transfers = _core.max_transfers()
        else:
            self.max_transfers = _core.default_max_transfers(max_transfers)
        log.info("hipobj session: nic %s (%s), gpu %s, transport %s", self.nic, self.nic_address, self.gpu, self.transport)
        return self

    def _open_rdma(self, nic: Optional[str], gpu: Optional[int], max_transfers: Optional[int]) -> bool:
        """Open the RDMA runtime where the transport may use it: True when it is open."""
        mode = self._transport.mode
        if mode == "http":
            return False
        missing = _core.rdma_missing()
        if missing is None:
            _core.init(nic, gpu, max_transfers)
            return True
        why = f"no RDMA device ({missing})"
        if mode == "rdma":
            raise NicNotFoundError(f"{why}: transport='rdma' needs one")
        if self._transport.no_rdma_device(why):
            log.warning("hipobj: %s: moving the bytes over plain HTTP", why)
        return False

    @property
    def transport(self) -> str:
        """The Session's transport mode: "auto", "rdma" or "http"."""
        return self._transport.mode

    def stats(self) -> Dict[str, Any]:
        """What the Session's copies moved each way, and why (the decision's counters):
        ``{"rdma": {"transfers": n, "bytes": n, "by_reason": {"measured": n, ...}}, "http": {...},
        "switches": n}``. A reason is listed once it counted a copy; ``switches`` counts how often
        a cell's held path changed."""
        return self._transport.counters()

    def rails(self) -> List[Dict[str, Any]]:
        """What each RDMA device carried, the preferred first (docs/rails.md): ``[{"device":
        "rxe0", "port_up": True, "transfers": n, "bytes": n, "failovers": n, "port_downs": n,
        "port_ups": n, "failbacks": n}, ...]``; empty without an RDMA runtime."""
        return _core.rail_stats() if self._rdma else []

    def close(self) -> None:
        """Deregister what this Session registered, then hipObjShutdown."""
        global _current
        if not self._open:
            return
        if not self._rdma:
            with _current_lock:
                self._open = False
                if _current is self:
                    _current = None
            return
        for batch in list(self._batches):
            batch.close()
        for reg in list(self._registrations):
            try:
                reg.deregister()
            except _core.HipObjError as e:  # kept registered (and pinned) by the library
                log.warning("could not deregister %r: %s", reg, e)
        with _current_lock:
            _core.shutdown()
            self._open = False
            self._rdma = False
            if _current is self:
                _current = None

    def __enter__(self) -> "Session":
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed"
        if self._open:
            state = f"nic={self.nic!r} ({self.nic_address}), gpu={self.gpu}, transport={self.transport}"
        return f"<hipobj.Session {state}>"

    # registration --------------------------------------------------------------------------
    def register(self, buf: Any) -> Registration:
        """Register `buf` for RDMA: anything with the buffer protocol (bytearray, numpy array,
        memoryview, mmap; writable for GETs, read-only serves PUTs), or device memory through
        ``__cuda_array_interface__`` or DLPack (ROCm PyTorch tensors). The memory stays pinned
        until ``deregister()``, the end of a ``with`` block, or the Session's close."""
        self._check_open()
        if not self._rdma:
            why = self._transport.missing_device or f"transport={self.transport!r}"
            raise NotInitializedError(f"this Session has no RDMA runtime ({why}): nothing to register with")
        mem = describe(buf, has_gpu=self.gpu is not None)
        if mem is None:
            reg = _core.register_buffer(buf)
        else:
            reg = _core.register_pointer(mem.address, mem.size, mem.owner, mem.writable, mem.device)
        self._registrations.add(reg)
        return reg

    def batch(
        self,
        client: Any,
        depth: int = 64,
        verify: bool = True,
        transport: Optional[str] = None,
        **settings: Any,
    ) -> "Batch":
        """A batch queue: many GETs and PUTs in flight from one thread, the requests sent by
        the library itself (docs/batch.md). ``client``: a boto3 S3 client (its endpoint, keys and
        region) or an endpoint URL (then ``access_key``, ``secret_key``, ``region``, ``profile``,
        ``ca_bundle``, else as the AWS SDKs resolve them). ``transport``: "auto", "rdma" or "http"
        per operation (None: HIPOBJ_TRANSPORT, else "auto"). Closed with the Session."""
        self._check_open()
        if not self._rdma:
            raise NotInitializedError("a Batch needs the Session's RDMA runtime (its buffers are registrations)")
        batch = open_batch(client, depth, verify, transport, **settings)
        self._batches.add(batch)
        return batch

    def _check_open(self) -> None:
        if not self._open:
            raise NotInitializedError("the hipobj.Session is not open")

    def _registration_for(self, buf: Any) -> Tuple[Registration, bool]:
        """(registration, made here for this call only)."""
        if isinstance(buf, Registration):
            return buf, False
        return self.register(buf), True

    def _client(self, client: Any) -> None:
        prepare_client(client, self.nic_address if self._bind_http else None)

    # transfers -----------------------------------------------------------------------------
    def get_object(
        self,
        client: Any,
        bucket: str,
        key: str,
        into: Any,
        offset: int = 0,
        range: RangeArg = None,
        fallback: Optional[str] = None,
        checksum_mode: str = "when_supported",
    ) -> TransferResult:
        """GET `bucket/key` into `into` (a Registration, or a buffer registered for this call
        only; without an RDMA runtime, any writable host buffer) at byte `offset`, by the path the
        Session's transport picks (``result.via``, ``result.reason``). `range`: (first, last)
        inclusive or "bytes=first-last". The space from `offset` to the end of the buffer must hold
        the object (or the range). fallback="http": on a 501 (no RDMA at the server) under
        transport="rdma", GET over plain HTTP into host memory ("auto" does so by itself).
        checksum_mode (botocore's response_checksum_validation): "when_supported" checks the bytes
        that landed in host memory against the object's stored full-object CRC (docs/protocol.md
        section 15); a mismatch GETs again once, then raises ChecksumMismatchError: the buffer's
        bytes are then not the object's. The result's ``checksum`` says what the check found.
        The GIL is released while the bytes move."""
        return self._get(client, bucket, key, into, offset, range, fallback, checksum_mode)

    def _get(
        self,
        client: Any,
        bucket: str,
        key: str,
        into: Any,
        offset: int,
        range: RangeArg,
        fallback: Optional[str],
        checksum_mode: str,
        mode: Optional[str] = None,
    ) -> TransferResult:
        """get_object, its path picked under `mode` (None: the Session's)."""
        self._check_open()
        self._check_fallback(fallback)
        _core.checksum_mode(checksum_mode)  # an unknown mode is refused before anything moves
        span = _parse_range(range)
        params = get_params(bucket, key, span)
        if not self._rdma:
            view = _host_memory(into)
            size = _span_size(view.nbytes, offset, span)
            return self._http_get(client, params, view, offset, self._pick(client, size, "get", "host", mode))
        reg, temporary = self._registration_for(into)
        try:
            size = _span_size(reg.size, offset, span)
            where = reg.destination
            ticket = self._pick(client, size, "get", where, mode)
            while ticket.path == "rdma":
                try:
                    return self._rdma_get(client, params, reg, size, offset, span, checksum_mode, ticket)
                except RdmaNotSupportedError as e:
                    ticket = self._declined(client, size, "get", where, fallback, e)
            return self._http_get(client, params, _host_memory(reg), offset, ticket)
        finally:
            if temporary:
                reg.deregister()

    def _rdma_get(
        self,
        client: Any,
        params: Dict[str, Any],
        reg: Registration,
        size: int,
        offset: int,
        span: Optional[Tuple[int, int]],
        checksum_mode: str,
        ticket: Any,
    ) -> TransferResult:
        """One GET by RDMA, its landed bytes checked (read again once on a mismatch)."""
        name = f"{params['Bucket']}/{params['Key']}"
        for attempt in (1, 2):
            call = S3Call(client, "get_object", params, self._negotiation)
            result = self._transfer("get", reg, size, offset, call)
            result.size = int(call.headers.get(BYTES_HEADER, size))
            try:
                headers = _lower(call.headers)
                result.checksum = _core.check_landed(reg, offset, result.size, headers, span is None, name, checksum_mode)
            except ChecksumMismatchError as e:
                if attempt == 2:
                    e.retries = 1
                    raise
                log.warning("hipobj: %s; reading the object again", e)
                continue
            ticket.record(result.size)
            result.reason = ticket.reason
            return result
        raise AssertionError("unreachable")

    def put_object(
        self,
        client: Any,
        bucket: str,
        key: str,
        from_: Any,
        offset: int = 0,
        size: Optional[int] = None,
        fallback: Optional[str] = None,
        extra_args: Optional[Dict[str, Any]] = None,
    ) -> TransferResult:
        """PUT `size` bytes (None: to the end of the buffer) of `from_` at `offset` as
        `bucket/key`, by the path the Session's transport picks (RDMA: the server RDMA-READs
        them). extra_args: more put_object parameters, e.g. the object's real checksum
        (``{"ChecksumCRC32": ...}``), which the server compares with the moved bytes (without one,
        it stores the checksum botocore asks for by default). fallback="http": on a 501 under
        transport="rdma", PUT the bytes over plain HTTP ("auto" does so by itself). The GIL is
        released while the bytes move."""
        self._check_open()
        self._check_fallback(fallback)
        params = {**(extra_args or {}), "Bucket": bucket, "Key": key, "Body": b""}
        if not self._rdma:
            view = _host_memory(from_, writable=False)
            size = _put_size(view.nbytes, offset, size)
            return self._http_put(client, params, view, offset, size, self._pick(client, size, "put", "host"))
        reg, temporary = self._registration_for(from_)
        try:
            size = _put_size(reg.size, offset, size)
            where = reg.destination
            ticket = self._pick(client, size, "put", where)
            while ticket.path == "rdma":
                try:
                    call = S3Call(client, "put_object", params, self._negotiation)
                    result = self._transfer("put", reg, size, offset, call)
                    ticket.record(size)
                    result.reason = ticket.reason
                    return result
                except RdmaNotSupportedError as e:
                    ticket = self._declined(client, size, "put", where, fallback, e)
            return self._http_put(client, params, _host_memory(reg, writable=False), offset, size, ticket)
        finally:
            if temporary:
                reg.deregister()

    # the decision: RDMA or plain HTTP, per object copy (issue 39) ---------------------------
    def _pick(self, client: Any, size: int, direction: str, destination: str, mode: Optional[str] = None) -> Any:
        """The path of one object copy (a ``_core.Ticket``: ``path``, ``reason``, ``record``), the
        one place that turns a copy's mode (a TransferConfig's, None: the Session's) and the
        Session into a path. Device memory goes by RDMA: plain HTTP cannot reach it. A path of
        RDMA without an RDMA runtime is NicNotFoundError naming the missing device."""
        if destination != "host":
            if (mode or self.transport) == "http":
                raise InvalidValueError("transport 'http' moves host memory only: device memory needs RDMA")
            mode = "rdma"
        ticket = self._transport.pick(endpoint_of(client), size, direction, destination, mode)
        if ticket.path == "rdma" and not self._rdma:
            why = self._transport.missing_device or f"the Session's transport is {self.transport!r}"
            raise NicNotFoundError(f"{why}: transport='rdma' needs an RDMA device")
        return ticket

    def _declined(
        self, client: Any, size: int, direction: str, destination: str, fallback: Optional[str], err: BaseException
    ) -> Any:
        """The server answered 501 (no RDMA): the ticket of the same copy over plain HTTP under
        "auto" (said once per endpoint) or with fallback="http"; otherwise `err` is raised."""
        if destination != "host":
            raise RdmaNotSupportedError(f"{err}; plain HTTP cannot reach device memory") from err
        endpoint = endpoint_of(client)
        if self.transport == "auto":
            if self._transport.declined(endpoint):
                log.warning("hipobj: %s declined RDMA (501): moving its objects over plain HTTP", endpoint)
            return self._pick(client, size, direction, destination)
        if fallback != "http":
            raise err
        log.warning("hipobj: %s: the server has no RDMA (501); moving the bytes over HTTP", endpoint)
        return self._pick(client, size, direction, destination, "http")

    def download_file(
        self,
        client: Any,
        bucket: str,
        key: str,
        filename: str,
        config: Optional[TransferConfig] = None,
        callback: Optional[Any] = None,
    ) -> CopyResult:
        """boto3's ``download_file``: `bucket/key` into the file `filename` (written beside it and
        renamed when complete) by concurrent ranged RDMA GETs through a few registered buffers.
        callback(n) gets the bytes of each part as it arrives. Failed requests are retried as the
        AWS SDKs' standard mode does (each time with a fresh token); ``retries`` says how many."""
        self._check_open()
        config = config or TransferConfig()
        size, headers = _head_with_checksums(client, bucket, key)
        store = self._store(client, bucket, key, config=config)
        done = _core.engine_download(
            store,
            str(filename),
            0,
            size,
            self._range_size(client, config),
            self._concurrency(config),
            callback,
            config.checksum_mode,
            headers,
        )
        return CopyResult(*done, via=store.transport)

    def download_fileobj(
        self,
        client: Any,
        bucket: str,
        key: str,
        fileobj: Any,
        config: Optional[TransferConfig] = None,
        callback: Optional[Any] = None,
    ) -> CopyResult:
        """boto3's ``download_fileobj``: `bucket/key` written to a binary file object (parts in
        any order with seek + write; in order, one at a time, when it cannot seek)."""
        self._check_open()
        config = config or TransferConfig()
        size, headers = _head_with_checksums(client, bucket, key)
        writer = FileObjectWriter(fileobj)
        concurrency = self._concurrency(config) if writer.seekable else 1
        store = self._store(client, bucket, key, config=config)
        done = _core.engine_download_to(
            store,
            writer.write_at,
            0,
            size,
            self._range_size(client, config),
            concurrency,
            callback,
            config.checksum_mode,
            headers,
        )
        return CopyResult(*done, via=store.transport)

    def upload_file(
        self,
        client: Any,
        filename: str,
        bucket: str,
        key: str,
        config: Optional[TransferConfig] = None,
        callback: Optional[Any] = None,
        extra_args: Optional[Dict[str, Any]] = None,
    ) -> CopyResult:
        """boto3's ``upload_file``: the file as `bucket/key`, one RDMA PUT up to
        ``multipart_threshold``, else a multipart upload with one RDMA UploadPart per part
        (completed when all arrived, aborted on failure). The file is read by parts, never whole."""
        self._check_open()
        config = config or TransferConfig()
        size = os.path.getsize(filename)
        if size == 0:
            client.put_object(Bucket=bucket, Key=key, Body=b"", **(extra_args or {}))
            return CopyResult(0, 0, 0)
        store = self._store(client, bucket, key, extra_args, config)
        chunk, threshold = self._upload_sizes(client, bucket, config)
        # The core sends the CRC64NVME of what each PUT moves, unless the caller chose a checksum.
        own_checksum = any(k.startswith("Checksum") for k in (extra_args or {}))
        done = _core.engine_upload(
            store, str(filename), size, chunk, threshold, self._concurrency(config), callback, not own_checksum
        )
        result = CopyResult(*done, via=store.transport)
        if result.multipart:
            stored = client.head_object(Bucket=bucket, Key=key)["ContentLength"]
            if stored != size:
                raise S3Error(f"{bucket}/{key}: the completed multipart upload has {stored} bytes, not {size}")
        return result

    def _range_size(self, client: Any, config: TransferConfig) -> int:
        """Bytes per ranged GET: at most 2^31 - 1 when the transfer may be hipobj-rc-v2."""
        limit = self._negotiation.max_transfer(endpoint_of(client))
        chunk = config.multipart_chunksize
        return chunk if limit is None else min(chunk, limit)

    def _upload_sizes(self, client: Any, bucket: str, config: TransferConfig) -> Tuple[int, int]:
        """(part size, multipart threshold): a transfer that may be hipobj-rc-v2 moves at most
        2^31 - 1 bytes, and to an endpoint that speaks it an upload up to that size goes as ONE
        PUT (v2 servers need not honour an UploadPart's query; elbencho's s3rdma-server stores
        each part as the whole object). Under "auto" an unknown endpoint is probed first."""
        chunk, threshold = config.multipart_chunksize, config.multipart_threshold
        endpoint = endpoint_of(client)
        probe = self._rdma and (config.transport or self.transport) != "http"
        if probe and self._negotiation.choice == "auto" and self._negotiation.spoken(endpoint) is None:
            self.rdma_protocol(client, bucket)
        limit = self._negotiation.max_transfer(endpoint)
        if limit is None:
            return chunk, threshold
        v2 = self._negotiation.choice == "v2" or self._negotiation.spoken(endpoint) == "v2"
        return min(chunk, limit), limit if v2 else min(threshold, limit)

    def rdma_protocol(self, client: Any, bucket: str = "hipobj-probe") -> str:
        """Which RC protocol `client`'s endpoint speaks: "v1", "v2" (hipobj-rc-v2) or "none"
        (it declines RDMA), found by a real RDMA GET of a key that does not exist in `bucket`
        (and remembered, as any transfer's answer is). Needs the RDMA runtime."""
        self._check_open()
        probe = bytearray(1)
        key = f".hipobj-probe/{os.urandom(4).hex()}"
        try:
            self._get(client, bucket, key, probe, 0, None, None, "when_supported", mode="rdma")
        except RdmaNotSupportedError:
            return "none"
        except S3Error as e:
            if getattr(e, "http_status", None) is None:
                raise
        spoken = self._negotiation.spoken(endpoint_of(client))
        if spoken is None:
            raise S3Error(f"{endpoint_of(client)}: the probe got no answer that names a protocol")
        return spoken

    def _store(
        self,
        client: Any,
        bucket: str,
        key: str,
        extra_args: Optional[Dict[str, Any]] = None,
        config: Optional[TransferConfig] = None,
        ticket: Any = None,
    ) -> Store:
        """The engine's S3 side for `bucket/key`; each copy picks its path (``_pick``) under
        `config.transport` (None: the Session's), or takes `ticket`: the copy's path picked by a
        caller that had to know it first (to register the destination only for RDMA)."""
        self._client(client)
        mode = (config or TransferConfig()).transport

        def pick(size: int, direction: str, destination: str) -> Any:
            if ticket is not None:
                return ticket
            return self._pick(client, size, direction, destination, mode)

        return Store(client, bucket, key, extra_args, self._negotiation, pick)

    def _concurrency(self, config: TransferConfig) -> int:
        n = config.max_concurrency or self.max_transfers
        if n < 1:
            raise InvalidValueError(f"max_concurrency must be >= 1, not {n}")
        return n

    @staticmethod
    def _check_fallback(fallback: Optional[str]) -> None:
        if fallback not in (None, "http"):
            raise InvalidValueError(f"fallback must be None or 'http', not {fallback!r}")

    def _transfer(self, kind: str, reg: Registration, size: int, offset: int, call: S3Call) -> TransferResult:
        self._client(call.client)
        try:
            requests = _core.transfer(kind, reg, size, offset, call)
        except S3Error as e:
            e.reply = call.reply
            e.http_status = call.status
            if call.reply == "501" or call.status == 501:
                err = RdmaNotSupportedError(f"the server does not do RDMA (501): {e}")
                err.reply, err.http_status = call.reply, call.status
                raise err from e
            raise
        protocol = self._negotiation.spoken(call.endpoint)
        return TransferResult("rdma", size, requests, call.etag(), call.headers, protocol)

    # plain HTTP: the path picked, or after a 501 --------------------------------------------
    def _http_get(self, client: Any, params: Dict[str, Any], view: memoryview, offset: int, ticket: Any) -> TransferResult:
        """GET over plain HTTP into host memory `view` at `offset` (ticket: the copy's path)."""
        self._client(client)
        response = client.get_object(**params)
        body = response["Body"]
        length = int(response.get("ContentLength", 0))
        if length > view.nbytes - offset:
            body.close()
            raise InvalidValueError(f"the object ({length} bytes) does not fit the buffer after offset {offset}")
        read_body_into(body, view[offset : offset + length], length, _HTTP_CHUNK)
        ticket.record(length)
        headers = response["ResponseMetadata"].get("HTTPHeaders", {})
        return TransferResult("http", length, 1, headers.get("etag"), headers, reason=ticket.reason)

    def _http_put(
        self, client: Any, params: Dict[str, Any], view: memoryview, offset: int, size: int, ticket: Any
    ) -> TransferResult:
        """PUT `size` bytes of host memory `view` from `offset` over plain HTTP."""
        self._client(client)
        response = client.put_object(**{**params, "Body": bytes(view[offset : offset + size])})
        ticket.record(size)
        headers = response["ResponseMetadata"].get("HTTPHeaders", {})
        return TransferResult("http", size, 1, headers.get("etag"), headers, reason=ticket.reason)


def _host_memory(buf: Any, writable: bool = True) -> memoryview:
    """The bytes of host memory `buf` (a host Registration, or a contiguous buffer) as a flat
    memoryview: what plain HTTP reads from or writes into. Device memory is refused (plain HTTP
    cannot reach it)."""
    if isinstance(buf, Registration):
        if buf.device:
            raise InvalidValueError("plain HTTP cannot reach device memory: the copy needs RDMA")
        if writable and not buf.writable:
            raise InvalidValueError("a GET into a read-only registration")
        return host_view(buf.address, buf.size)
    if describe(buf, has_gpu=False) is not None:
        raise InvalidValueError("plain HTTP moves host memory only: pass a buffer (bytearray, numpy array, ...)")
    view = memoryview(buf)
    if not view.contiguous:
        raise InvalidValueError("the buffer must be contiguous")
    if writable and view.readonly:
        raise InvalidValueError("a GET into a read-only buffer")
    return view.cast("B")


def _span_size(buffer_size: int, offset: int, span: Optional[Tuple[int, int]]) -> int:
    """The bytes a GET moves into a `buffer_size`-byte buffer at `offset`."""
    if offset < 0 or offset >= buffer_size:
        raise InvalidValueError(f"offset {offset} is outside the {buffer_size}-byte buffer")
    return buffer_size - offset if span is None else span[1] - span[0] + 1


def _put_size(buffer_size: int, offset: int, size: Optional[int]) -> int:
    """The bytes a PUT sends from a `buffer_size`-byte buffer at `offset` (None: to its end)."""
    if offset < 0 or offset >= buffer_size:
        raise InvalidValueError(f"offset {offset} is outside the {buffer_size}-byte buffer")
    size = buffer_size - offset if size is None else size
    if size <= 0 or offset + size > buffer_size:
        raise InvalidValueError(f"bytes {offset}..{offset}+{size} are not inside the {buffer_size}-byte buffer")
    return size


def _head_with_checksums(client: Any, bucket: str, key: str) -> Tuple[int, Dict[str, str]]:
    """HEAD of `bucket/key` with its checksums asked for: the size, and the reply's headers
    (lowercase names), from which the core reads the stored checksum a download is checked
    against."""
    head = client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    headers = head.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    return head["ContentLength"], _lower(headers)


def _lower(headers: Dict[str, str]) -> Dict[str, str]:
    return {str(k).lower(): str(v) for k, v in headers.items()}
