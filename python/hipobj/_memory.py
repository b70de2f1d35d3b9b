"""What memory a Python object names: host memory through the buffer protocol, device memory
through ``__cuda_array_interface__`` (ROCm PyTorch exposes HIP pointers this way) or DLPack."""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Any, Optional

from ._errors import NoDeviceError
from ._core import InvalidValueError

# DLPack device types (dlpack.h)
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_ROCM, _DL_ROCM_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 10, 11, 13
_DL_DEVICE = {_DL_CUDA, _DL_ROCM, _DL_CUDA_MANAGED}
_DL_HOST = {_DL_CPU, _DL_CUDA_HOST, _DL_ROCM_HOST}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


@dataclass
class Memory:
    """Memory named by a pointer: where, how big, whether writable, on a device, and the object
    that keeps it alive."""

    address: int
    size: int
    writable: bool
    device: bool
    owner: Any
    how: str


def _contiguous(shape: tuple, strides: Optional[tuple], itemsize: int) -> bool:
    if strides is None:
        return True
    expected = itemsize
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim != 1 and stride != expected:
            return False
        expected *= dim
    return True


def _from_cuda_array_interface(obj: Any) -> Memory:
    cai = obj.__cuda_array_interface__
    address, readonly = cai["data"]
    shape = tuple(cai["shape"])
    itemsize = int(cai["typestr"][2:])
    if not _contiguous(shape, cai.get("strides"), itemsize):
        raise InvalidValueError("the device array is not C-contiguous")
    size = math.prod(shape) * itemsize
    return Memory(int(address), size, not readonly, True, obj, "__cuda_array_interface__")


def _from_dlpack(obj: Any) -> Memory:
    capsule = obj.__dlpack__()
    tensor = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    itemsize = (tensor.dtype.bits * tensor.dtype.lanes + 7) // 8
    strides = None
    if tensor.strides:
        strides = tuple(tensor.strides[i] * itemsize for i in range(tensor.ndim))
    if not _contiguous(shape, strides, itemsize):
        raise InvalidValueError("the DLPack tensor is not C-contiguous")
    kind = tensor.device.device_type
    if kind not in _DL_DEVICE | _DL_HOST:
        raise InvalidValueError(f"DLPack device type {kind} is neither host nor a HIP/CUDA GPU")
    address = (tensor.data or 0) + tensor.byte_offset
    size = math.prod(shape) * itemsize
    # The capsule keeps the tensor's memory alive (its deleter runs when it is collected).
    return Memory(address, size, True, kind in _DL_DEVICE, (obj, capsule), "DLPack")


def describe(obj: Any, has_gpu: bool) -> Optional[Memory]:
    """The memory `obj` names by pointer, or None when it is host memory for the buffer protocol.
    Raises NoDeviceError for device memory when there is no HIP device."""
    mem: Optional[Memory] = None
    if hasattr(obj, "__cuda_array_interface__"):
        mem = _from_cuda_array_interface(obj)
    else:
        try:
            memoryview(obj).release()
            return None
        except TypeError:
            pass
        if hasattr(obj, "__dlpack__"):
            mem = _from_dlpack(obj)
    if mem is None:
        raise InvalidValueError(
            f"cannot register {type(obj).__name__}: it has neither the buffer protocol, "
            "__cuda_array_interface__ nor __dlpack__"
        )
    if mem.device and not has_gpu:
        raise NoDeviceError(
            f"{type(obj).__name__} is GPU memory ({mem.how}) but HIP has no device here "
            "(no HIP runtime or no GPU): register host memory, or open the Session on a GPU host"
        )
    return mem


def host_view(address: int, size: int) -> memoryview:
    """A byte memoryview of host memory the caller keeps alive (a registered buffer)."""
    return memoryview((ctypes.c_char * size).from_address(address)).cast("B")
