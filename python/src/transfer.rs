//! `hipobj._core.transfer`: one RDMA transfer whose S3 requests are made in Python (boto3), in
//! the RC protocol the endpoint speaks (docs/protocol.md 10.1: v1 first, hipobj-rc-v2 after a `501`
//! with the unsupported marker, remembered per endpoint in a [`Negotiation`]).
//!
//! The GIL is released for the whole transfer; each callback re-acquires it to run Python (boto3),
//! so many Python threads transfer at once.

use crate::errors::{self, to_py};
use crate::registration::Registration;
use hipobj::engine::Slice;
use hipobj::error::Error;
use hipobj::rcv2::client::{FinalReplyV2, PrepareReplyV2, S3OpsV2, V2Target};
use hipobj::rcv2::negotiate::{self, Choice, Next, Protocol};
use hipobj::rcv2::{
    header, is_unsupported, CancelRequest, PrepareRequest, ReadyRequest, CANCEL_PATH, PREPARE_PATH,
    READY_PATH,
};
use hipobj::runtime::{Runtime, S3Ops, TransferKind};
use hipobj::s3error::S3ErrorReply;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::thread::JoinHandle;

/// `hipobj._core.Negotiation(choice)`: the RDMA protocol choice ("v1", "v2", "auto"; None:
/// `HIPOBJ_RDMA_PROTOCOL`, else "auto") and what each endpoint was found to speak, for one
/// `hipobj.Session`.
#[pyclass(frozen, module = "hipobj._core")]
pub struct Negotiation(negotiate::Negotiation);

#[pymethods]
impl Negotiation {
    #[new]
    #[pyo3(signature = (choice=None))]
    fn new(choice: Option<&str>) -> PyResult<Negotiation> {
        let choice = match choice {
            Some(c) => Choice::parse(c),
            None => Choice::from_env(),
        }
        .map_err(errors::invalid)?;
        Ok(Negotiation(negotiate::Negotiation::new(choice)))
    }

    /// "v1", "v2" or "auto".
    #[getter]
    fn choice(&self) -> &'static str {
        match self.0.choice() {
            Choice::Auto => "auto",
            Choice::V1 => "v1",
            Choice::V2 => "v2",
        }
    }

    /// What `endpoint` was found to speak ("v1", "v2"), or None while unknown.
    fn spoken(&self, endpoint: &str) -> Option<&'static str> {
        self.0.spoken(endpoint).map(Protocol::as_str)
    }

    /// The most bytes one transfer to `endpoint` may move (2^31 - 1 when it may be
    /// hipobj-rc-v2), or None.
    fn max_transfer(&self, endpoint: &str) -> Option<u64> {
        self.0.max_transfer(endpoint)
    }
}

/// `hipObjOps_t` over one Python callable `send(token) -> reply or None`: it sends the S3 request
/// carrying `token` in `x-amz-rdma-token` and returns the response's `x-amz-rdma-reply` value.
struct PythonOps {
    send: PyObject,
    reply: Option<Vec<u8>>,
    /// The exception a callback raised (the transfer then fails with S3Error caused by it).
    raised: Option<PyErr>,
    requests: usize,
}

/// sendRequest/recvReply statuses of a failed callback.
const CALLBACK_RAISED: i32 = 1;
const NO_REPLY_HEADER: i32 = 2;
const REPLY_TOO_LONG: i32 = 3;

impl S3Ops for PythonOps {
    fn send_request(&mut self, token: &str) -> i32 {
        self.requests += 1;
        self.reply = None;
        Python::with_gil(|py| {
            let answer = self
                .send
                .call1(py, (token,))
                .and_then(|v| v.extract::<Option<String>>(py));
            match answer {
                Ok(Some(reply)) => {
                    self.reply = Some(reply.into_bytes());
                    0
                }
                Ok(None) => NO_REPLY_HEADER,
                Err(e) => {
                    self.raised = Some(e);
                    CALLBACK_RAISED
                }
            }
        })
    }

    fn recv_reply(&mut self, buf: &mut [u8]) -> Result<usize, i32> {
        let reply = self.reply.take().ok_or(NO_REPLY_HEADER)?;
        let dst = buf.get_mut(..reply.len()).ok_or(REPLY_TOO_LONG)?;
        dst.copy_from_slice(&reply);
        Ok(reply.len())
    }
}

/// A failed RDMA transfer: the library's error, and the exception `send` raised, if it did.
pub struct Failed {
    pub error: hipobj::error::Error,
    pub raised: Option<PyErr>,
    /// Requests sent before the failure.
    pub requests: usize,
}

impl Failed {
    /// The Python exception: the error's class, caused by what `send` raised.
    pub fn into_py(mut self, py: Python<'_>) -> PyErr {
        if let Some(cause) = &self.raised {
            // The message names what the callback raised (e.g. botocore's certificate error);
            // the exception itself is also the cause.
            self.error.detail = format!("{}: {cause}", self.error.detail).into();
        }
        let err = to_py(self.error);
        if let Some(cause) = self.raised {
            err.set_cause(py, Some(cause));
        }
        err
    }
}

/// How one transfer's requests are made: the S3Call (`hipobj._s3.S3Call`: `send` for v1,
/// `control` for v2, `negotiation` and `endpoint`), or a bare `send(token)` callable (v1 only).
struct Route {
    call: PyObject,
    send: PyObject,
    negotiation: Option<Py<Negotiation>>,
    endpoint: String,
}

impl Route {
    fn of(call: &PyObject) -> PyResult<Route> {
        Python::with_gil(|py| {
            let c = call.bind(py);
            if !c.hasattr("control")? {
                return Ok(Route {
                    call: call.clone_ref(py),
                    send: call.clone_ref(py),
                    negotiation: None,
                    endpoint: String::new(),
                });
            }
            Ok(Route {
                call: call.clone_ref(py),
                send: c.getattr("send")?.unbind(),
                negotiation: c.getattr("negotiation")?.extract()?,
                endpoint: c.getattr("endpoint")?.extract()?,
            })
        })
    }

    /// The status of the call's last answer and whether it carried the unsupported marker.
    fn answer(&self) -> (Option<u16>, bool) {
        Python::with_gil(|py| {
            let c = self.call.bind(py);
            let status: Option<u16> = c.getattr("status").and_then(|v| v.extract()).ok().flatten();
            let marker: Option<String> = c
                .getattr("headers")
                .and_then(|h| h.call_method1("get", (header::PROTOCOL_STATUS,)))
                .and_then(|v| v.extract())
                .ok()
                .flatten();
            let unsupported = status.is_some_and(|s| {
                is_unsupported(s, |n| {
                    (n == header::PROTOCOL_STATUS)
                        .then_some(marker.as_deref())
                        .flatten()
                })
            });
            (status, unsupported)
        })
    }

    /// The S3 error of the call's last answer, if it was a refusal (status 300 and above): its
    /// status, headers and body (`S3Call.status`, `.headers`, `.body`) read by the library.
    fn server_error(&self) -> Option<S3ErrorReply> {
        Python::with_gil(|py| {
            let c = self.call.bind(py);
            let status: u16 = c.getattr("status").and_then(|v| v.extract()).ok()?;
            let headers: HashMap<String, String> =
                c.getattr("headers").and_then(|v| v.extract()).ok()?;
            let body: Vec<u8> = c.getattr("body").and_then(|v| v.extract()).ok()?;
            let get = |n: &str| headers.get(n).map(String::as_str);
            (status >= 300)
                .then(|| S3ErrorReply::parse(status, get, &body))
                .flatten()
        })
    }

    /// The v2 target of the call's object (`S3Call.v2_target()`).
    fn v2_target(&self) -> PyResult<V2Target> {
        Python::with_gil(|py| {
            let (bucket, key, query, offset): (String, String, Vec<(String, String)>, u64) =
                self.call.call_method0(py, "v2_target")?.extract(py)?;
            let mut t = V2Target::new(bucket, key);
            t.query = query;
            t.offset = offset;
            Ok(t)
        })
    }
}

/// ONE RDMA transfer of a buffer slice, its requests made by `call` (an S3Call, or a bare
/// `send(token) -> reply or None` callable: v1 only): the number of requests. Under an S3Call's
/// negotiation the first request to an endpoint is v1, and a `501` with the unsupported marker
/// makes it hipobj-rc-v2 (remembered). Called without the GIL (each callback takes it). Every
/// RDMA transfer of the Python package, the engine's included, goes through here.
pub fn rdma_transfer(
    rt: &Runtime,
    kind: TransferKind,
    slice: Slice,
    call: &PyObject,
) -> Result<usize, Failed> {
    let route = Route::of(call).map_err(|e| Failed {
        error: Error::invalid("the transfer's S3 call is not an S3Call"),
        raised: Some(e),
        requests: 0,
    })?;
    negotiated(rt, kind, slice, &route).map_err(|mut f| {
        if let Some(reply) = route.server_error() {
            f.error = f.error.with_server(reply);
        }
        f
    })
}

/// [`rdma_transfer`] over its route.
fn negotiated(
    rt: &Runtime,
    kind: TransferKind,
    slice: Slice,
    route: &Route,
) -> Result<usize, Failed> {
    let Some(negotiation) = route.negotiation.as_ref() else {
        return transfer_v1(rt, kind, slice, route);
    };
    let negotiation = &negotiation.get().0;
    let endpoint = route.endpoint.as_str();
    let mut requests = 0;
    if negotiation.first(endpoint) == Protocol::V1 {
        let outcome = transfer_v1(rt, kind, slice, route);
        let (status, unsupported) = route.answer();
        let next = negotiation.answered(endpoint, Protocol::V1, status, unsupported);
        match (next, outcome) {
            (Next::SwitchToV2, Ok(n) | Err(Failed { requests: n, .. })) => requests += n,
            (_, outcome) => return outcome,
        }
        tracing::info!(
            endpoint,
            "the server speaks hipobj-rc-v2 only (501, unsupported): using it"
        );
    }
    let target = route.v2_target().map_err(|e| Failed {
        error: Error::invalid("the S3Call names no v2 target"),
        raised: Some(e),
        requests,
    })?;
    let mut ops = PythonV2 {
        call: &route.call,
        ready: None,
        raised: None,
        requests: 0,
    };
    let result = rt.transfer_v2_at(kind, slice.base, slice.offset, slice.len, &target, &mut ops);
    let (status, unsupported) = route.answer();
    negotiation.answered(endpoint, Protocol::V2, status, unsupported);
    requests += ops.requests;
    match result {
        Ok(_) => Ok(requests),
        Err(error) => Err(Failed {
            error,
            raised: ops.raised.take(),
            requests,
        }),
    }
}

/// One v1 transfer (`hipObjGet`/`hipObjPut`) whose requests `route.send` sends: the requests.
fn transfer_v1(
    rt: &Runtime,
    kind: TransferKind,
    slice: Slice,
    route: &Route,
) -> Result<usize, Failed> {
    let send = Python::with_gil(|py| route.send.clone_ref(py));
    let mut ops = PythonOps {
        send,
        reply: None,
        raised: None,
        requests: 0,
    };
    match rt.transfer(kind, slice.base, slice.len, slice.offset as u64, &mut ops) {
        Ok(()) => Ok(ops.requests),
        Err(error) => Err(Failed {
            error,
            raised: ops.raised.take(),
            requests: ops.requests,
        }),
    }
}

/// A v2 control answer as `S3Call.control` returns it: (status, lowercase headers).
type ControlAnswer = (u16, HashMap<String, String>);

/// Status a v2 callback reports when its request raised (the exception is kept).
const CONTROL_RAISED: i32 = 1;

/// hipobj-rc-v2's HTTP side over `S3Call.control(path, headers, keep)` (botocore: SigV4 over
/// POST, every header signed, from the NIC's address).
struct PythonV2<'a> {
    call: &'a PyObject,
    /// READY on its way: its answer is FINAL.
    ready: Option<JoinHandle<PyResult<ControlAnswer>>>,
    raised: Option<PyErr>,
    requests: usize,
}

fn control(
    call: &PyObject,
    path: &str,
    headers: Vec<(&'static str, String)>,
    keep: bool,
) -> PyResult<ControlAnswer> {
    Python::with_gil(|py| {
        call.call_method1(py, "control", (path, headers, keep))?
            .extract(py)
    })
}

impl PythonV2<'_> {
    fn keep<T>(&mut self, answer: PyResult<T>) -> Result<T, i32> {
        answer.map_err(|e| {
            self.raised = Some(e);
            CONTROL_RAISED
        })
    }
}

impl S3OpsV2 for PythonV2<'_> {
    fn send_prepare(&mut self, req: &PrepareRequest) -> Result<PrepareReplyV2, i32> {
        self.requests += 1;
        let (status, h) = self.keep(control(self.call, PREPARE_PATH, req.headers(), true))?;
        Ok(PrepareReplyV2::from_headers(status, |n| {
            h.get(n).map(String::as_str)
        }))
    }

    /// READY is answered only after the data phase, and a PUT's data phase is ours: the request
    /// goes out on a thread of its own.
    fn send_ready(&mut self, req: &ReadyRequest) -> i32 {
        self.requests += 1;
        let call = Python::with_gil(|py| self.call.clone_ref(py));
        let headers = req.headers();
        self.ready = Some(std::thread::spawn(move || {
            control(&call, READY_PATH, headers, true)
        }));
        0
    }

    fn finish_ready(&mut self) -> Result<FinalReplyV2, i32> {
        let handle = self.ready.take().ok_or(CONTROL_RAISED)?;
        let answer = handle.join().unwrap_or_else(|_| {
            Err(errors::S3Error::new_err(
                "the READY request's thread panicked",
            ))
        });
        let (status, h) = self.keep(answer)?;
        Ok(FinalReplyV2::from_headers(status, |n| {
            h.get(n).map(String::as_str)
        }))
    }

    fn send_cancel(&mut self, req: &CancelRequest) {
        self.ready = None;
        if let Err(e) = control(self.call, CANCEL_PATH, req.headers(), false) {
            tracing::debug!("hipobj-rc-v2 CANCEL: {e}");
        }
    }
}

/// "get" or "put".
pub fn parse_kind(kind: &str) -> PyResult<TransferKind> {
    match kind {
        "get" => Ok(TransferKind::Get),
        "put" => Ok(TransferKind::Put),
        other => Err(errors::invalid(format!(
            "kind must be 'get' or 'put', not {other:?}"
        ))),
    }
}

/// Move `size` bytes at `offset` of `registration` (GET: the server writes them; PUT: it reads
/// them) with the requests of `call`: an S3Call (negotiated, v1 or hipobj-rc-v2), or a callable
/// `send(token)` called for each v1 request (at most three). Returns how many requests were
/// sent. Raises the error class of the failure's code; when `send` raised, that exception is the
/// cause of the S3Error.
#[pyfunction]
#[pyo3(signature = (kind, registration, size, offset, call))]
pub fn transfer(
    py: Python<'_>,
    kind: &str,
    registration: Py<Registration>,
    size: usize,
    offset: u64,
    call: PyObject,
) -> PyResult<usize> {
    let kind = parse_kind(kind)?;
    let (rt, base, owner) = {
        let reg = registration.borrow(py);
        if kind == TransferKind::Get && !reg.writable() {
            return Err(errors::invalid(
                "the buffer is read-only: a GET needs a writable buffer",
            ));
        }
        (reg.live_runtime()?, reg.base(), reg.owner(py))
    };
    if size == 0 {
        return Err(errors::invalid("size is 0"));
    }
    let offset = usize::try_from(offset).map_err(|_| errors::invalid("offset too large"))?;
    let slice = Slice {
        base,
        offset,
        len: size,
    };
    // `owner` keeps the memory alive while the GIL is released, even if another thread
    // deregisters meanwhile (the core then retires the registration once this transfer ends).
    let outcome = py.allow_threads(|| rdma_transfer(&rt, kind, slice, &call));
    drop(owner);
    outcome.map_err(|f| f.into_py(py))
}
