"""Type stubs of the hipobj package."""

from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from ._core import (
    AlreadyInitializedError as AlreadyInitializedError,
    BufAlreadyRegisteredError as BufAlreadyRegisteredError,
    BufNotRegisteredError as BufNotRegisteredError,
    BusyError as BusyError,
    DmabufNotSupportedError as DmabufNotSupportedError,
    HipObjError as HipObjError,
    InternalError as InternalError,
    InvalidValueError as InvalidValueError,
    NicNotFoundError as NicNotFoundError,
    NotInitializedError as NotInitializedError,
    RdmaError as RdmaError,
    Registration as Registration,
    S3Error as S3Error,
    SizeTooLargeError as SizeTooLargeError,
)

__version__: str

RangeArg = Union[None, str, Tuple[int, int]]

class RdmaNotSupportedError(S3Error): ...
class NoDeviceError(InvalidValueError): ...

class TransferResult:
    via: str
    size: int
    requests: int
    etag: Optional[str]
    headers: Dict[str, str]
    reason: Optional[str]

class TransferConfig:
    multipart_threshold: int
    multipart_chunksize: int
    max_concurrency: Optional[int]
    checksum_mode: str
    transport: Optional[str]
    def __init__(
        self,
        multipart_threshold: int = ...,
        multipart_chunksize: int = ...,
        max_concurrency: Optional[int] = None,
        checksum_mode: str = ...,
        transport: Optional[str] = None,
    ) -> None: ...

class CopyResult:
    size: int
    parts: int
    retries: int
    multipart: bool
    checksum: str
    via: Optional[str]

class BatchEvent:
    cookie: int
    status: str
    bytes: int
    path: Optional[str]
    verified: bool
    retries: int
    http_status: int
    s3_code: Optional[str]
    error: Optional[BaseException]
    def check(self) -> "BatchEvent": ...

class Batch:
    @property
    def depth(self) -> int: ...
    def submit_get(self, bucket: str, key: str, into: Registration, *, offset: int = 0,
                   size: Optional[int] = None, object_offset: int = 0, cookie: Optional[int] = None) -> int: ...
    def submit_put(self, bucket: str, key: str, from_: Registration, *, offset: int = 0,
                   size: Optional[int] = None, cookie: Optional[int] = None) -> int: ...
    def submit(self, ops: Any) -> List[int]: ...
    def poll(self, min_events: int = 1, max_events: int = 64, timeout: Optional[float] = None) -> List[BatchEvent]: ...
    def run(self, ops: Any, timeout: Optional[float] = None) -> List[BatchEvent]: ...
    def cancel(self, cookie: int) -> None: ...
    def cancel_all(self) -> None: ...
    def head(self, bucket: str, key: Optional[str] = None) -> Tuple[int, int]: ...
    def counters(self) -> Dict[str, int]: ...
    def fileno(self) -> int: ...
    async def get(self, bucket: str, key: str, into: Registration, **kw: Any) -> BatchEvent: ...
    async def put(self, bucket: str, key: str, from_: Registration, **kw: Any) -> BatchEvent: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Batch": ...
    def __exit__(self, *exc: Any) -> None: ...

class Session:
    nic: Optional[str]
    nic_address: Optional[str]
    gpu: Optional[int]
    max_transfers: int
    def __init__(
        self,
        nic: Optional[str] = None,
        gpu: Optional[int] = None,
        max_transfers: Optional[int] = None,
        bind_http: bool = True,
        protocol: Optional[str] = None,
        transport: Optional[str] = None,
    ) -> None: ...
    @property
    def transport(self) -> str: ...
    def stats(self) -> Dict[str, Any]: ...
    def rails(self) -> List[Dict[str, Any]]: ...
    def open(self) -> "Session": ...
    def close(self) -> None: ...
    def __enter__(self) -> "Session": ...
    def __exit__(self, *exc: Any) -> None: ...
    def register(self, buf: Any) -> Registration: ...
    def batch(
        self,
        client: Any,
        depth: int = 64,
        verify: bool = True,
        transport: Optional[str] = None,
        **settings: Any,
    ) -> "Batch": ...
    def get_object(
        self,
        client: Any,
        bucket: str,
        key: str,
        into: Any,
        offset: int = 0,
        range: RangeArg = None,
        fallback: Optional[str] = None,
    ) -> TransferResult: ...
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
    ) -> TransferResult: ...
    def download_file(
        self,
        client: Any,
        bucket: str,
        key: str,
        filename: str,
        config: Optional[TransferConfig] = None,
        callback: Optional[Callable[[int], Any]] = None,
    ) -> CopyResult: ...
    def download_fileobj(
        self,
        client: Any,
        bucket: str,
        key: str,
        fileobj: Any,
        config: Optional[TransferConfig] = None,
        callback: Optional[Callable[[int], Any]] = None,
    ) -> CopyResult: ...
    def upload_file(
        self,
        client: Any,
        filename: str,
        bucket: str,
        key: str,
        config: Optional[TransferConfig] = None,
        callback: Optional[Callable[[int], Any]] = None,
        extra_args: Optional[Dict[str, Any]] = None,
    ) -> CopyResult: ...

def current_session() -> Session: ...
def bind_http_source(client: Any, address: Optional[str]) -> None: ...
def token_client_nic(token: str) -> str: ...
