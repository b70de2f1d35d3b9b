"""An fsspec filesystem for S3 over RDMA, protocol ``hipobj``: ``hipobj://bucket/key``.

    import pandas as pd
    df = pd.read_parquet("hipobj://data/part-0.parquet",
                         storage_options={"endpoint_url": "http://10.0.0.2:9000", "key": "...",
                                          "secret": "...", "nic": "rxe0"})

Every read and write of an object's bytes is one object copy, and takes the path the Session's
transport decision picks for it (``Session._pick``, the one that ``download_file`` and
``upload_file`` use, docs/transport.md): under ``transport="auto"`` by what the Session measured
on that endpoint for the copy's size class and direction (until it has measured, RDMA from 1 MiB
up and plain HTTP below), ``"rdma"`` always by RDMA, ``"http"`` always over plain HTTP. A copy by
RDMA goes through the transfer engine (ranged GETs straight into a registered buffer; uploads by
RDMA PUT or multipart upload); a copy over HTTP goes through the same engine with plain HTTP
bodies. Each outcome is recorded in the decision, so ``session.stats()`` counts fsspec's copies
with the Session's others (and ``fs.moved`` this filesystem's bytes by path). On a Session without
an RDMA runtime (no usable RDMA device, issue 39) every copy goes over plain HTTP. Listing, HEAD
and deletes are plain S3 calls. pandas, pyarrow
(``pyarrow.fs.PyFileSystem(pyarrow.fs.FSSpecHandler(fs))``) and anything else that opens files
through fsspec use it unchanged; the package registers the protocol with fsspec (an entry point,
and on import of this module).

Options: ``client`` (a boto3 S3 client) or ``endpoint_url``/``key``/``secret``/``region_name``
(a path-style client is made); ``session`` (default: the open ``hipobj.Session``; with ``nic``
and none open, this filesystem opens one for the process, of transport ``transport``);
``transport`` ("auto", "rdma" or "http"; None: the Session's) for this filesystem's copies;
``config`` (a ``hipobj.TransferConfig``: part size, concurrency, and ``transport`` too, which the
option of that name replaces)."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from typing import Any, Dict, List, Optional

import numpy as np
from fsspec import register_implementation
from fsspec.spec import AbstractBufferedFile, AbstractFileSystem

from . import _core
from ._core import ChecksumMismatchError, NotInitializedError
from ._pinned import download_host, upload
from ._session import Session, current_session
from ._transfer import CopyResult, TransferConfig

MB = 1 << 20
# What a read of a range of an object found (the library's words for it, docs/protocol.md 15.4).
_RANGE = "unchecked: a range of the object (its checksum is of the whole)"


class HipObjFileSystem(AbstractFileSystem):
    protocol = ("hipobj",)
    root_marker = ""
    cachable = False  # a boto3 client is not a cache key

    def __init__(
        self,
        client: Any = None,
        session: Optional[Session] = None,
        endpoint_url: Optional[str] = None,
        key: Optional[str] = None,
        secret: Optional[str] = None,
        region_name: str = "us-east-1",
        nic: Optional[str] = None,
        transport: Optional[str] = None,
        config: Optional[TransferConfig] = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        config = config or TransferConfig()
        if transport is not None:  # an unknown mode: InvalidValueError, before anything is made
            config = dataclasses.replace(config, transport=transport)
        self.client = client or _client(endpoint_url, key, secret, region_name)
        self._session = session
        self._nic = nic
        self.config = config
        # Bytes this filesystem moved, by the path the Session's decision picked for each copy.
        self.moved: Dict[str, int] = {"rdma": 0, "http": 0}
        # What the reads checked: a read of a whole object (a small file fsspec fetches at once,
        # cat_file, get_file) against the object's stored checksum, in ``config.checksum_mode``;
        # a range of an object (fsspec's blocks of a larger file, parquet's footer and column
        # chunks) has no checksum of its own and is counted unchecked. ``by_verdict``: reads by
        # what their check found ("CRC64NVME verified", "unchecked: a range of the object ...").
        self.checked: Dict[str, Any] = {"verified": 0, "unchecked": 0, "by_verdict": {}}

    @property
    def session(self) -> Session:
        if self._session is not None:
            return self._session
        try:
            return current_session()
        except NotInitializedError:
            if self._nic is None:
                raise
            self._session = Session(nic=self._nic, transport=self.config.transport).open()
            return self._session

    # names -----------------------------------------------------------------------------------
    @staticmethod
    def _split(path: str) -> tuple:
        path = HipObjFileSystem._strip_protocol(path).lstrip("/")
        bucket, _, key = path.partition("/")
        return bucket, key

    # listing -----------------------------------------------------------------------------------
    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> List[Any]:
        bucket, key = self._split(path)
        if not bucket:
            entries = [
                {"name": b["Name"], "size": 0, "type": "directory"} for b in self.client.list_buckets()["Buckets"]
            ]
        else:
            entries = self._list(bucket, key)
            if not entries:
                head = self._head(bucket, key)
                if head is None:
                    raise FileNotFoundError(path)
                entries = [head]
        return entries if detail else [e["name"] for e in entries]

    def _list(self, bucket: str, key: str) -> List[Dict[str, Any]]:
        prefix = key.rstrip("/") + "/" if key else ""
        entries: List[Dict[str, Any]] = []
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/")
        for page in pages:
            for p in page.get("CommonPrefixes", []):
                entries.append({"name": f"{bucket}/{p['Prefix'].rstrip('/')}", "size": 0, "type": "directory"})
            for o in page.get("Contents", []):
                entries.append({"name": f"{bucket}/{o['Key']}", "size": o["Size"], "type": "file", "ETag": o.get("ETag")})
        return entries

    def _head(self, bucket: str, key: str) -> Optional[Dict[str, Any]]:
        if not key:
            return None
        try:
            head = self.client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        except self.client.exceptions.ClientError as e:
            if e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                return None
            raise
        headers = head.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        # the stored checksum's headers, which a read of the whole object is checked against
        stored = {k.lower(): v for k, v in headers.items() if k.lower().startswith("x-amz-checksum-")}
        return {
            "name": f"{bucket}/{key}", "size": head["ContentLength"], "type": "file", "ETag": head.get("ETag"),
            "checksum_headers": stored,
        }

    def info(self, path: str, **kwargs: Any) -> Dict[str, Any]:
        bucket, key = self._split(path)
        head = self._head(bucket, key)
        if head is not None:
            return head
        if not key or self._list(bucket, key):
            return {"name": f"{bucket}/{key}".rstrip("/"), "size": 0, "type": "directory"}
        raise FileNotFoundError(path)

    # whole objects -------------------------------------------------------------------------------
    def cat_file(self, path: str, start: Optional[int] = None, end: Optional[int] = None, **kwargs: Any) -> bytes:
        bucket, key = self._split(path)
        info = self.info(path)
        size = info["size"]
        start = 0 if start is None else (start if start >= 0 else size + start)
        end = size if end is None else (min(end, size) if end >= 0 else size + end)
        return self.read_range(bucket, key, start, end, _whole(info, start, end))

    def read_range(self, bucket: str, key: str, start: int, end: int, stored: Optional[Dict[str, str]] = None) -> bytes:
        """Object bytes start..end (exclusive), by the path the Session's decision picks for this
        copy: by RDMA straight into a buffer registered for it, or over plain HTTP, each through
        the engine (ranged GETs of ``multipart_chunksize``, retried as the engine does). With
        `stored` (the HEAD's checksum headers; the bytes are the whole object) what landed is
        checked against the stored checksum in ``config.checksum_mode``: a mismatch reads it
        again once, then raises ChecksumMismatchError. Counted in ``checked``."""
        n = end - start
        if n <= 0:
            return b""
        session = self.session
        ticket = session._pick(self.client, n, "get", "host", self.config.transport)
        buf = np.empty(n, dtype=np.uint8)
        mode = self.config.checksum_mode
        if ticket.path == "rdma":
            with session.register(buf) as reg:
                chunk, concurrency = self.config.multipart_chunksize, session._concurrency(self.config)
                for attempt in (1, 2):
                    store = session._store(self.client, bucket, key, config=self.config, ticket=ticket)
                    _core.engine_download_into(store, reg, 0, start, n, chunk, concurrency)
                    try:
                        what = f"s3://{bucket}/{key}"
                        verdict = _core.check_landed(reg, 0, n, stored or {}, stored is not None, what, mode)
                        break
                    except ChecksumMismatchError:
                        if attempt == 2:
                            raise
        else:
            try:
                done = download_host(
                    session, self.client, bucket, key, memoryview(buf), start, self.config, ticket=ticket, stored=stored
                )
            except ChecksumMismatchError as e:  # the engine's, which names no object
                err = ChecksumMismatchError(f"s3://{bucket}/{key}: {e}")
                err.algorithm, err.expected, err.actual = e.algorithm, e.expected, e.actual
                raise err from e
            if stored is not None:
                verdict = done.checksum
            else:
                verdict = _RANGE if mode == "when_supported" else "unchecked: checksums off"
        self.moved[ticket.path] += n
        self._checked(verdict)
        return buf.tobytes()

    def _checked(self, verdict: str) -> None:
        """Count what one read's check found."""
        self.checked["verified" if " verified" in verdict else "unchecked"] += 1
        by = self.checked["by_verdict"]
        by[verdict] = by.get(verdict, 0) + 1

    def pipe_file(self, path: str, value: bytes, **kwargs: Any) -> None:
        bucket, key = self._split(path)
        self.write_object(bucket, key, bytes(value))

    def write_object(self, bucket: str, key: str, data: bytes) -> None:
        """`data` as the object, by the path the Session's decision picks (the engine: one PUT or
        a multipart upload); an empty object is one plain PUT (no bytes to move)."""
        if not data:
            self.client.put_object(Bucket=bucket, Key=key, Body=b"")
            return
        self._moved(upload(self.session, self.client, bucket, key, [data], self.config))

    def put_file(self, lpath: str, rpath: str, callback: Any = None, **kwargs: Any) -> None:
        if os.path.isdir(lpath):
            return
        bucket, key = self._split(rpath)
        self._moved(self.session.upload_file(self.client, lpath, bucket, key, config=self.config))

    def get_file(self, rpath: str, lpath: str, callback: Any = None, outfile: Any = None, **kwargs: Any) -> None:
        bucket, key = self._split(rpath)
        if self.info(rpath)["size"] == 0:
            open(lpath, "wb").close()
            return
        copy = self.session.download_file(self.client, bucket, key, lpath, config=self.config)
        self._moved(copy)
        self._checked(copy.checksum)

    def _moved(self, copy: CopyResult) -> None:
        """Count what an engine copy moved, on the path its decision picked."""
        if copy.via is not None:
            self.moved[copy.via] += copy.size

    def rm_file(self, path: str) -> None:
        bucket, key = self._split(path)
        self.client.delete_object(Bucket=bucket, Key=key)

    def _rm(self, path: str) -> None:
        self.rm_file(path)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        bucket, key = self._split(path)
        if not key:
            self.client.create_bucket(Bucket=bucket)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        bucket, _ = self._split(path)
        try:
            self.mkdir(bucket)
        except self.client.exceptions.BucketAlreadyOwnedByYou:
            if not exist_ok:
                raise

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: Any = None,
        autocommit: bool = True,
        cache_options: Any = None,
        **kwargs: Any,
    ) -> "HipObjFile":
        return HipObjFile(self, path, mode, block_size=block_size or "default", autocommit=autocommit, cache_options=cache_options, **kwargs)


class HipObjFile(AbstractBufferedFile):
    """A file of a HipObjFileSystem: reads through fsspec's cache, each fetch one copy on the path
    the Session's decision picks; writes gathered in a local temporary file and uploaded at close."""

    DEFAULT_BLOCK_SIZE = 8 * MB

    def _fetch_range(self, start: int, end: int) -> bytes:
        bucket, key = self.fs._split(self.path)
        end = min(end, self.size)
        return self.fs.read_range(bucket, key, start, end, _whole(self.details, start, end))

    def _initiate_upload(self) -> None:
        self._spool = tempfile.NamedTemporaryFile(prefix="hipobj-fsspec-")

    def _upload_chunk(self, final: bool = False) -> bool:
        self._spool.write(self.buffer.getbuffer())
        if final:
            self._spool.flush()
            try:
                self.fs.put_file(self._spool.name, self.path)
            finally:
                self._spool.close()
        return True


def _whole(info: Dict[str, Any], start: int, end: int) -> Optional[Dict[str, str]]:
    """The stored checksum's headers to check a read of `start..end` against: only a read of the
    whole object has one (HEAD's, in `info`)."""
    if start == 0 and end == info.get("size") and "checksum_headers" in info:
        return info["checksum_headers"]
    return None


def _client(endpoint_url: Optional[str], key: Optional[str], secret: Optional[str], region_name: str) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name=region_name,
        config=Config(s3={"addressing_style": "path"}),
    )


register_implementation("hipobj", HipObjFileSystem, clobber=True)
