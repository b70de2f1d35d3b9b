//! End-to-end checksums from Python (docs/protocol.md section 15), on the library's CRC code
//! (`hipobj::checksum`): the checksum mode's names, what a download is checked against, and
//! `check_landed`, the check of one RDMA GET into a registered buffer (host or device memory). Python only passes
//! the mode and the replies' headers.

use crate::buffer::PinnedBuffer;
use crate::errors;
use crate::registration::Registration;
use hipobj::checksum::{ChecksumMode, CrcAlgo, ObjectChecksum, Unchecked, Verdict};
use pyo3::prelude::*;
use std::collections::HashMap;

fn mode(name: &str) -> PyResult<ChecksumMode> {
    ChecksumMode::parse(name).map_err(errors::invalid)
}

/// `_core.checksum_mode(name)`: raises InvalidValueError for a mode that is not one of botocore's
/// `response_checksum_validation` values (called before anything moves).
#[pyfunction]
pub fn checksum_mode(name: &str) -> PyResult<()> {
    mode(name).map(drop)
}

/// What a download is checked against in the mode `mode_name`: the stored checksum that a reply's
/// `headers` (lowercase names) carry, or why there is none.
pub fn stored_checksum(
    mode_name: &str,
    headers: Option<HashMap<String, String>>,
) -> PyResult<Result<ObjectChecksum, Unchecked>> {
    let headers = headers.unwrap_or_default();
    let stored = ObjectChecksum::from_headers(|name| headers.get(name).cloned());
    Ok(mode(mode_name)?.check_against(stored))
}

/// What the check of `size` bytes at `offset` of `registration` found against the stored checksum
/// in `headers` (the GET reply's, lowercase names): "CRC64NVME verified" or "unchecked: <why>";
/// a mismatch raises `ChecksumMismatchError` (the buffer's bytes are not the object's).
/// `whole`: the GET asked for the whole object (a range has no checksum of its own);
/// `checksum_mode`: as `stored_checksum`'s.
#[pyfunction]
#[pyo3(signature = (registration, offset, size, headers, whole, what, checksum_mode))]
#[allow(clippy::too_many_arguments)]
pub fn check_landed(
    py: Python<'_>,
    registration: PyRef<'_, Registration>,
    offset: usize,
    size: usize,
    headers: HashMap<String, String>,
    whole: bool,
    what: &str,
    checksum_mode: &str,
) -> PyResult<String> {
    let stored = if whole {
        stored_checksum(checksum_mode, Some(headers))?
    } else {
        mode(checksum_mode)?.check_against(Err(Unchecked::Range))
    };
    let stored = match stored {
        Ok(stored) => stored,
        Err(why) => return Ok(Verdict::Unchecked(why).to_string()),
    };
    // Read where the bytes landed: host memory in place, device memory back through a host
    // bounce (the library's one reader of a registration's bytes).
    let runtime = registration.live_runtime()?;
    let base = registration.base();
    let value = py
        .allow_threads(|| runtime.crc_of_registered(base, offset, size, stored.algo))
        .map_err(errors::to_py)?;
    match stored.check(Some(value)) {
        Ok(algo) => Ok(Verdict::Verified(algo.into()).to_string()),
        Err(m) => Err(errors::checksum_mismatch(py, what, &m)),
    }
}

fn algorithm_named(algorithm: &str) -> PyResult<CrcAlgo> {
    CrcAlgo::parse(algorithm).ok_or_else(|| {
        errors::invalid(format!(
            "checksum algorithm {algorithm:?}: expected one of CRC64NVME, CRC32C, CRC32"
        ))
    })
}

/// The CRC (`algorithm`: CRC64NVME, CRC32C or CRC32) of `size` bytes at `offset` of
/// `registration`, S3-encoded as in `x-amz-checksum-*` headers, read where the bytes are (host
/// memory in place, device memory through a host bounce), the GIL released meanwhile.
#[pyfunction]
#[pyo3(signature = (registration, offset, size, algorithm="CRC64NVME"))]
pub fn crc_of(
    py: Python<'_>,
    registration: PyRef<'_, Registration>,
    offset: usize,
    size: usize,
    algorithm: &str,
) -> PyResult<String> {
    let algo = algorithm_named(algorithm)?;
    let runtime = registration.live_runtime()?;
    let base = registration.base();
    let value = py
        .allow_threads(|| runtime.crc_of_registered(base, offset, size, algo))
        .map_err(errors::to_py)?;
    Ok(algo.encode(value))
}

/// The CRC (`algorithm`: CRC64NVME, CRC32C or CRC32) of the bytes of `data` (anything with the
/// buffer protocol, C-contiguous: bytes, a memoryview, a numpy array, a CPU tensor's numpy view),
/// S3-encoded: what `crc_of` computes for host memory that is not registered (a Session without
/// an RDMA runtime). Computed with the GIL held.
#[pyfunction]
#[pyo3(signature = (data, algorithm="CRC64NVME"))]
pub fn crc_of_buffer(data: &Bound<'_, PyAny>, algorithm: &str) -> PyResult<String> {
    let algo = algorithm_named(algorithm)?;
    let view = PinnedBuffer::export(data)?;
    Ok(algo.encode(algo.of(view.bytes())))
}

/// The block size of `crc_blocks`: refused when 0.
fn block_size(block: usize) -> PyResult<usize> {
    if block == 0 {
        return Err(errors::invalid("a CRC block size is at least 1 byte"));
    }
    Ok(block)
}

/// The CRC (`algorithm`) of each `block` bytes of the `size` bytes at `offset` of `registration`
/// (the last block shorter when `block` does not divide `size`; none when `size` is 0),
/// S3-encoded, read where the bytes are as `crc_of` reads them, the GIL released meanwhile: a
/// writer's record of what it stored, from which `crc_combine` gives the CRC of any run of whole
/// blocks (the check of a ranged read widened to them).
#[pyfunction]
#[pyo3(signature = (registration, offset, size, block, algorithm="CRC64NVME"))]
pub fn crc_blocks(
    py: Python<'_>,
    registration: PyRef<'_, Registration>,
    offset: usize,
    size: usize,
    block: usize,
    algorithm: &str,
) -> PyResult<Vec<String>> {
    let algo = algorithm_named(algorithm)?;
    let block = block_size(block)?;
    let runtime = registration.live_runtime()?;
    let base = registration.base();
    let values = py
        .allow_threads(|| {
            (0..size)
                .step_by(block)
                .map(|at| runtime.crc_of_registered(base, offset + at, block.min(size - at), algo))
                .collect::<Result<Vec<u64>, _>>()
        })
        .map_err(errors::to_py)?;
    Ok(values.into_iter().map(|v| algo.encode(v)).collect())
}

/// `crc_blocks` of the bytes of `data` (anything with the buffer protocol, C-contiguous): host
/// memory that is not registered (a Session without an RDMA runtime). Computed with the GIL held.
#[pyfunction]
#[pyo3(signature = (data, block, algorithm="CRC64NVME"))]
pub fn crc_blocks_of_buffer(
    data: &Bound<'_, PyAny>,
    block: usize,
    algorithm: &str,
) -> PyResult<Vec<String>> {
    let algo = algorithm_named(algorithm)?;
    let block = block_size(block)?;
    let view = PinnedBuffer::export(data)?;
    Ok(view
        .bytes()
        .chunks(block)
        .map(|piece| algo.encode(algo.of(piece)))
        .collect())
}

/// The CRC (`algorithm`) of the concatenation of pieces given as (S3-encoded CRC, length in
/// bytes), in order, by the library's combination (no byte is read): the value `crc_of` gives
/// for the bytes of all the pieces in a row. No pieces: the CRC of no bytes. A value that is not
/// one of `algorithm` raises InvalidValueError naming it.
#[pyfunction]
#[pyo3(signature = (pieces, algorithm="CRC64NVME"))]
pub fn crc_combine(pieces: Vec<(String, u64)>, algorithm: &str) -> PyResult<String> {
    let algo = algorithm_named(algorithm)?;
    let mut value = algo.of(&[]);
    for (text, len) in &pieces {
        let piece = algo.decode(text).ok_or_else(|| {
            errors::invalid(format!(
                "{text:?} is not a {algo} value (base64 of its bytes)"
            ))
        })?;
        value = algo.combine(value, piece, *len);
    }
    Ok(algo.encode(value))
}
