//! `hipobj._core.engine_*`: the core's transfer engine (`hipobj::engine`) with boto3 as its S3
//! side. The Python store (`hipobj._transfer.Store`) makes each request's `S3Call` and runs the
//! multipart bookkeeping; every RDMA transfer goes through `transfer::rdma_transfer`. Each copy
//! asks the store's `pick` (the Session's decision, `hipobj::transport`) once which path it takes,
//! moves every part by it (plain HTTP needs no RDMA runtime: its ring is plain host memory), and
//! records the outcome. The GIL is released while the engine runs; its worker threads take it for
//! each callback.

use crate::checksum::stored_checksum;
use crate::errors::{self, to_py};
use crate::registration::Registration;
use crate::transfer::{rdma_transfer, Failed};
use crate::transport::{destination_of, Ticket};
use hipobj::checksum::{CrcAlgo, ObjectChecksum, StoredChecksum, RDMA_CHECKSUM};
use hipobj::engine::{
    self, Buffers, Classify, CompletedPart, EngineError, ErrorClass, FileSink, FileSource,
    HostBuffers, Job, ObjectStore, PartHead, PlainBuffers, PutTarget, RegisteredMemory, Report,
    Segment, Settings, Sink, Slice,
};
use hipobj::error::Error;
use hipobj::registry::BufferKind;
use hipobj::runtime::{Runtime, TransferKind};
use pyo3::exceptions::{PyOSError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// A failed store request: the exception to raise, and whether to retry.
pub struct StoreError {
    err: PyErr,
    class: ErrorClass,
    /// The server's `Retry-After` (a retry waits at least that).
    retry_after: Option<Duration>,
}

impl Classify for StoreError {
    fn class(&self) -> ErrorClass {
        self.class
    }

    fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.err.fmt(f)
    }
}

/// The Python store of one object, and the runtime its RDMA transfers use (None: no RDMA here).
struct PyStore {
    store: PyObject,
    rt: Option<Arc<Runtime>>,
    /// The copy's path is plain HTTP: each request moves its bytes as the HTTP body from and
    /// into the same (host) memory instead of by RDMA.
    http: bool,
}

/// The class the store gives a failure (`retry_class(call, exception)`): "transient",
/// "throttling", "timeout", "fatal", or None when only the library knows (`library`).
fn class_of(
    py: Python<'_>,
    store: &PyObject,
    call: Option<&PyObject>,
    exc: Option<&PyErr>,
    library: ErrorClass,
) -> ErrorClass {
    let exc = exc.map(|e| e.value(py).clone().unbind().into_any());
    let answer = store
        .call_method1(py, "retry_class", (call, exc))
        .and_then(|v| v.extract::<Option<String>>(py));
    match answer.ok().flatten().as_deref() {
        Some("transient") => ErrorClass::Transient,
        Some("throttling") => ErrorClass::Throttling,
        Some("timeout") => ErrorClass::Timeout,
        Some(_) => ErrorClass::Fatal,
        None => library,
    }
}

impl PyStore {
    /// A store method's answer; a raised exception is a classified failure.
    fn call<A>(&self, method: &str, args: A) -> Result<PyObject, StoreError>
    where
        A: for<'py> IntoPyObject<'py, Target = pyo3::types::PyTuple>,
    {
        Python::with_gil(|py| {
            self.store
                .call_method1(py, method, args)
                .map_err(|err| StoreError {
                    class: class_of(py, &self.store, None, Some(&err), ErrorClass::Fatal),
                    err,
                    retry_after: None,
                })
        })
    }

    /// One RDMA transfer of `slice` whose requests `call.send` sends; `call` after success.
    fn rdma(&self, kind: TransferKind, slice: Slice, call: &PyObject) -> Result<(), StoreError> {
        let rt = self.rt.as_ref().ok_or_else(|| StoreError {
            err: to_py(Error::not_initialized()),
            class: ErrorClass::Fatal,
            retry_after: None,
        })?;
        rdma_transfer(rt, kind, slice, call)
            .map(drop)
            .map_err(|f| self.failed(call, f))
    }

    /// One request's bytes: by RDMA, or over plain HTTP when the store says so.
    fn transfer(
        &self,
        kind: TransferKind,
        slice: Slice,
        call: &PyObject,
    ) -> Result<(), StoreError> {
        if !self.http {
            return self.rdma(kind, slice, call);
        }
        let address = self.host_address(slice)?;
        let name = match kind {
            TransferKind::Get => "get",
            TransferKind::Put => "put",
        };
        Python::with_gil(|py| {
            call.call_method1(py, "http", (name, address, slice.len))
                .map(drop)
                .map_err(|err| StoreError {
                    class: class_of(py, &self.store, Some(call), Some(&err), ErrorClass::Fatal),
                    err,
                    retry_after: None,
                })
        })
    }

    /// The address of `slice` when it is host memory (plain HTTP reaches no other): a host
    /// registration, or the plain ring's memory (registered with nothing).
    fn host_address(&self, slice: Slice) -> Result<usize, StoreError> {
        match self.rt.as_ref().and_then(|rt| rt.buffer_kind(slice.base)) {
            None | Some(BufferKind::Host) => Ok(slice.base + slice.offset),
            Some(_) => Err(StoreError {
                err: errors::invalid(
                    "transport 'http' moves host memory only: register host memory",
                ),
                class: ErrorClass::Fatal,
                retry_after: None,
            }),
        }
    }

    /// The ring of this copy: registered host buffers for RDMA, plain ones for HTTP.
    fn buffers(&self) -> Box<dyn Buffers> {
        match (&self.rt, self.http) {
            (Some(rt), false) => Box::new(HostBuffers(rt.clone())),
            _ => Box::new(PlainBuffers),
        }
    }

    fn failed(&self, call: &PyObject, f: Failed) -> StoreError {
        Python::with_gil(|py| {
            let library = hipobj::engine::class_of_library(&f.error);
            let class = class_of(py, &self.store, Some(call), f.raised.as_ref(), library);
            let retry_after = f.error.server.as_ref().and_then(|s| s.retry_after);
            let err = f.into_py(py);
            for (from, to) in [("status", "http_status"), ("reply", "reply")] {
                if let Ok(v) = call.getattr(py, from) {
                    let _ = err.value(py).setattr(to, v);
                }
            }
            StoreError {
                err,
                class,
                retry_after,
            }
        })
    }

    /// A response header of `call`'s last response.
    fn header(call: &PyObject, name: &str) -> Option<String> {
        Python::with_gil(|py| {
            call.getattr(py, "headers")
                .and_then(|h| h.call_method1(py, "get", (name,)))
                .and_then(|v| v.extract::<Option<String>>(py))
                .ok()
                .flatten()
        })
    }
}

impl ObjectStore for PyStore {
    type Error = StoreError;

    fn get(&self, slice: Slice, first: u64) -> Result<u64, StoreError> {
        self.get_named(slice, first).map(|(bytes, _)| bytes)
    }

    fn get_named(
        &self,
        slice: Slice,
        first: u64,
    ) -> Result<(u64, Option<StoredChecksum>), StoreError> {
        let last = first + slice.len as u64 - 1;
        let call = self.call("request", ("get", first, last, None::<String>, None::<u32>))?;
        self.transfer(TransferKind::Get, slice, &call)?;
        let bytes = Self::header(&call, "x-amz-rdma-bytes-transferred")
            .and_then(|v| v.parse().ok())
            .unwrap_or(slice.len as u64);
        // docs/protocol.md rule 16.2: the stored checksum of exactly these bytes, when named.
        let named = Self::header(&call, RDMA_CHECKSUM).and_then(|v| StoredChecksum::parse(&v).ok());
        Ok((bytes, named))
    }

    fn put(
        &self,
        slice: Slice,
        target: PutTarget<'_>,
        checksum: Option<ObjectChecksum>,
    ) -> Result<Option<String>, StoreError> {
        let (id, number) = match target {
            PutTarget::Object => (None, None),
            PutTarget::Part { upload_id, number } => (Some(upload_id.to_owned()), Some(number)),
        };
        let checksum = checksum.map(|c| (c.algo.as_str(), c.encoded()));
        let call = self.call(
            "request",
            ("put", None::<u64>, None::<u64>, id, number, checksum),
        )?;
        self.transfer(TransferKind::Put, slice, &call)?;
        Ok(Self::header(&call, "etag").or_else(|| Self::header(&call, "x-amz-rdma-etag")))
    }

    fn create_upload(&self, checksum: Option<CrcAlgo>) -> Result<String, StoreError> {
        let id = self.call("create_upload", (checksum.map(CrcAlgo::as_str),))?;
        Python::with_gil(|py| id.extract::<String>(py)).map_err(|err| StoreError {
            err,
            class: ErrorClass::Fatal,
            retry_after: None,
        })
    }

    fn complete_upload(
        &self,
        upload_id: &str,
        parts: &[CompletedPart],
        checksum: Option<ObjectChecksum>,
    ) -> Result<(), StoreError> {
        let parts: Vec<(u32, String)> = parts.iter().map(|p| (p.number, p.etag.clone())).collect();
        let checksum = checksum.map(|c| (c.algo.as_str(), c.encoded()));
        self.call("complete_upload", (upload_id, parts, checksum))
            .map(drop)
    }

    fn abort_upload(&self, upload_id: &str) -> Result<(), StoreError> {
        self.call("abort_upload", (upload_id,)).map(drop)
    }

    fn head_part(&self, number: u32) -> Result<Option<PartHead>, StoreError> {
        let answer = self.call("head_part", (number,))?;
        let (len, headers) =
            Python::with_gil(|py| answer.extract::<(u64, HashMap<String, String>)>(py)).map_err(
                |err| StoreError {
                    err,
                    class: ErrorClass::Fatal,
                    retry_after: None,
                },
            )?;
        let checksum = ObjectChecksum::of_part(|name| headers.get(name).cloned());
        Ok(Some(PartHead { len, checksum }))
    }
}

/// A download's bytes handed to a Python `write_at(pos, data)` (a file object's seek and write).
struct PySink(PyObject);

impl Sink for PySink {
    fn write_at(&self, data: &[u8], pos: u64) -> std::io::Result<()> {
        Python::with_gil(|py| {
            self.0
                .call1(py, (pos, PyBytes::new(py, data)))
                .map(drop)
                .map_err(|e| std::io::Error::other(e.to_string()))
        })
    }
}

/// (bytes, parts, retries, multipart, checksum) of a finished copy: `checksum` says what the
/// end-to-end check of a download found ("CRC64NVME verified", "unchecked: ...", "not checked").
type Done = (u64, usize, u64, bool, String);

fn done(r: Report) -> Done {
    (
        r.bytes,
        r.parts,
        r.retries + r.checksum_retries,
        r.multipart,
        r.checksum.to_string(),
    )
}

/// The exception of a failed copy; `retries` is set on it.
fn raise(py: Python<'_>, e: EngineError<StoreError>) -> PyErr {
    let (err, retries) = match e {
        EngineError::Store { error, retries } => (error.err, retries),
        EngineError::Io(e) => (PyOSError::new_err(e.to_string()), 0),
        EngineError::Library(e) => (to_py(e), 0),
        e @ (EngineError::Short { .. } | EngineError::Changed { .. }) => {
            (errors::S3Error::new_err(e.to_string()), 0)
        }
        EngineError::Cancelled { retries } => (errors::S3Error::new_err("cancelled"), retries),
        EngineError::Checksum(m) => (
            errors::checksum_mismatch(py, "download (read twice)", &m),
            0,
        ),
    };
    let _ = err.value(py).setattr("retries", retries);
    err
}

fn settings(part_size: u64, threshold: u64, concurrency: usize) -> Settings {
    let mut s = Settings::with_concurrency(concurrency);
    s.part_size = part_size;
    s.multipart_threshold = threshold;
    s
}

/// Run `f` with the GIL released, with a Job whose progress calls `progress(n)`; a copy that
/// finished is recorded on `ticket` (its bytes, timed since the pick).
fn with_job(
    py: Python<'_>,
    s: Settings,
    progress: Option<PyObject>,
    ticket: &Py<Ticket>,
    f: impl FnOnce(&Job<'_>) -> Result<Report, EngineError<StoreError>> + Send,
) -> PyResult<Done> {
    let report = |n: u64| {
        if let Some(p) = &progress {
            Python::with_gil(|py| {
                if let Err(e) = p.call1(py, (n,)) {
                    e.write_unraisable(py, None);
                }
            });
        }
    };
    let cancel = AtomicBool::new(false);
    let out = py.allow_threads(|| {
        let job = Job {
            settings: s,
            progress: &report,
            cancel: &cancel,
        };
        f(&job)
    });
    let report = out.map_err(|e| raise(py, e))?;
    ticket.get().record(report.bytes);
    Ok(done(report))
}

/// The store of one copy of `size` bytes, and its ticket: the store's `pick(size, direction,
/// destination)` answers the path (the Session's decision), which becomes its `transport`.
fn store(
    py: Python<'_>,
    store: PyObject,
    size: u64,
    direction: &str,
    destination: &str,
) -> PyResult<(PyStore, Py<Ticket>)> {
    let ticket: Py<Ticket> = store
        .call_method1(py, "pick", (size, direction, destination))?
        .extract(py)?;
    let http = ticket.get().is_http();
    store.setattr(py, "transport", if http { "http" } else { "rdma" })?;
    let rt = hipobj::runtime::current();
    if rt.is_none() && !http {
        return Err(to_py(Error::not_initialized()));
    }
    Ok((PyStore { store, rt, http }, ticket))
}

/// Registered memory when there is no runtime: nothing is registered (an upload's segments are
/// then all bytes, copied through the plain ring).
struct NothingRegistered;

impl RegisteredMemory for NothingRegistered {
    fn registered_len(&self, _base: usize) -> Option<usize> {
        None
    }

    fn crc(&self, _slice: Slice, _algo: CrcAlgo) -> hipobj::error::Result<u64> {
        Err(Error::not_initialized())
    }

    fn read(&self, _slice: Slice, _dst: &mut [u8]) -> hipobj::error::Result<()> {
        Err(Error::not_initialized())
    }
}

/// Object bytes `first .. first + length` into the file `path` (written beside it, renamed
/// when complete), `concurrency` ranged GETs of `part_size` at once, checked against the stored
/// checksum the HEAD reply's `headers` name (`checksum_mode` "when_supported"; the file is left
/// as it was on a mismatch).
#[pyfunction]
#[pyo3(signature = (store_, path, first, length, part_size, concurrency, progress=None, checksum_mode="when_required", headers=None))]
#[allow(clippy::too_many_arguments)]
pub fn engine_download(
    py: Python<'_>,
    store_: PyObject,
    path: PathBuf,
    first: u64,
    length: u64,
    part_size: u64,
    concurrency: usize,
    progress: Option<PyObject>,
    checksum_mode: &str,
    headers: Option<HashMap<String, String>>,
) -> PyResult<Done> {
    let mut settings = settings(part_size, part_size, concurrency);
    settings.checksum = Some(stored_checksum(checksum_mode, headers)?);
    let (store, ticket) = store(py, store_, length, "get", "host")?;
    let sink = FileSink::create(&path, length)
        .map_err(|e| PyOSError::new_err(format!("{}: {e}", path.display())))?;
    let buffers = store.buffers();
    let done = with_job(py, settings, progress, &ticket, |job| {
        engine::download(&store, first, length, &sink, &*buffers, job)
    })?;
    sink.finish()
        .map_err(|e| PyOSError::new_err(format!("{}: {e}", path.display())))?;
    Ok(done)
}

/// As `engine_download`, the bytes handed to `write_at(pos, data)` instead of a file (a
/// mismatch is raised after the bytes were written: the caller's object holds them).
#[pyfunction]
#[pyo3(signature = (store_, write_at, first, length, part_size, concurrency, progress=None, checksum_mode="when_required", headers=None))]
#[allow(clippy::too_many_arguments)]
pub fn engine_download_to(
    py: Python<'_>,
    store_: PyObject,
    write_at: PyObject,
    first: u64,
    length: u64,
    part_size: u64,
    concurrency: usize,
    progress: Option<PyObject>,
    checksum_mode: &str,
    headers: Option<HashMap<String, String>>,
) -> PyResult<Done> {
    let mut settings = settings(part_size, part_size, concurrency);
    settings.checksum = Some(stored_checksum(checksum_mode, headers)?);
    let (store, ticket) = store(py, store_, length, "get", "host")?;
    let sink = PySink(write_at);
    let buffers = store.buffers();
    with_job(py, settings, progress, &ticket, |job| {
        engine::download(&store, first, length, &sink, &*buffers, job)
    })
}

/// Object bytes `first .. first + length` straight into `registration` at `offset`: concurrent
/// ranged GETs, no ring.
#[pyfunction]
#[pyo3(signature = (store_, registration, offset, first, length, part_size, concurrency, progress=None))]
#[allow(clippy::too_many_arguments)]
pub fn engine_download_into(
    py: Python<'_>,
    store_: PyObject,
    registration: Py<Registration>,
    offset: usize,
    first: u64,
    length: usize,
    part_size: u64,
    concurrency: usize,
    progress: Option<PyObject>,
) -> PyResult<Done> {
    if !registration.borrow(py).writable() {
        return Err(errors::invalid("the destination is read-only"));
    }
    let (dest, owner) = slice_of(&registration.borrow(py), py, offset, length, "")?;
    let base = dest.base;
    let (store, ticket) = store(py, store_, length as u64, "get", destination_of(base))?;
    let out = with_job(
        py,
        settings(part_size, part_size, concurrency),
        progress,
        &ticket,
        |job| engine::download_into(&store, first, dest, job),
    );
    drop(owner);
    out
}

/// The file `path` (its first `length` bytes) as the object: one PUT up to `threshold`, else a
/// multipart upload in parts of `part_size`, `concurrency` at once. With `send_checksum` (unless
/// the caller named a checksum of its own) each PUT carries the CRC64NVME of the bytes it moves.
#[pyfunction]
#[pyo3(signature = (store_, path, length, part_size, threshold, concurrency, progress=None, send_checksum=true))]
#[allow(clippy::too_many_arguments)]
pub fn engine_upload(
    py: Python<'_>,
    store_: PyObject,
    path: PathBuf,
    length: u64,
    part_size: u64,
    threshold: u64,
    concurrency: usize,
    progress: Option<PyObject>,
    send_checksum: bool,
) -> PyResult<Done> {
    let mut settings = settings(part_size, threshold, concurrency);
    if !send_checksum {
        settings.upload_checksum = None;
    }
    let (store, ticket) = store(py, store_, length, "put", "host")?;
    let source = FileSource::open(&path, 0)
        .map_err(|e| PyOSError::new_err(format!("{}: {e}", path.display())))?;
    let buffers = store.buffers();
    with_job(py, settings, progress, &ticket, |job| {
        engine::upload(&store, &source, length, &*buffers, job)
    })
}

/// `length` bytes at `offset` of a live registration as one transfer's slice, with the object
/// that owns its memory (held for the call); `what` prefixes the error of a slice that does not fit.
fn slice_of(
    reg: &Registration,
    py: Python<'_>,
    offset: usize,
    length: usize,
    what: &str,
) -> PyResult<(Slice, Option<PyObject>)> {
    if offset
        .checked_add(length)
        .map_or(true, |end| end > reg.len())
    {
        return Err(errors::invalid(format!(
            "{what}{length} bytes at {offset} do not fit the {}-byte registration",
            reg.len()
        )));
    }
    reg.live_runtime()?;
    let slice = Slice {
        base: reg.base(),
        offset,
        len: length,
    };
    Ok((slice, reg.owner(py)))
}

/// One item of `engine_upload_from`'s list, held for the call: a `bytes` object, or a slice of a
/// live registration (with the object that owns its memory).
enum Held<'py> {
    Bytes(Bound<'py, PyBytes>),
    Registered {
        slice: Slice,
        _registration: Bound<'py, Registration>,
        _owner: Option<PyObject>,
    },
}

/// Item `i` of the list: `bytes`, or `(Registration, offset, length)` inside the registration.
fn held<'py>(i: usize, item: &Bound<'py, PyAny>) -> PyResult<Held<'py>> {
    if let Ok(bytes) = item.downcast::<PyBytes>() {
        return Ok(Held::Bytes(bytes.clone()));
    }
    let Ok((registration, offset, length)) =
        item.extract::<(Bound<'py, Registration>, usize, usize)>()
    else {
        return Err(PyTypeError::new_err(format!(
            "segment {i}: expected bytes or a (Registration, offset, length) tuple, not {}",
            item.get_type()
        )));
    };
    let (slice, owner) = slice_of(
        &registration.borrow(),
        item.py(),
        offset,
        length,
        &format!("segment {i}: "),
    )?;
    Ok(Held::Registered {
        slice,
        _registration: registration,
        _owner: owner,
    })
}

/// The segments `segments` (a list of `bytes` and `(Registration, offset, length)` tuples) end
/// to end as the object: one PUT up to `threshold`, else a multipart upload in parts of
/// `part_size`, `concurrency` at once. A part that lies whole in one registration is sent from
/// there (no copy); the others are copied into registered host buffers first. With
/// `send_checksum`, each PUT carries the CRC64NVME of the bytes it moves (as `engine_upload`).
#[pyfunction]
#[pyo3(signature = (store_, segments, part_size, threshold, concurrency, progress=None, send_checksum=true))]
#[allow(clippy::too_many_arguments)]
pub fn engine_upload_from(
    py: Python<'_>,
    store_: PyObject,
    segments: Vec<Bound<'_, PyAny>>,
    part_size: u64,
    threshold: u64,
    concurrency: usize,
    progress: Option<PyObject>,
    send_checksum: bool,
) -> PyResult<Done> {
    let mut settings = settings(part_size, threshold, concurrency);
    if !send_checksum {
        settings.upload_checksum = None;
    }
    let held = segments
        .iter()
        .enumerate()
        .map(|(i, item)| held(i, item))
        .collect::<PyResult<Vec<Held<'_>>>>()?;
    let segments: Vec<Segment<'_>> = held
        .iter()
        .map(|h| match h {
            Held::Bytes(b) => Segment::Bytes(b.as_bytes()),
            Held::Registered { slice, .. } => Segment::Registered(*slice),
        })
        .collect();
    let size = held
        .iter()
        .map(|h| match h {
            Held::Bytes(b) => b.as_bytes().len() as u64,
            Held::Registered { slice, .. } => slice.len as u64,
        })
        .sum();
    // Device memory among the segments is where the bytes come from (the decision's cell).
    let from = held
        .iter()
        .find_map(|h| match h {
            Held::Registered { slice, .. } => {
                Some(destination_of(slice.base)).filter(|d| *d != "host")
            }
            Held::Bytes(_) => None,
        })
        .unwrap_or("host");
    let (store, ticket) = store(py, store_, size, "put", from)?;
    let buffers = store.buffers();
    let memory: &dyn RegisteredMemory = match &store.rt {
        Some(rt) => &**rt,
        None => &NothingRegistered,
    };
    let out = with_job(py, settings, progress, &ticket, |job| {
        engine::upload_from(&store, &segments, memory, &*buffers, job)
    });
    drop(held);
    out
}
