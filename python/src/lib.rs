//! `hipobj._core`: the native half of the `hipobj` Python package, a thin layer over
//! `hipobj::runtime` (the same core as the C library). Everything Python-facing that is not about
//! memory or the transfer itself (boto3, safetensors, sessions) lives in `python/hipobj/*.py`.

mod batch;
mod buffer;
mod checksum;
mod engine;
mod errors;
mod registration;
mod transfer;
mod transport;

use errors::to_py;
use hipobj::env::{EnvConfig, MAX_MAX_TRANSFERS};
use hipobj::runtime::{self, InitConfig};
use hipobj::token::{gid_ipv4, Token};
use pyo3::prelude::*;

/// `hipObjInit`: open the RDMA device `nic` (a name such as "rxe0"; None: the one closest to the
/// GPU), stage through HIP device `gpu` (None: the thread's current device, or no GPU), with
/// `max_transfers` RDMA connections (None: HIPOBJ_MAX_TRANSFERS or 16).
#[pyfunction]
#[pyo3(signature = (nic=None, gpu=None, max_transfers=None))]
fn init(
    py: Python<'_>,
    nic: Option<String>,
    gpu: Option<i32>,
    max_transfers: Option<i64>,
) -> PyResult<()> {
    let gpu_device = gpu.unwrap_or(-1);
    if gpu_device < -1 {
        return Err(errors::invalid(format!(
            "gpu must be None or a device index >= 0, not {gpu_device}"
        )));
    }
    let mut env = EnvConfig::from_env();
    env.max_transfers = default_max_transfers(max_transfers)?;
    // "rxe0,rxe2": several devices (docs/rails.md); each token request leaves from its own
    // token's NIC (hipobj._s3 binds per token).
    let mut cfg = InitConfig::with_nics(nic.as_deref(), gpu, env);
    cfg.gpu_device = gpu_device;
    py.allow_threads(|| runtime::init(cfg)).map_err(to_py)
}

/// `max_transfers` checked (1..1024), or HIPOBJ_MAX_TRANSFERS, or 16: the transfers at once of a
/// Session (its RDMA connections; without RDMA, the plain-HTTP copies' default concurrency).
#[pyfunction]
#[pyo3(signature = (max_transfers=None))]
fn default_max_transfers(max_transfers: Option<i64>) -> PyResult<usize> {
    let Some(n) = max_transfers else {
        return Ok(EnvConfig::from_env().max_transfers);
    };
    usize::try_from(n)
        .ok()
        .filter(|n| (1..=MAX_MAX_TRANSFERS).contains(n))
        .ok_or_else(|| {
            errors::invalid(format!(
                "max_transfers must be 1..{MAX_MAX_TRANSFERS}, not {n}"
            ))
        })
}

/// `hipObjShutdown`: a no-op when not initialised; transfers in progress finish first.
#[pyfunction]
fn shutdown(py: Python<'_>) -> PyResult<()> {
    py.allow_threads(runtime::shutdown).map_err(to_py)
}

/// Whether hipObject is initialised in this process.
#[pyfunction]
fn is_initialized() -> bool {
    runtime::current().is_some()
}

fn current() -> PyResult<std::sync::Arc<runtime::Runtime>> {
    runtime::current().ok_or_else(|| to_py(hipobj::error::Error::not_initialized()))
}

/// The RDMA devices in use, the preferred first ("rxe0" or "rxe0,rxe2").
#[pyfunction]
fn nic_name() -> PyResult<String> {
    Ok(current()?.device_names())
}

/// What each RDMA device carried (docs/rails.md): a list of dicts with `device`, `port_up`,
/// `transfers`, `bytes`, `failovers`, `port_downs`, `port_ups`, `failbacks`, the preferred first.
#[pyfunction]
fn rail_stats(py: Python<'_>) -> PyResult<Vec<PyObject>> {
    let rt = current()?;
    rt.rail_stats()
        .into_iter()
        .map(|r| {
            let d = pyo3::types::PyDict::new(py);
            d.set_item("device", r.device)?;
            d.set_item("port_up", r.port_up)?;
            d.set_item("transfers", r.transfers)?;
            d.set_item("bytes", r.bytes)?;
            d.set_item("failovers", r.failovers)?;
            d.set_item("port_downs", r.port_downs)?;
            d.set_item("port_ups", r.port_ups)?;
            d.set_item("failbacks", r.failbacks)?;
            Ok(d.into_any().unbind())
        })
        .collect()
}

/// The IPv4 address of the GID that tokens carry (what `hipObjTokenClientNic` returns for them),
/// or None when the GID is not IPv4-mapped.
#[pyfunction]
fn nic_address() -> PyResult<Option<String>> {
    Ok(gid_ipv4(&current()?.device().port().gid).map(|ip| ip.to_string()))
}

/// The HIP device in use, or None without a GPU.
#[pyfunction]
fn gpu_device() -> PyResult<Option<i32>> {
    Ok(current()?.gpu().map(|(_, device)| device))
}

/// Connections in use limit (max transfers at once).
#[pyfunction]
fn max_transfers() -> PyResult<usize> {
    Ok(current()?.env().max_transfers)
}

/// `hipObjTokenClientNic`: the client NIC's IPv4 address that a token names ("" if its GID is not
/// IPv4-mapped). Raises InvalidValueError for a malformed token.
#[pyfunction]
fn token_client_nic(token: &str) -> PyResult<String> {
    let token = Token::decode_hex(token.as_bytes()).map_err(|e| errors::invalid(e.to_string()))?;
    Ok(token
        .client_nic_ipv4()
        .map(|ip| ip.to_string())
        .unwrap_or_default())
}

/// The library version, e.g. "0.1.0".
#[pyfunction]
fn version() -> String {
    hipobj::version::VERSION_CSTR
        .trim_end_matches('\0')
        .to_string()
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::add_to(m)?;
    m.add_class::<registration::Registration>()?;
    m.add_class::<transfer::Negotiation>()?;
    m.add_class::<transport::Transport>()?;
    m.add_class::<batch::BatchQueue>()?;
    m.add_class::<transport::Ticket>()?;
    m.add_function(wrap_pyfunction!(transport::transport_mode, m)?)?;
    m.add_function(wrap_pyfunction!(transport::rdma_missing, m)?)?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(default_max_transfers, m)?)?;
    m.add_function(wrap_pyfunction!(is_initialized, m)?)?;
    m.add_function(wrap_pyfunction!(nic_name, m)?)?;
    m.add_function(wrap_pyfunction!(nic_address, m)?)?;
    m.add_function(wrap_pyfunction!(rail_stats, m)?)?;
    m.add_function(wrap_pyfunction!(gpu_device, m)?)?;
    m.add_function(wrap_pyfunction!(max_transfers, m)?)?;
    m.add_function(wrap_pyfunction!(token_client_nic, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(errors::error_response, m)?)?;
    m.add_function(wrap_pyfunction!(errors::retry_class, m)?)?;
    m.add_function(wrap_pyfunction!(registration::register_buffer, m)?)?;
    m.add_function(wrap_pyfunction!(registration::register_pointer, m)?)?;
    m.add_function(wrap_pyfunction!(transfer::transfer, m)?)?;
    m.add_function(wrap_pyfunction!(engine::engine_download, m)?)?;
    m.add_function(wrap_pyfunction!(checksum::check_landed, m)?)?;
    m.add_function(wrap_pyfunction!(checksum::checksum_mode, m)?)?;
    m.add_function(wrap_pyfunction!(engine::engine_download_to, m)?)?;
    m.add_function(wrap_pyfunction!(engine::engine_download_into, m)?)?;
    m.add_function(wrap_pyfunction!(engine::engine_upload, m)?)?;
    m.add_function(wrap_pyfunction!(engine::engine_upload_from, m)?)?;
    m.add_function(wrap_pyfunction!(checksum::crc_of, m)?)?;
    m.add_function(wrap_pyfunction!(checksum::crc_of_buffer, m)?)?;
    m.add_function(wrap_pyfunction!(checksum::crc_blocks, m)?)?;
    m.add_function(wrap_pyfunction!(checksum::crc_blocks_of_buffer, m)?)?;
    m.add_function(wrap_pyfunction!(checksum::crc_combine, m)?)?;
    Ok(())
}
