//! One Python exception class per `hipObjOpError_t` code, all under `hipobj.HipObjError`, and the
//! one mapping from the core's `Error` to them.

use hipobj::engine::ErrorClass;
use hipobj::error::{Error, OpError};
use hipobj::s3error::S3ErrorReply;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::{create_exception, PyTypeInfo};
use std::collections::HashMap;

create_exception!(
    hipobj,
    HipObjError,
    PyException,
    "Base class of every hipObject error; `code` is the hipObjOpError_t value."
);
create_exception!(
    hipobj,
    InvalidValueError,
    HipObjError,
    "hipObjInvalidValue: an argument is wrong; nothing was changed."
);
create_exception!(
    hipobj,
    NotInitializedError,
    HipObjError,
    "hipObjNotInitialized: no Session is open (or it was closed while the call waited)."
);
create_exception!(
    hipobj,
    AlreadyInitializedError,
    HipObjError,
    "hipObjAlreadyInitialized: a Session is already open in this process."
);
create_exception!(
    hipobj,
    RdmaError,
    HipObjError,
    "hipObjRdmaError: libibverbs, the NIC, a queue pair or a HIP call failed."
);
create_exception!(
    hipobj,
    S3Error,
    HipObjError,
    "hipObjS3Error: the S3 request failed or the server refused the transfer."
);
create_exception!(
    hipobj,
    BufNotRegisteredError,
    HipObjError,
    "hipObjBufNotRegistered: the buffer is not (or no longer) registered."
);
create_exception!(
    hipobj,
    BufAlreadyRegisteredError,
    HipObjError,
    "hipObjBufAlreadyRegistered: this buffer's base is already registered."
);
create_exception!(
    hipobj,
    NicNotFoundError,
    HipObjError,
    "hipObjNicNotFound: no active RDMA device matches `nic`."
);
create_exception!(
    hipobj,
    DmabufNotSupportedError,
    HipObjError,
    "hipObjDmabufNotSupported: device memory cannot be registered for GPU-direct RDMA."
);
create_exception!(
    hipobj,
    SizeTooLargeError,
    HipObjError,
    "hipObjSizeTooLarge: larger than a registration may be (4 GiB)."
);
create_exception!(
    hipobj,
    InternalError,
    HipObjError,
    "hipObjInternalError: a bug in hipObject."
);
create_exception!(
    hipobj,
    NotSupportedError,
    S3Error,
    "hipObjNotSupported: the server answered a hipobj-rc-v2 PREPARE 501 with the unsupported marker (it speaks no v2); plain HTTP may be used."
);
create_exception!(
    hipobj,
    ChecksumMismatchError,
    S3Error,
    "What a download landed does not have the object's stored checksum (docs/protocol.md section 15; the object was read twice): `algorithm`, `expected` (the server's value) and `actual` (what landed), base64 as S3 writes them. The destination file is left as it was."
);
create_exception!(hipobj, BusyError, HipObjError, "hipObjBusy: every RDMA connection is in use and the caller may not wait (inside a transfer's callback), or a timed-out staging copy still holds the buffer.");

/// A download's checksum mismatch as [`ChecksumMismatchError`], its values as attributes.
pub fn checksum_mismatch(py: Python<'_>, what: &str, m: &hipobj::checksum::Mismatch) -> PyErr {
    let err = ChecksumMismatchError::new_err(format!("{what}: {m}"));
    let value = err.value(py);
    for (name, v) in [
        ("algorithm", m.algo.as_str()),
        ("expected", m.expected.as_str()),
        ("actual", m.got.as_str()),
    ] {
        if let Err(e) = value.setattr(name, v) {
            return e;
        }
    }
    err
}

/// The exception class of a code, with its numeric value.
pub fn class_of(py: Python<'_>, code: OpError) -> Bound<'_, pyo3::types::PyType> {
    match code {
        OpError::InvalidValue => InvalidValueError::type_object(py),
        OpError::NotInitialized => NotInitializedError::type_object(py),
        OpError::AlreadyInitialized => AlreadyInitializedError::type_object(py),
        OpError::RdmaError => RdmaError::type_object(py),
        OpError::S3Error => S3Error::type_object(py),
        OpError::BufNotRegistered => BufNotRegisteredError::type_object(py),
        OpError::BufAlreadyRegistered => BufAlreadyRegisteredError::type_object(py),
        OpError::NicNotFound => NicNotFoundError::type_object(py),
        OpError::DmabufNotSupported => DmabufNotSupportedError::type_object(py),
        OpError::SizeTooLarge => SizeTooLargeError::type_object(py),
        OpError::Busy => BusyError::type_object(py),
        OpError::NotSupported => NotSupportedError::type_object(py),
        OpError::InternalError | OpError::Success => InternalError::type_object(py),
    }
}

/// The Python exception for a core error: its code's class, the core's message. An error the
/// server answered also carries what botocore's `ClientError` does: `response` (`["Error"]
/// ["Code"]`, `["Error"]["Message"]`, `["ResponseMetadata"]["HTTPStatusCode"]` and
/// `["RequestId"]`), and as attributes `error_code`, `error_message`, `http_status` and
/// `request_id` (`code` stays the class's `hipObjOpError_t` value).
pub fn to_py(err: Error) -> PyErr {
    Python::with_gil(|py| {
        let mut msg = err.detail.into_owned();
        if err.hip_error != 0 {
            msg.push_str(&format!(" (hipError {})", err.hip_error));
        }
        let exc = PyErr::from_type(class_of(py, err.code), msg);
        if let Some(reply) = err.server {
            if let Err(e) = describe_server_error(py, &exc, &reply) {
                tracing::warn!("cannot attach the server's S3 error to the exception: {e}");
            }
        }
        exc
    })
}

fn describe_server_error(py: Python<'_>, exc: &PyErr, reply: &S3ErrorReply) -> PyResult<()> {
    let value = exc.value(py);
    value.setattr("response", response_of(py, reply)?)?;
    value.setattr("error_code", reply.code.as_deref())?;
    value.setattr("error_message", reply.message.as_deref())?;
    value.setattr("http_status", reply.status)?;
    value.setattr("request_id", reply.request_id.as_deref())
}

/// botocore's `ClientError.response` of a server's S3 error (keys only for what it said).
fn response_of<'py>(py: Python<'py>, reply: &S3ErrorReply) -> PyResult<Bound<'py, PyDict>> {
    let error = PyDict::new(py);
    if let Some(code) = &reply.code {
        error.set_item("Code", code)?;
    }
    if let Some(message) = &reply.message {
        error.set_item("Message", message)?;
    }
    let meta = PyDict::new(py);
    meta.set_item("HTTPStatusCode", reply.status)?;
    if let Some(id) = &reply.request_id {
        meta.set_item("RequestId", id)?;
    }
    let response = PyDict::new(py);
    response.set_item("Error", error)?;
    response.set_item("ResponseMetadata", meta)?;
    Ok(response)
}

/// `hipobj._core.error_response(status, headers, body)`: the S3 error of an answer (headers by
/// lowercase name) in botocore's `ClientError.response` shape, or None when it is no error.
#[pyfunction]
pub fn error_response<'py>(
    py: Python<'py>,
    status: u16,
    headers: HashMap<String, String>,
    body: &[u8],
) -> PyResult<Option<Bound<'py, PyDict>>> {
    match S3ErrorReply::parse(status, |n| headers.get(n).map(String::as_str), body) {
        Some(reply) => response_of(py, &reply).map(Some),
        None => Ok(None),
    }
}

/// `hipobj._core.retry_class(status, code)`: the AWS SDKs' standard-mode class of an answer
/// ("transient", "throttling", "fatal"), the library's one table (`hipobj::engine::ErrorClass`).
#[pyfunction]
#[pyo3(signature = (status, code=None))]
pub fn retry_class(status: u16, code: Option<&str>) -> &'static str {
    ErrorClass::of_status(status, code).as_str()
}

/// `InvalidValueError(msg)`.
pub fn invalid(msg: impl Into<String>) -> PyErr {
    InvalidValueError::new_err(msg.into())
}

/// Add the classes to the module, each with its `code`.
pub fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let base = HipObjError::type_object(py);
    base.setattr("code", -1)?;
    m.add("HipObjError", base)?;
    for code in OpError::ALL {
        if code == OpError::Success {
            continue;
        }
        let class = class_of(py, code);
        class.setattr("code", code as i32)?;
        m.add(class.name()?, class)?;
    }
    m.add(
        "ChecksumMismatchError",
        ChecksumMismatchError::type_object(py),
    )?;
    Ok(())
}
