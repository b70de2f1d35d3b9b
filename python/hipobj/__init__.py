"""hipObject for Python: S3 objects straight between a storage server and host or GPU memory
over RDMA, with your own boto3 client.

    import boto3, hipobj, numpy as np

    s3 = boto3.client("s3", endpoint_url="http://10.0.0.2:9000", ...)
    with hipobj.Session(nic="rxe0") as session:
        buf = np.empty(64 << 20, dtype=np.uint8)
        with session.register(buf) as reg:
            result = session.get_object(s3, "bucket", "key", into=reg)
            print(result.size, "bytes by", result.via)

The server moves the bytes with one-sided RDMA; boto3 carries only the request (the token goes in
through botocore's ``before-sign`` event, so SigV4 signs it) and the reply header. See
python/README.md for the whole API.
"""

from . import _core
from ._core import (
    AlreadyInitializedError,
    BufAlreadyRegisteredError,
    BufNotRegisteredError,
    BusyError,
    ChecksumMismatchError,
    DmabufNotSupportedError,
    HipObjError,
    InternalError,
    InvalidValueError,
    NicNotFoundError,
    NotInitializedError,
    RdmaError,
    Registration,
    S3Error,
    SizeTooLargeError,
)
from ._batch import Batch, BatchEvent
from ._errors import NoDeviceError, RdmaNotSupportedError
from ._session import Session, TransferResult, current_session
from ._s3 import bind_http_source, token_client_nic
from ._transfer import CopyResult, TransferConfig

__version__ = _core.version()

__all__ = [
    "AlreadyInitializedError",
    "Batch",
    "BatchEvent",
    "BufAlreadyRegisteredError",
    "BufNotRegisteredError",
    "BusyError",
    "ChecksumMismatchError",
    "CopyResult",
    "DmabufNotSupportedError",
    "HipObjError",
    "InternalError",
    "InvalidValueError",
    "NicNotFoundError",
    "NoDeviceError",
    "NotInitializedError",
    "RdmaError",
    "RdmaNotSupportedError",
    "Registration",
    "S3Error",
    "Session",
    "SizeTooLargeError",
    "TransferConfig",
    "TransferResult",
    "bind_http_source",
    "current_session",
    "token_client_nic",
]
