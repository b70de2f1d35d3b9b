"""hipobj.Batch: many GETs and PUTs in flight from one thread (include/hipobj_batch.h, docs/batch.md).

The queue sends its own S3 requests (SigV4, the token, RDMA or plain HTTP per operation as its
transport decides, the AWS standard retries); the buffers are Registrations of the Session.
Three ways to use it: ``submit_get``/``submit_put`` and ``poll`` (one scheduler thread),
``run(ops)`` (a batch, waited for), and ``await get(...)``/``await put(...)`` (asyncio: the queue's
eventfd is watched by the running loop)."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from . import _core
from ._core import BusyError, InvalidValueError, Registration


@dataclass
class BatchEvent:
    """How one operation ended. status: "complete", "failed" or "cancelled". path: "rdma-v1",
    "rdma-v2", "rdma", "http", or None when it never started. verified: the landed bytes had the
    stored checksum (a whole-object GET). error: the exception of a failure (its class by code),
    with the server's http_status and s3_code when it refused."""

    cookie: int
    status: str
    bytes: int
    path: Optional[str]
    verified: bool
    retries: int
    http_status: int
    s3_code: Optional[str]
    error: Optional[BaseException]

    def check(self) -> "BatchEvent":
        """The event itself when complete; else raises its error (or CancelledError)."""
        if self.status == "complete":
            return self
        if self.status == "cancelled":
            raise asyncio.CancelledError(f"operation {self.cookie} was cancelled")
        assert self.error is not None
        raise self.error


def _event(d: Dict[str, Any]) -> BatchEvent:
    return BatchEvent(**d)


def _client_settings(client: Any) -> Dict[str, Any]:
    """endpoint, keys and region of a boto3 S3 client (its resolved, frozen credentials)."""
    settings: Dict[str, Any] = {"endpoint": str(client.meta.endpoint_url).rstrip("/")}
    creds = client._request_signer._credentials
    if creds is not None:
        frozen = creds.get_frozen_credentials()
        if frozen.token:
            raise InvalidValueError("temporary credentials (a session token) are not supported by a Batch yet")
        settings["access_key"], settings["secret_key"] = frozen.access_key, frozen.secret_key
    settings["region"] = client.meta.region_name
    return settings


class Batch:
    """A batch queue of the open Session (``Session.batch(...)``). ``depth`` operations at most
    between submit and poll; ``transport``: "auto", "rdma" or "http" (None: HIPOBJ_TRANSPORT, else
    "auto"). A context manager: leaving it cancels what is left and waits for the workers."""

    def __init__(self, queue: Any):
        self._q = queue
        self._cookies = itertools.count(1)
        self._futures: Dict[int, "asyncio.Future[BatchEvent]"] = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._room: Optional[asyncio.Event] = None
        self._closed = False

    @property
    def depth(self) -> int:
        return self._q.depth

    # one scheduler thread ------------------------------------------------------------------
    def submit_get(self, bucket: str, key: str, into: Registration, *, offset: int = 0,
                   size: Optional[int] = None, object_offset: int = 0, cookie: Optional[int] = None) -> int:
        """Queue a GET of ``size`` bytes (default: the rest of ``into`` from ``offset``) of the
        object from ``object_offset`` into ``into`` at ``offset``: its cookie. BusyError when
        the queue is full."""
        return self.submit([("get", bucket, key, into, offset, size, object_offset, cookie)])[0]

    def submit_put(self, bucket: str, key: str, from_: Registration, *, offset: int = 0,
                   size: Optional[int] = None, cookie: Optional[int] = None) -> int:
        """Queue a PUT of ``size`` bytes of ``from_`` at ``offset`` as the whole object: its cookie."""
        return self.submit([("put", bucket, key, from_, offset, size, 0, cookie)])[0]

    def submit(self, ops: Sequence[Tuple[Any, ...]]) -> List[int]:
        """Queue operations, all or none: each ``(op, bucket, key, registration, offset, size,
        object_offset, cookie)`` with ``op`` "get" or "put", ``size`` None for the rest of the
        registration and ``cookie`` None for a new one. Their cookies."""
        native, cookies = [], []
        for op, bucket, key, reg, offset, size, object_offset, cookie in ops:
            if not isinstance(reg, Registration):
                raise InvalidValueError("a Batch operation's buffer is a Registration (Session.register)")
            if size is None:
                size = reg.size - offset
            cookie = next(self._cookies) if cookie is None else int(cookie)
            native.append((op, bucket, key, object_offset, size, reg, offset, cookie))
            cookies.append(cookie)
        self._q.submit(native)
        return cookies

    def poll(self, min_events: int = 1, max_events: int = 64, timeout: Optional[float] = None) -> List[BatchEvent]:
        """Up to ``max_events`` events, once ``min_events`` are ready or ``timeout`` seconds
        passed (None: no limit). Each event is handed out once."""
        return [_event(d) for d in self._q.poll(min_events, max_events, timeout)]

    def run(self, ops: Iterable[Tuple[Any, ...]], timeout: Optional[float] = None) -> List[BatchEvent]:
        """Every operation of ``ops`` (as ``submit`` takes them), at most ``depth`` in flight, and
        their events in the order of ``ops``."""
        pending = list(ops)
        order: List[int] = []
        ended: Dict[int, BatchEvent] = {}
        in_flight = 0
        while pending or in_flight:
            room = self.depth - in_flight
            if pending and room > 0:
                take, pending = pending[:room], pending[room:]
                order += self.submit(take)
                in_flight += len(take)
            for e in self.poll(1, self.depth, timeout):
                ended[e.cookie] = e
                in_flight -= 1
        return [ended[c] for c in order]

    def cancel(self, cookie: int) -> None:
        """Cancel one operation: returns once nothing touches its buffer any more."""
        self._q.cancel(cookie)

    def cancel_all(self) -> None:
        self._q.cancel_all()

    def head(self, bucket: str, key: Optional[str] = None) -> Tuple[int, int]:
        """``(http_status, size)`` of an object, or of the bucket when ``key`` is None."""
        return self._q.head(bucket, key)

    def counters(self) -> Dict[str, int]:
        """Operations completed over each path: ``{"rdma": n, "http": n}``."""
        return self._q.counters()

    def fileno(self) -> int:
        """The queue's eventfd (readable while events wait)."""
        return self._q.event_fd()

    # asyncio -------------------------------------------------------------------------------
    async def get(self, bucket: str, key: str, into: Registration, **kw: Any) -> BatchEvent:
        """GET as ``submit_get``, awaited: the event of a complete operation; raises the
        failure's error. Waits for room when the queue is full."""
        return await self._await(("get", bucket, key, into, kw.get("offset", 0), kw.get("size"),
                                  kw.get("object_offset", 0), None))

    async def put(self, bucket: str, key: str, from_: Registration, **kw: Any) -> BatchEvent:
        """PUT as ``submit_put``, awaited."""
        return await self._await(("put", bucket, key, from_, kw.get("offset", 0), kw.get("size"), 0, None))

    async def _await(self, op: Tuple[Any, ...]) -> BatchEvent:
        loop = self._watch()
        while True:
            try:
                (cookie,) = self.submit([op])
                break
            except BusyError:
                assert self._room is not None
                self._room.clear()
                await self._room.wait()
        future: "asyncio.Future[BatchEvent]" = loop.create_future()
        self._futures[cookie] = future
        try:
            event = await asyncio.shield(future)
        except asyncio.CancelledError:
            # The awaiting task was cancelled: so is the operation (its buffer is free once
            # cancel returns), and its event is drained by the reader.
            if not future.done():
                self._q.cancel(cookie)
            raise
        return event.check()

    def _watch(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop, self._room = loop, asyncio.Event()
            loop.add_reader(self.fileno(), self._drain)
        elif self._loop is not loop:
            raise InvalidValueError("a Batch is awaited from one event loop")
        return loop

    def _drain(self) -> None:
        for e in self.poll(0, max(self.depth, 1), 0):
            future = self._futures.pop(e.cookie, None)
            if future is not None and not future.done():
                future.set_result(e)
        if self._room is not None:
            self._room.set()

    # lifetime ------------------------------------------------------------------------------
    def close(self) -> None:
        """Cancel what is left and wait until no worker holds a buffer."""
        if self._closed:
            return
        self._closed = True
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self.fileno())
        self._q.close()
        for future in self._futures.values():
            if not future.done():
                future.cancel()
        self._futures.clear()

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_batch(client_or_endpoint: Any, depth: int, verify: bool, transport: Optional[str],
               **settings: Any) -> Batch:
    """A Batch whose queue sends to a boto3 client's endpoint with its keys and region, or to an
    endpoint URL with ``settings`` (access_key, secret_key, region, profile, ca_bundle)."""
    if isinstance(client_or_endpoint, str):
        base = {"endpoint": client_or_endpoint.rstrip("/")}
    else:
        base = _client_settings(client_or_endpoint)
    base.update({k: v for k, v in settings.items() if v is not None})
    return Batch(_core.BatchQueue(depth=depth, verify=verify, transport=transport, **base))
