//! The RDMA devices a lane test may use (std only: the library's own lane tests include it too).
#![allow(dead_code)]

/// The RDMA devices the tests may use: `$HIPOBJ_VM_DEVICES` (set by tests/vm/run), else the devices
/// in /sys/class/infiniband. Empty = no RDMA here.
pub fn rdma_devices() -> Vec<String> {
    if let Ok(v) = std::env::var("HIPOBJ_VM_DEVICES") {
        let d: Vec<String> = v.split_whitespace().map(str::to_string).collect();
        if !d.is_empty() {
            return d;
        }
    }
    let mut d: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .map(|it| {
            it.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    d.sort();
    d
}

/// The lane's devices as a NIC hint ("rxe0,rxe1"); `None` when there is no RDMA device here.
pub fn device_hint() -> Option<String> {
    let d = rdma_devices();
    (!d.is_empty()).then(|| d.join(","))
}
