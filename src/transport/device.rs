//! Whether this process can use RDMA at all: the question every client asks before it opens a
//! runtime under `auto` (the command line, Python), answered in one place.

/// Why no RDMA device can be used on this host, if none can: libibverbs missing, or no device
/// with an active port. (A device that exists but is not the one asked for is the runtime's own
/// error: it names the device.)
pub fn rdma_missing() -> Option<String> {
    let detail = match crate::verbs::Lib::load() {
        Err(e) => format!("libibverbs cannot be loaded: {e}"),
        Ok(lib) => match crate::verbs::list_devices(&lib, None) {
            Ok(devices) if devices.is_empty() => "none with an active port on this host".into(),
            Ok(_) => return None,
            Err(e) => format!("cannot list them: {e}"),
        },
    };
    Some(detail)
}
