//! `hipobj._core.Transport`: the RDMA-or-HTTP decision (`hipobj::transport`, issue 39) of one
//! `hipobj.Session`, and the `Ticket` of one object copy (its path, why, and `record` after it).
//! What the Python side decides with it lives in one place, `Session._pick`.

use crate::errors;
use hipobj::transport::{self, Destination, Direction, Mode, Path, Reason};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Arc;

fn mode(value: Option<&str>) -> PyResult<Mode> {
    match value {
        Some(v) => Mode::parse(v),
        None => Mode::from_env(),
    }
    .map_err(errors::invalid)
}

fn direction(value: &str) -> PyResult<Direction> {
    match value {
        "get" => Ok(Direction::Get),
        "put" => Ok(Direction::Put),
        other => Err(errors::invalid(format!(
            "direction must be 'get' or 'put', not {other:?}"
        ))),
    }
}

/// "host", "gpu" (device memory the NIC reaches directly) or "gpu-bounce" (staged through host).
fn destination(value: &str) -> PyResult<Destination> {
    match value {
        "host" => Ok(Destination::Host),
        "gpu" => Ok(Destination::Gpu),
        "gpu-bounce" => Ok(Destination::GpuBounce),
        other => Err(errors::invalid(format!(
            "destination must be 'host', 'gpu' or 'gpu-bounce', not {other:?}"
        ))),
    }
}

/// What the decision calls the registered memory at `base`: "gpu" (device memory the NIC
/// reaches), "gpu-bounce" (device memory staged through host memory), else "host".
pub fn destination_of(base: usize) -> &'static str {
    let kind = hipobj::runtime::current().and_then(|rt| rt.buffer_kind(base));
    match Destination::of_buffer(kind) {
        Destination::Gpu => "gpu",
        Destination::GpuBounce => "gpu-bounce",
        Destination::Host => "host",
    }
}

fn path_name(path: Path) -> &'static str {
    match path {
        Path::Rdma => "rdma",
        Path::Http => "http",
    }
}

/// `transport_mode(value)`: "auto", "rdma" or "http" for `value` (any case); None reads
/// `HIPOBJ_TRANSPORT` (unset: "auto"). Anything else is InvalidValueError.
#[pyfunction]
#[pyo3(signature = (value=None))]
pub fn transport_mode(value: Option<&str>) -> PyResult<&'static str> {
    Ok(mode(value)?.as_str())
}

/// Why no RDMA device can be used in this process (libibverbs missing, no device with an active
/// port), or None when one can.
#[pyfunction]
pub fn rdma_missing(py: Python<'_>) -> Option<String> {
    py.allow_threads(transport::rdma_missing)
}

/// `Transport(mode=None)`: the decision of one Session ("auto", "rdma", "http"; None:
/// `HIPOBJ_TRANSPORT`, else "auto"). Thread-safe.
#[pyclass(frozen, module = "hipobj._core")]
pub struct Transport(Arc<transport::Transport>);

#[pymethods]
impl Transport {
    #[new]
    #[pyo3(signature = (mode=None))]
    fn new(mode: Option<&str>) -> PyResult<Transport> {
        Ok(Transport(Arc::new(transport::Transport::new(self::mode(
            mode,
        )?))))
    }

    /// "auto", "rdma" or "http".
    #[getter]
    fn mode(&self) -> &'static str {
        self.0.mode().as_str()
    }

    /// The path of one copy of `size` bytes to `endpoint`; `direction` "get" or "put",
    /// `destination` "host", "gpu" or "gpu-bounce"; `mode` overrides the Session's for this copy.
    #[pyo3(signature = (endpoint, size, direction, destination, mode=None))]
    fn pick(
        &self,
        endpoint: &str,
        size: u64,
        direction: &str,
        destination: &str,
        mode: Option<&str>,
    ) -> PyResult<Ticket> {
        let (direction, destination) =
            (self::direction(direction)?, self::destination(destination)?);
        let mode = match mode {
            Some(m) => self::mode(Some(m))?,
            None => self.0.mode(),
        };
        let ticket = self.0.pick_as(mode, endpoint, size, direction, destination);
        Ok(Ticket {
            transport: self.0.clone(),
            ticket,
        })
    }

    /// No RDMA device is usable (`why` names what is missing): "auto" takes HTTP from now on.
    /// True the first time (the caller says why, once).
    fn no_rdma_device(&self, why: &str) -> bool {
        self.0.no_rdma_device(why)
    }

    /// Why no RDMA device is usable, or None.
    #[getter]
    fn missing_device(&self) -> Option<String> {
        self.0.missing_device()
    }

    /// `endpoint` declined RDMA (501): "auto" takes HTTP to it from now on. True the first time.
    fn declined(&self, endpoint: &str) -> bool {
        self.0.declined(endpoint)
    }

    /// The counters: {"rdma": {"transfers", "bytes", "by_reason": {reason: n}}, "http": {...},
    /// "switches": n}; a reason appears once it counted a transfer.
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.0.counters();
        let out = PyDict::new(py);
        for path in [Path::Rdma, Path::Http] {
            let p = c.path(path);
            let by_reason = PyDict::new(py);
            for r in Reason::ALL.iter().filter(|r| p.because(**r) > 0) {
                by_reason.set_item(r.as_str(), p.because(*r))?;
            }
            let d = PyDict::new(py);
            d.set_item("transfers", p.transfers)?;
            d.set_item("bytes", p.bytes)?;
            d.set_item("by_reason", by_reason)?;
            out.set_item(path_name(path), d)?;
        }
        out.set_item("switches", c.switches)?;
        Ok(out)
    }

    fn __repr__(&self) -> String {
        format!(
            "<hipobj._core.Transport {}: {}>",
            self.0.mode().as_str(),
            self.0.counters()
        )
    }
}

/// The path of one object copy: `path` ("rdma" or "http"), `reason` ("default start",
/// "measured", "no RDMA device", ...); `record(size)` after the copy moved its bytes (its time is
/// the decision's clock since the pick).
#[pyclass(frozen, module = "hipobj._core")]
pub struct Ticket {
    transport: Arc<transport::Transport>,
    ticket: transport::Ticket,
}

impl Ticket {
    pub fn is_http(&self) -> bool {
        self.ticket.path() == Path::Http
    }
}

#[pymethods]
impl Ticket {
    #[getter]
    fn path(&self) -> &'static str {
        path_name(self.ticket.path())
    }

    #[getter]
    fn reason(&self) -> &'static str {
        self.ticket.reason().as_str()
    }

    /// The copy moved `size` bytes.
    pub fn record(&self, size: u64) {
        self.transport.record(&self.ticket, size);
    }

    fn __repr__(&self) -> String {
        format!("<hipobj._core.Ticket {} ({})>", self.path(), self.reason())
    }
}
