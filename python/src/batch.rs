//! `hipobj._core.BatchQueue`: a batch queue (`hipobj::batch`, docs/batch.md) for Python, which
//! `hipobj.Batch` wraps (submit, poll, asyncio over the eventfd). The operations name their
//! buffer by a `Registration`; the queue sends its own S3 requests (endpoint and keys given).

use crate::errors::{self, to_py};
use crate::registration::Registration;
use hipobj::batch::{Config, Event, Op, OpKind, Queue, Status};
use hipobj::client::credentials::CredentialSources;
use hipobj::rcv2::negotiate::Protocol;
use hipobj::transport::{Mode, Path};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;
use std::time::Duration;

/// `BatchQueue(endpoint, depth, verify=True, transport=None, access_key=None, secret_key=None,
/// region=None, profile=None, ca_bundle=None)`: a queue on the open Session's runtime. What is
/// not given is resolved as the AWS SDKs do; `transport` is "auto", "rdma" or "http" (None:
/// `HIPOBJ_TRANSPORT`, else "auto").
#[pyclass(frozen, module = "hipobj._core")]
pub struct BatchQueue(Queue);

fn kind(op: &str) -> PyResult<OpKind> {
    match op {
        "get" => Ok(OpKind::Get),
        "put" => Ok(OpKind::Put),
        other => Err(errors::invalid(format!(
            "an operation is 'get' or 'put', not {other:?}"
        ))),
    }
}

fn status_name(s: Status) -> &'static str {
    match s {
        Status::Complete => "complete",
        Status::Failed => "failed",
        Status::Cancelled => "cancelled",
    }
}

/// "rdma-v1", "rdma-v2", "rdma" (protocol not known yet), "http", or None (never started).
fn path_name(e: &Event) -> Option<&'static str> {
    match (e.path, e.protocol) {
        (Some(Path::Http), _) => Some("http"),
        (Some(Path::Rdma), Some(Protocol::V1)) => Some("rdma-v1"),
        (Some(Path::Rdma), Some(Protocol::V2)) => Some("rdma-v2"),
        (Some(Path::Rdma), None) => Some("rdma"),
        (None, _) => None,
    }
}

/// An event as a dict: cookie, status, bytes, path, verified, retries, and for a failure its
/// exception (the error class of its code, with the server's answer), http_status and s3_code.
fn event_dict<'py>(py: Python<'py>, e: Event) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("cookie", e.cookie)?;
    d.set_item("status", status_name(e.status))?;
    d.set_item("bytes", e.bytes)?;
    d.set_item("path", path_name(&e))?;
    d.set_item("verified", e.verified)?;
    d.set_item("retries", e.retries)?;
    d.set_item("http_status", e.http_status)?;
    d.set_item("s3_code", e.s3_code.clone())?;
    let error = e.error.map(|err| to_py(err).into_value(py));
    d.set_item("error", error)?;
    Ok(d)
}

#[pymethods]
impl BatchQueue {
    #[new]
    #[pyo3(signature = (endpoint, depth, verify=true, transport=None, access_key=None,
                        secret_key=None, region=None, profile=None, ca_bundle=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        endpoint: String,
        depth: usize,
        verify: bool,
        transport: Option<&str>,
        access_key: Option<String>,
        secret_key: Option<String>,
        region: Option<String>,
        profile: Option<String>,
        ca_bundle: Option<String>,
    ) -> PyResult<BatchQueue> {
        let rt = hipobj::runtime::current()
            .ok_or_else(|| to_py(hipobj::error::Error::not_initialized()))?;
        let transport = match transport {
            Some(v) => Mode::parse(v),
            None => Mode::from_env(),
        }
        .map_err(errors::invalid)?;
        let config = Config {
            endpoint,
            credentials: CredentialSources {
                access_key,
                secret_key,
                profile,
                region,
                ca_bundle: ca_bundle.map(PathBuf::from),
            },
            depth,
            verify,
            transport,
        };
        py.allow_threads(|| Queue::new(rt, config))
            .map(BatchQueue)
            .map_err(to_py)
    }

    /// Queue operations, all or none, without blocking: each a tuple `(op, bucket, key,
    /// object_offset, length, registration, buffer_offset, cookie)`, `op` "get" or "put".
    /// BusyError past the depth (submitted and not yet polled).
    fn submit(&self, py: Python<'_>, ops: Vec<PyObject>) -> PyResult<()> {
        let mut checked = Vec::with_capacity(ops.len());
        for op in ops {
            let (op, bucket, key, object_offset, len, reg, buffer_offset, cookie): (
                String,
                String,
                String,
                u64,
                usize,
                PyRef<'_, Registration>,
                usize,
                u64,
            ) = op.extract(py)?;
            reg.live_runtime()?;
            checked.push(Op {
                kind: kind(&op)?,
                bucket,
                key,
                object_offset,
                len,
                buffer: reg.base(),
                buffer_offset,
                cookie,
            });
        }
        py.allow_threads(|| self.0.submit(checked)).map_err(to_py)
    }

    /// Up to `max_events` events once `min_events` are ready or `timeout` seconds passed (None:
    /// no limit), as dicts (see `hipobj.Batch`).
    #[pyo3(signature = (min_events=1, max_events=64, timeout=None))]
    fn poll<'py>(
        &self,
        py: Python<'py>,
        min_events: usize,
        max_events: usize,
        timeout: Option<f64>,
    ) -> PyResult<Vec<Bound<'py, PyDict>>> {
        if min_events > max_events {
            return Err(errors::invalid("min_events is more than max_events"));
        }
        let timeout = match timeout {
            None => None,
            Some(t) if t.is_finite() && t >= 0.0 => Some(Duration::from_secs_f64(t)),
            Some(t) => return Err(errors::invalid(format!("timeout {t} is not >= 0"))),
        };
        let events = py.allow_threads(|| self.0.poll(min_events, max_events, timeout));
        events.into_iter().map(|e| event_dict(py, e)).collect()
    }

    /// Cancel the operation of `cookie`: returns once nothing touches its buffer any more.
    fn cancel(&self, py: Python<'_>, cookie: u64) -> PyResult<()> {
        py.allow_threads(|| self.0.cancel(cookie)).map_err(to_py)
    }

    /// Cancel every operation not yet ended.
    fn cancel_all(&self, py: Python<'_>) {
        py.allow_threads(|| self.0.cancel_all());
    }

    /// The queue's eventfd: readable while events wait (for `loop.add_reader`).
    fn event_fd(&self) -> i32 {
        self.0.event_fd()
    }

    /// `(http_status, size)` of a HEAD of an object (or of the bucket when `key` is None);
    /// raises the error of a refusal (its status in the message).
    #[pyo3(signature = (bucket, key=None))]
    fn head(&self, py: Python<'_>, bucket: &str, key: Option<&str>) -> PyResult<(u16, u64)> {
        let (status, answer) = py.allow_threads(|| self.0.head(bucket, key));
        answer.map(|size| (status, size)).map_err(to_py)
    }

    /// What went over RDMA and over HTTP: `{"rdma": n, "http": n}` (operations completed).
    fn counters(&self) -> std::collections::HashMap<&'static str, u64> {
        let c = self.0.counters();
        [("rdma", Path::Rdma), ("http", Path::Http)]
            .into_iter()
            .map(|(name, p)| (name, c.path(p).transfers))
            .collect()
    }

    #[getter]
    fn depth(&self) -> usize {
        self.0.depth()
    }

    /// Operations queued or running.
    fn in_flight(&self) -> usize {
        self.0.in_flight()
    }

    /// Cancel what is left and wait until no worker holds a buffer; the queue refuses
    /// everything afterwards.
    fn close(&self, py: Python<'_>) {
        py.allow_threads(|| self.0.close_now());
    }
}
