//! One Python exception class per `hipObjOpError_t` code, all under `hipobj.HipObjError`, and the
//! one mapping from the core's `Error` to them.

use hipobj::error::{Error, OpError};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::{create_exception, PyTypeInfo};

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
create_exception!(hipobj, BusyError, HipObjError, "hipObjBusy: every RDMA connection is in use and the caller may not wait (inside a transfer's callback), or a timed-out staging copy still holds the buffer.");

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

/// The Python exception for a core error: its code's class, the core's message.
pub fn to_py(err: Error) -> PyErr {
    Python::with_gil(|py| {
        let mut msg = err.detail.into_owned();
        if err.hip_error != 0 {
            msg.push_str(&format!(" (hipError {})", err.hip_error));
        }
        PyErr::from_type(class_of(py, err.code), msg)
    })
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
    Ok(())
}
