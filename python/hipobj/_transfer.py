"""boto3's transfer-manager shapes over the core's transfer engine: ``TransferConfig``, the S3
side of the engine (``Store``: each RDMA request as an ``S3Call``, the multipart bookkeeping, and
how a failure is retried), and the file and file-object copies ``Session`` offers."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from . import _core
from ._s3 import S3Call, get_params

MB = 1024 * 1024


@dataclass
class TransferConfig:
    """boto3.s3.transfer.TransferConfig's knobs that apply here. multipart_threshold: uploads
    larger than this go as a multipart upload; multipart_chunksize: bytes per part (and per
    ranged GET); max_concurrency: transfers in flight (None: the Session's max_transfers)."""

    multipart_threshold: int = 8 * MB
    multipart_chunksize: int = 8 * MB
    max_concurrency: Optional[int] = None
    # botocore's response_checksum_validation: "when_supported" (its default) checks every
    # download against the object's stored full-object CRC as the bytes land (CRC64NVME, CRC32C
    # or CRC32; a mismatch reads the object again once, then raises ChecksumMismatchError and
    # leaves the file as it was); "when_required" and "off" check nothing.
    checksum_mode: str = "when_supported"
    # How the bytes move (issue 39): "auto" (the Session's decision picks RDMA or plain HTTP per
    # copy by what it measured), "rdma" (the server reads or writes the registered memory), or
    # "http" (RDMA off: plain HTTP bodies from and into the same host memory, through the same
    # engine: parts, concurrency, retries and checksums as with RDMA). None: the Session's.
    transport: Optional[str] = None

    def __post_init__(self) -> None:
        if self.transport is not None:  # an unknown value is refused before anything moves
            self.transport = _core.transport_mode(self.transport)


@dataclass
class CopyResult:
    """What a file copy did: bytes moved, RDMA transfers, retries used, multipart or not, what
    the end-to-end check of a download found ("CRC64NVME verified", "unchecked: <why>"), and the
    path the Session's decision picked for it (``via``: "rdma" or "http"; None: nothing moved)."""

    size: int
    parts: int
    retries: int
    multipart: bool = False
    checksum: str = "not checked"
    via: Optional[str] = None


def retry_class(status: Optional[int], code: Optional[str], exc: Optional[BaseException]) -> Optional[str]:
    """The AWS SDKs' standard-mode class of a failure: "transient", "throttling", "timeout",
    "fatal", or None when nothing reached the server (the library's error decides). Python maps
    botocore's exceptions; the classes of statuses and S3 error codes are the library's
    (``_core.retry_class``)."""
    if isinstance(exc, (ReadTimeoutError, ConnectTimeoutError)):
        return "timeout"
    if isinstance(exc, (EndpointConnectionError, ConnectionClosedError, BotoConnectionError, ConnectionError)):
        return "transient"
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", status)
        code = exc.response.get("Error", {}).get("Code", code)
    if status is None:
        return None if exc is None else "fatal"
    answer = _core.retry_class(status, code)
    return None if answer == "fatal" and status < 300 else answer


class Store:
    """One object of one boto3 client, as the engine calls it (``_core.engine_*``). The engine
    asks ``pick(size, direction, destination)`` once per copy (the Session's decision, a
    ``_core.Ticket``) and sets ``transport`` to the path it answered, "rdma" or "http"."""

    def __init__(
        self,
        client: Any,
        bucket: str,
        key: str,
        extra_args: Optional[Dict[str, Any]] = None,
        negotiation: Any = None,
        pick: Optional[Callable[[int, str, str], Any]] = None,
    ):
        self.client, self.bucket, self.key = client, bucket, key
        self.negotiation = negotiation
        self._pick = pick
        self.transport: Optional[str] = None
        self.extra_args = dict(extra_args or {})
        self._parts: Dict[int, S3Call] = {}
        self._lock = threading.Lock()

    def pick(self, size: int, direction: str, destination: str) -> Any:
        """The path of this copy (``_core.Ticket``): `direction` "get"/"put", `destination`
        "host", "gpu" or "gpu-bounce"."""
        if self._pick is None:
            raise _core.InvalidValueError("this Store has no Session decision to pick a path")
        return self._pick(size, direction, destination)

    def request(
        self,
        kind: str,
        first: Optional[int],
        last: Optional[int],
        upload_id: Optional[str],
        number: Optional[int],
        checksum: Optional[Tuple[str, str]] = None,
    ) -> S3Call:
        """The S3Call of one RDMA request (its ``send`` is called once per token). A PUT's
        `checksum` is (algorithm, value) of the bytes it moves, computed by the core as they were
        read: sent as ``Checksum<ALGORITHM>`` (botocore then adds none of its own)."""
        if kind == "get":
            params = get_params(self.bucket, self.key, (first, last))
            return S3Call(self.client, "get_object", params, self.negotiation)
        base: Dict[str, Any] = {"Bucket": self.bucket, "Key": self.key, "Body": b""}
        if checksum is not None:
            base["Checksum" + checksum[0]] = checksum[1]
        if upload_id is None:
            return S3Call(self.client, "put_object", {**self.extra_args, **base}, self.negotiation)
        params = {**base, "UploadId": upload_id, "PartNumber": number}
        call = S3Call(self.client, "upload_part", params, self.negotiation)
        with self._lock:
            self._parts[number] = call  # the last one is the one that succeeded
        return call

    def create_upload(self, checksum: Optional[str] = None) -> str:
        """CreateMultipartUpload; `checksum` names the upload's FULL_OBJECT algorithm."""
        params: Dict[str, Any] = dict(self.extra_args)
        if checksum is not None and "ChecksumAlgorithm" not in params:
            params.update(ChecksumAlgorithm=checksum, ChecksumType="FULL_OBJECT")
        return self.client.create_multipart_upload(Bucket=self.bucket, Key=self.key, **params)["UploadId"]

    def complete_upload(
        self, upload_id: str, parts: List[Tuple[int, str]], checksum: Optional[Tuple[str, str]] = None
    ) -> None:
        listed = []
        for number, etag in parts:
            part: Dict[str, Any] = {"PartNumber": number, "ETag": etag}
            headers = self._parts[number].headers if number in self._parts else {}
            for name, value in headers.items():
                if name.startswith("x-amz-checksum-") and name != "x-amz-checksum-type":
                    part["Checksum" + name[len("x-amz-checksum-"):].upper()] = value
            listed.append(part)
        whole: Dict[str, Any] = {}
        if checksum is not None:
            whole = {"Checksum" + checksum[0]: checksum[1], "ChecksumType": "FULL_OBJECT"}
        self.client.complete_multipart_upload(
            Bucket=self.bucket, Key=self.key, UploadId=upload_id, MultipartUpload={"Parts": listed}, **whole
        )

    def abort_upload(self, upload_id: str) -> None:
        self.client.abort_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=upload_id)

    def head_part(self, number: int) -> Tuple[int, Dict[str, str]]:
        """HEAD of part `number` of the multipart object with its checksums asked for: the
        part's length and the reply's headers (lowercase names), from which the core reads the
        part's own checksum (a COMPOSITE object is checked part by part)."""
        head = self.client.head_object(Bucket=self.bucket, Key=self.key, PartNumber=number, ChecksumMode="ENABLED")
        headers = head.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        return head["ContentLength"], {str(k).lower(): str(v) for k, v in headers.items()}

    @staticmethod
    def retry_class(call: Optional[S3Call], exc: Optional[BaseException]) -> Optional[str]:
        status = code = None
        if call is not None:
            status = call.status
            exc = exc or call.exception
            code = (call.error_response() or {}).get("Error", {}).get("Code")
        return retry_class(status, code, exc)


class FileObjectWriter:
    """``write_at(pos, data)`` over a file object: seek + write under a lock (parts arrive in
    any order); a file object that cannot seek gets the parts in order (one at a time)."""

    def __init__(self, fileobj: Any):
        self.fileobj = fileobj
        self.start = fileobj.tell() if self.seekable else 0
        self._lock = threading.Lock()

    @property
    def seekable(self) -> bool:
        seekable = getattr(self.fileobj, "seekable", None)
        return bool(seekable and seekable())

    def write_at(self, pos: int, data: bytes) -> None:
        with self._lock:
            if self.seekable:
                self.fileobj.seek(self.start + pos)
            self.fileobj.write(data)
