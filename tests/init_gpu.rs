//! `hipObjInit`'s gpuDevice rules through the C ABI on this GPU-less host, against Debian's HIP
//! runtime (libamdhip64-5) when it is installed: gpuDevice 0 names no GPU (hipObjInvalidValue);
//! gpuDevice -1 with a nicHint goes on without a GPU and reaches NIC selection (no RDMA device here:
//! hipObjNicNotFound); -1 without a hint cannot choose a NIC. The hint names a device no host has,
//! so the answers do not depend on the host's RDMA devices. It needs libibverbs (scripts/install-deps)
//! and a host without a GPU (`make unit`'s host): elsewhere it FAILS, saying which is missing.

mod common;

use common::*;
use std::ffi::CString;
use std::ptr;

fn init(gpu_device: i32, hint: Option<&str>) -> hipObjError_t {
    let hint = hint.map(|h| CString::new(h).unwrap());
    let mut cfg = hipObjConfig_t {
        endpoint: ptr::null(),
        region: ptr::null(),
        accessKey: ptr::null(),
        secretKey: ptr::null(),
        flags: 0,
        gpuDevice: gpu_device,
        nicHint: hint.as_ref().map_or(ptr::null(), |h| h.as_ptr()),
    };
    // SAFETY: cfg and the hint string outlive the call.
    unsafe { hipObjInit(&mut cfg) }
}

/// A NIC name no host has: the hinted NIC is never found.
const ABSENT_NIC: &str = "hipobj-no-such-nic0";

/// The GPU device nodes of this host (AMD's /dev/kfd, NVIDIA's /dev/nvidia0), if any.
fn gpu_nodes() -> Vec<&'static str> {
    ["/dev/kfd", "/dev/nvidia0"]
        .into_iter()
        .filter(|p| std::path::Path::new(p).exists())
        .collect()
}

fn hip_installed() -> bool {
    ["libamdhip64.so.5", "libamdhip64.so.6", "libamdhip64.so.7"]
        .iter()
        .any(|n| {
            std::path::Path::new("/usr/lib/x86_64-linux-gnu")
                .join(n)
                .exists()
                || std::path::Path::new("/opt/rocm/lib").join(n).exists()
        })
}

#[test]
fn gpu_device_rules_without_a_gpu() {
    assert!(
        gpu_nodes().is_empty(),
        "this test is for hosts without a GPU (make unit's host); this one has {:?}",
        gpu_nodes()
    );
    assert!(
        std::path::Path::new("/usr/lib/x86_64-linux-gnu/libibverbs.so.1").exists(),
        "libibverbs not installed (hipObjInit would stop at hipObjRdmaError first): scripts/install-deps installs it"
    );
    // -1 + a hint: no GPU, so the hinted NIC is looked for, and there is none on this host.
    let e = init(-1, Some(ABSENT_NIC));
    assert_eq!(
        e.opError,
        OpError::NicNotFound,
        "gpuDevice -1 + nicHint goes on without a GPU"
    );
    if hip_installed() {
        // HIP loads and reports no device: GPU 0 does not exist.
        let e = init(0, Some(ABSENT_NIC));
        assert_eq!(e.opError, OpError::InvalidValue);
        // -1 without a hint: nothing to choose a NIC by; hipError carries HIP's answer.
        let e = init(-1, None);
        assert_eq!(e.opError, OpError::RdmaError);
        assert_ne!(e.hipError, 0, "hipError says why there is no GPU");
    } else {
        eprintln!("note: libamdhip64 not installed; checked the no-HIP path only");
        let e = init(0, Some(ABSENT_NIC));
        assert_eq!(e.opError, OpError::InvalidValue, "no HIP runtime: no GPU 0");
        let e = init(-1, None);
        assert_eq!(e.opError, OpError::NicNotFound);
    }
    // Nothing was initialised by any of these.
    // SAFETY: plain C call.
    let e = unsafe { hipObjBufDeregister(8 as *mut std::ffi::c_void) };
    assert_eq!(e.opError, OpError::NotInitialized);
}
