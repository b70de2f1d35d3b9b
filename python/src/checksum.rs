//! `hipobj._core.check_landed`: the end-to-end check (docs/protocol.md section 15) of one RDMA GET
//! into a registered host buffer, against the checksum its reply carried. The library's CRC code
//! (`hipobj::checksum`); Python only passes the reply's headers.

use crate::errors;
use crate::registration::Registration;
use hipobj::checksum::{ObjectChecksum, Unchecked, Verdict};
use pyo3::prelude::*;
use std::collections::HashMap;

/// What the check of `size` bytes at `offset` of `registration` found against the stored checksum
/// in `headers` (the GET reply's, lowercase names): "CRC64NVME verified" or "unchecked: <why>";
/// a mismatch raises `ChecksumMismatchError` (the buffer's bytes are not the object's).
/// `whole`: the GET asked for the whole object (a range has no checksum of its own).
#[pyfunction]
#[pyo3(signature = (registration, offset, size, headers, whole, what))]
pub fn check_landed(
    py: Python<'_>,
    registration: PyRef<'_, Registration>,
    offset: usize,
    size: usize,
    headers: HashMap<String, String>,
    whole: bool,
    what: &str,
) -> PyResult<String> {
    let stored = if whole {
        ObjectChecksum::from_headers(|name| headers.get(name).cloned())
    } else {
        Err(Unchecked::Range)
    };
    let stored = match stored {
        Ok(stored) => stored,
        Err(why) => return Ok(Verdict::Unchecked(why).to_string()),
    };
    if registration.is_device() {
        // Device memory is not readable from here; the check needs a host copy (not made).
        return Ok(Verdict::Unchecked(Unchecked::DeviceMemory).to_string());
    }
    let end = offset
        .checked_add(size)
        .filter(|end| *end <= registration.len())
        .ok_or_else(|| errors::invalid(format!("{size} bytes at {offset} exceed the buffer")))?;
    let base = registration.base();
    let value = py.allow_threads(|| {
        // SAFETY: `registration` is borrowed for this call, so its host memory (registered, hence
        // alive and pinned) stays valid; `offset..end` lies inside it (checked above). The transfer
        // that wrote it has completed; bytes are plain data, readable whatever they hold.
        let landed =
            unsafe { std::slice::from_raw_parts((base + offset) as *const u8, end - offset) };
        stored.algo.of(landed)
    });
    match stored.check(Some(value)) {
        Ok(algo) => Ok(Verdict::Verified(algo).to_string()),
        Err(m) => Err(errors::checksum_mismatch(py, what, &m)),
    }
}
