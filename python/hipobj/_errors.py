"""Errors of the Python layer, under the per-code classes of the native module."""

from ._core import InvalidValueError, S3Error


class RdmaNotSupportedError(S3Error):
    """The server answered 501: it has no RDMA (or RDMA is off). Pass ``fallback="http"`` to do
    the transfer over plain HTTP instead; the result then says ``via == "http"``."""


class NoDeviceError(InvalidValueError):
    """A device buffer (``__cuda_array_interface__`` or a GPU DLPack tensor) was given, but the
    Session has no HIP device (no HIP runtime, or no GPU on this machine)."""
