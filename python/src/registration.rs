//! `hipobj._core.Registration`: one registered buffer and what keeps its memory alive.

use crate::buffer::PinnedBuffer;
use crate::errors::{self, to_py};
use hipobj::runtime::{self, MemoryKind, Runtime, MAX_REGISTRATION};
use pyo3::prelude::*;
use std::sync::{Arc, Weak};

/// A registered buffer (made by `Session.register`). While it is registered the memory is pinned:
/// a host buffer's export is held, a device array is referenced. `deregister()` (or leaving a
/// `with` block, or garbage collection) releases it.
#[pyclass(module = "hipobj._core", weakref)]
pub struct Registration {
    base: usize,
    len: usize,
    writable: bool,
    device: bool,
    runtime: Weak<Runtime>,
    registered: bool,
    /// The exported host buffer; `None` for memory named by a pointer.
    pinned: Option<PinnedBuffer>,
    /// The object whose memory this is (kept alive while registered).
    owner: Option<PyObject>,
}

impl Registration {
    pub fn base(&self) -> usize {
        self.base
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn writable(&self) -> bool {
        self.writable
    }
    /// The object whose memory this is, while registered.
    pub fn owner(&self, py: Python<'_>) -> Option<PyObject> {
        self.owner.as_ref().map(|o| o.clone_ref(py))
    }

    /// The runtime this buffer is registered with, if it is still registered and still current.
    pub fn live_runtime(&self) -> PyResult<Arc<Runtime>> {
        let current =
            runtime::current().ok_or_else(|| to_py(hipobj::error::Error::not_initialized()))?;
        match self.runtime.upgrade() {
            Some(rt) if self.registered && Arc::ptr_eq(&rt, &current) => Ok(rt),
            _ => Err(errors::BufNotRegisteredError::new_err(format!(
                "{:#x} is not registered (deregistered, or registered by a Session that has ended)",
                self.base
            ))),
        }
    }

    fn release(&mut self, py: Python<'_>) -> PyResult<()> {
        if !self.registered {
            return Ok(());
        }
        if let Some(rt) = self.runtime.upgrade() {
            let base = self.base;
            py.allow_threads(|| rt.deregister(base)).map_err(to_py)?;
        }
        // Without the runtime its MRs are gone with it.
        self.registered = false;
        self.pinned = None;
        self.owner = None;
        Ok(())
    }
}

/// Check the range as `hipObjBufRegister*` does, then register it.
fn register_range(
    py: Python<'_>,
    base: usize,
    len: usize,
    kind: MemoryKind,
) -> PyResult<Arc<Runtime>> {
    if base == 0 {
        return Err(errors::invalid("the buffer's address is NULL"));
    }
    if len == 0 {
        return Err(errors::invalid("the buffer is empty"));
    }
    if len > MAX_REGISTRATION {
        return Err(errors::SizeTooLargeError::new_err(format!(
            "{len} bytes: a registration holds at most {MAX_REGISTRATION} bytes"
        )));
    }
    if base.checked_add(len).is_none() {
        return Err(errors::invalid("the buffer wraps around the address space"));
    }
    let rt = runtime::current().ok_or_else(|| to_py(hipobj::error::Error::not_initialized()))?;
    py.allow_threads(|| rt.register(base, len, kind))
        .map_err(to_py)?;
    Ok(rt)
}

/// Register host memory that `obj` exports through the buffer protocol.
#[pyfunction]
pub fn register_buffer(py: Python<'_>, obj: Bound<'_, PyAny>) -> PyResult<Registration> {
    let pinned = PinnedBuffer::export(&obj)?;
    let (base, len, writable) = (pinned.addr(), pinned.len(), pinned.writable());
    let rt = register_range(py, base, len, MemoryKind::Host)?;
    Ok(Registration {
        base,
        len,
        writable,
        device: false,
        runtime: Arc::downgrade(&rt),
        registered: true,
        pinned: Some(pinned),
        owner: Some(obj.unbind()),
    })
}

/// Register `size` bytes at `address` (device memory, or host memory named by a pointer), keeping
/// `owner` alive while registered. `device` says whether the caller found it to be device memory.
#[pyfunction]
#[pyo3(signature = (address, size, owner, writable, device))]
pub fn register_pointer(
    py: Python<'_>,
    address: usize,
    size: usize,
    owner: PyObject,
    writable: bool,
    device: bool,
) -> PyResult<Registration> {
    let kind = if device {
        MemoryKind::Device
    } else {
        MemoryKind::Host
    };
    let rt = register_range(py, address, size, kind)?;
    Ok(Registration {
        base: address,
        len: size,
        writable,
        device,
        runtime: Arc::downgrade(&rt),
        registered: true,
        pinned: None,
        owner: Some(owner),
    })
}

#[pymethods]
impl Registration {
    /// Deregister now (a no-op when already deregistered). Raises BusyError while a timed-out
    /// staging copy still uses the buffer; the registration then stays as it was.
    fn deregister(&mut self, py: Python<'_>) -> PyResult<()> {
        self.release(py)
    }

    /// The buffer's address (host or device).
    #[getter]
    fn address(&self) -> usize {
        self.base
    }

    /// Its size in bytes.
    #[getter]
    fn size(&self) -> usize {
        self.len
    }

    /// Whether GETs may write it (a read-only buffer serves PUTs only).
    #[getter(writable)]
    fn is_writable(&self) -> bool {
        self.writable
    }

    /// Whether it was registered as device memory.
    #[getter(device)]
    pub fn is_device(&self) -> bool {
        self.device
    }

    /// Where its bytes are, as the transport decision's cells say: "host", "gpu" (device memory
    /// the NIC reaches directly) or "gpu-bounce" (device memory staged through host memory).
    #[getter]
    fn destination(&self) -> &'static str {
        crate::transport::destination_of(self.base)
    }

    /// Whether it is still registered with a live Session.
    #[getter(registered)]
    fn is_registered(&self) -> bool {
        self.registered && self.runtime.upgrade().is_some()
    }

    /// The object whose memory this is (None once deregistered).
    #[getter]
    fn obj(&self, py: Python<'_>) -> Option<PyObject> {
        self.owner.as_ref().map(|o| o.clone_ref(py))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &mut self,
        py: Python<'_>,
        _exc_type: PyObject,
        _exc: PyObject,
        _tb: PyObject,
    ) -> PyResult<bool> {
        self.release(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "<hipobj.Registration {:#x} {} bytes{}{}{}>",
            self.base,
            self.len,
            if self.device { " device" } else { " host" },
            if self.writable { "" } else { " read-only" },
            if self.registered { "" } else { " deregistered" }
        )
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let ok = Python::with_gil(|py| self.release(py));
        if let Err(e) = ok {
            // Still registered (the NIC may write it): keep the memory alive for good.
            tracing::warn!(
                "a dropped registration could not be deregistered ({e}); its memory is kept"
            );
            std::mem::forget(self.pinned.take());
            std::mem::forget(self.owner.take());
        }
    }
}
