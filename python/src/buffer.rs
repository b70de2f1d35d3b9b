//! Host memory through the buffer protocol (PEP 3118), held for as long as it is registered.
//!
//! PyO3's `PyBuffer` is not available for an abi3 build below Python 3.11, where `Py_buffer`,
//! `PyObject_GetBuffer` and `PyBuffer_Release` joined the limited API. Those three have had the
//! same layout and symbols since Python 3.3 and every CPython >= 3.9 exports them, so this module
//! declares them itself (the declaration below is CPython's `Include/pybuffer.h`).

use crate::errors;
use pyo3::prelude::*;
use std::ffi::{c_char, c_int, c_void};

/// CPython's `Py_buffer` (`Include/pybuffer.h`).
#[repr(C)]
struct PyBufferView {
    buf: *mut c_void,
    obj: *mut pyo3::ffi::PyObject,
    len: isize,
    itemsize: isize,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut isize,
    strides: *mut isize,
    suboffsets: *mut isize,
    internal: *mut c_void,
}

const PYBUF_SIMPLE: c_int = 0;
const PYBUF_WRITABLE: c_int = 0x0001;

extern "C" {
    fn PyObject_GetBuffer(
        obj: *mut pyo3::ffi::PyObject,
        view: *mut PyBufferView,
        flags: c_int,
    ) -> c_int;
    fn PyBuffer_Release(view: *mut PyBufferView);
}

/// An exported, C-contiguous buffer: the exporter cannot move or resize it until this is dropped
/// (a `bytearray` refuses to resize, an `mmap` to close, while an export exists).
pub struct PinnedBuffer {
    view: Box<PyBufferView>,
}

// SAFETY: the view is only read (its address and length) and released with the GIL held (Drop
// takes it); Py_buffer holds no thread-affine state.
unsafe impl Send for PinnedBuffer {}
// SAFETY: shared access only reads the plain address/length fields.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    /// Export `obj`'s buffer, writable if it can be (a read-only buffer only serves PUTs).
    pub fn export(obj: &Bound<'_, PyAny>) -> PyResult<PinnedBuffer> {
        match Self::export_with(obj, PYBUF_WRITABLE) {
            Ok(b) => Ok(b),
            Err(_) => Self::export_with(obj, PYBUF_SIMPLE),
        }
    }

    fn export_with(obj: &Bound<'_, PyAny>, flags: c_int) -> PyResult<PinnedBuffer> {
        let mut view = Box::new(PyBufferView {
            buf: std::ptr::null_mut(),
            obj: std::ptr::null_mut(),
            len: 0,
            itemsize: 0,
            readonly: 0,
            ndim: 0,
            format: std::ptr::null_mut(),
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            suboffsets: std::ptr::null_mut(),
            internal: std::ptr::null_mut(),
        });
        // SAFETY: `obj` is a live object (we hold the GIL through `Bound`), `view` is a writable
        // Py_buffer; PyBUF_SIMPLE asks for a C-contiguous byte view or fails with an exception set.
        let rc = unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) };
        if rc != 0 {
            return Err(PyErr::take(obj.py()).unwrap_or_else(|| {
                errors::invalid("the object does not support the buffer protocol")
            }));
        }
        Ok(PinnedBuffer { view })
    }

    pub fn addr(&self) -> usize {
        self.view.buf as usize
    }

    pub fn len(&self) -> usize {
        usize::try_from(self.view.len).unwrap_or(0)
    }

    pub fn writable(&self) -> bool {
        self.view.readonly == 0
    }

    /// The exported bytes, for reading while the GIL is held.
    pub fn bytes(&self) -> &[u8] {
        if self.len() == 0 {
            return &[];
        }
        // SAFETY: the export keeps `len` bytes at `buf` alive and unmoved until `self` is dropped
        // (PyObject_GetBuffer's contract for a C-contiguous PyBUF_SIMPLE view), and the returned
        // slice borrows `self`. Only readers use it, with the GIL held.
        unsafe { std::slice::from_raw_parts(self.view.buf as *const u8, self.len()) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        Python::with_gil(|_py| {
            // SAFETY: the view was filled by a successful PyObject_GetBuffer and is released
            // exactly once, with the GIL held.
            unsafe { PyBuffer_Release(&mut *self.view) };
        });
    }
}
