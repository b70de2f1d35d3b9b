//! `hipobj._core.transfer`: one `hipObjGet`/`hipObjPut` whose S3 request is a Python callable.
//!
//! The GIL is released for the whole transfer; each callback re-acquires it to run Python (boto3),
//! so many Python threads transfer at once.

use crate::errors::{self, to_py};
use crate::registration::Registration;
use hipobj::engine::Slice;
use hipobj::runtime::{Runtime, S3Ops, TransferKind};
use pyo3::prelude::*;

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
}

impl Failed {
    /// The Python exception: the error's class, caused by what `send` raised.
    pub fn into_py(self, py: Python<'_>) -> PyErr {
        let err = to_py(self.error);
        if let Some(cause) = self.raised {
            err.set_cause(py, Some(cause));
        }
        err
    }
}

/// ONE RDMA transfer of a buffer slice (one library transfer: a fresh token, pairing included),
/// its requests sent by the Python callable `send(token) -> reply or None`: the number of
/// requests. Called without the GIL (each callback takes it). Every RDMA transfer of the Python
/// package, the engine's included, goes through here.
pub fn rdma_transfer(
    rt: &Runtime,
    kind: TransferKind,
    slice: Slice,
    send: PyObject,
) -> Result<usize, Failed> {
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
        }),
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
/// them), calling `send(token)` for each request (at most three). Returns how many requests were
/// sent. Raises the error class of the failure's code; when `send` raised, that exception is the
/// cause of the S3Error.
#[pyfunction]
#[pyo3(signature = (kind, registration, size, offset, send))]
pub fn transfer(
    py: Python<'_>,
    kind: &str,
    registration: Py<Registration>,
    size: usize,
    offset: u64,
    send: PyObject,
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
    let outcome = py.allow_threads(|| rdma_transfer(&rt, kind, slice, send));
    drop(owner);
    outcome.map_err(|f| f.into_py(py))
}
