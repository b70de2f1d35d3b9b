//! `hipobj._core.transfer`: one `hipObjGet`/`hipObjPut` whose S3 request is a Python callable.
//!
//! The GIL is released for the whole transfer; each callback re-acquires it to run Python (boto3),
//! so many Python threads transfer at once.

use crate::errors::{self, to_py};
use crate::registration::Registration;
use hipobj::runtime::{S3Ops, TransferKind};
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
    let kind = match kind {
        "get" => TransferKind::Get,
        "put" => TransferKind::Put,
        other => {
            return Err(errors::invalid(format!(
                "kind must be 'get' or 'put', not {other:?}"
            )))
        }
    };
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
    let mut ops = PythonOps {
        send,
        reply: None,
        raised: None,
        requests: 0,
    };
    // `owner` keeps the memory alive while the GIL is released, even if another thread
    // deregisters meanwhile (the core then retires the registration once this transfer ends).
    let outcome = py.allow_threads(|| rt.transfer(kind, base, size, offset, &mut ops));
    drop(owner);
    match outcome {
        Ok(()) => Ok(ops.requests),
        Err(e) => {
            let err = to_py(e);
            if let Some(cause) = ops.raised.take() {
                err.set_cause(py, Some(cause));
            }
            Err(err)
        }
    }
}
