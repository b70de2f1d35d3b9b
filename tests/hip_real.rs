//! The real HIP runtime on this machine: Debian's libamdhip64-5 (ROCm 5.2.3), which
//! scripts/install-deps installs (`make unit` runs it first). Without the library every test but
//! `loading_bogus_names_fails_cleanly` FAILS (it never skips). The GPU-less checks assert on a host
//! without an AMD GPU (/dev/kfd); on one with a GPU the same test asserts that the queries succeed.

use hipobj::hip::{
    self, CopyDirection, GpuRuntime, GpuSelectError, GpuSelection, HipLoadError, HipRuntime,
    MemoryTypeTable, PointerKind, HIP_ERROR_INVALID_DEVICE, HIP_ERROR_NOT_SUPPORTED,
    HIP_ERROR_NO_DEVICE, HIP_LIBRARY_NAMES,
};
use std::path::Path;
use std::sync::Arc;

/// The first HIP runtime soname the dynamic linker's cache lists, found without our loader.
fn installed_hip_soname() -> Option<&'static str> {
    let cache = std::process::Command::new("ldconfig")
        .arg("-p")
        .output()
        .ok();
    let listed = cache
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default();
    HIP_LIBRARY_NAMES.into_iter().find(|name| {
        listed.contains(&format!("{name} "))
            || ["/usr/lib/x86_64-linux-gnu", "/opt/rocm/lib", "/usr/lib64"]
                .iter()
                .any(|dir| Path::new(dir).join(name).exists())
    })
}

/// Whether this host has an AMD GPU driver node (no node, no GPU for HIP).
fn host_has_amd_gpu() -> bool {
    Path::new("/dev/kfd").exists()
}

/// The installed HIP runtime's soname; panics (the test fails) when there is none.
fn required_hip_soname() -> &'static str {
    installed_hip_soname().unwrap_or_else(|| {
        panic!("libamdhip64 not installed: scripts/install-deps (make deps) installs libamdhip64-5")
    })
}

#[test]
fn loading_bogus_names_fails_cleanly() {
    let err =
        HipRuntime::load_from(&["libamdhip64-bogus.so.99", "/no/such/dir/libamdhip64.so.5"]).err();
    match err {
        Some(HipLoadError::LibraryNotFound { tried, reason }) => {
            assert_eq!(tried.len(), 2);
            assert!(!reason.is_empty());
            assert!(HipLoadError::LibraryNotFound { tried, reason }
                .to_string()
                .contains(
                "none of libamdhip64-bogus.so.99, /no/such/dir/libamdhip64.so.5 could be loaded"
            ));
        }
        other => panic!("expected LibraryNotFound, got {other:?}"),
    }
}

#[test]
fn loader_finds_the_installed_runtime() {
    let soname = required_hip_soname();
    let runtime = match HipRuntime::load_from(&HIP_LIBRARY_NAMES) {
        Ok(runtime) => runtime,
        Err(err) => panic!("{soname} is installed but did not load: {err}"),
    };
    assert_eq!(runtime.library_name(), soname);
    let major: i32 = soname
        .rsplit('.')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1);
    let version = runtime.runtime_version();
    eprintln!(
        "{soname}: hipRuntimeGetVersion = {version:?}, table {:?}",
        runtime.memory_type_table()
    );
    if let Some(version) = version {
        assert_eq!(
            version / 10_000_000,
            major,
            "HIP_VERSION {version} doesn't match {soname}"
        );
        assert_eq!(
            runtime.memory_type_table(),
            MemoryTypeTable::for_runtime_version(version)
        );
    }
    if major == 5 {
        assert_eq!(runtime.memory_type_table(), MemoryTypeTable::Rocm5);
    }
}

#[test]
fn load_caches_only_a_success() {
    required_hip_soname();
    let (Ok(first), Ok(second)) = (hip::load(), hip::load()) else {
        panic!("load failed with HIP installed")
    };
    assert!(
        Arc::ptr_eq(&first, &second),
        "a second load must return the cached runtime"
    );
}

#[test]
fn device_queries_match_the_host() {
    let soname = required_hip_soname();
    let Ok(runtime) = hip::load() else {
        panic!("{soname} is installed but did not load")
    };
    if host_has_amd_gpu() {
        // A host with an AMD GPU (none of the project's machines has one): the queries succeed.
        let count = runtime
            .device_count()
            .expect("/dev/kfd present, yet hipGetDeviceCount failed");
        assert!(count >= 1, "/dev/kfd present, {count} HIP devices");
        runtime.set_device(0).expect("hipSetDevice(0) with a GPU");
        assert_eq!(runtime.current_device(), Ok(0));
        eprintln!("{soname}: this host has an AMD GPU; checked that its device queries succeed");
    } else {
        gpu_less_queries_fail(soname, &runtime);
    }
}

/// What HIP answers on a host without an AMD GPU.
fn gpu_less_queries_fail(soname: &str, runtime: &Arc<dyn GpuRuntime>) {
    let count = runtime.device_count();
    eprintln!("{soname} without a GPU: hipGetDeviceCount -> {count:?}");
    let err = count.expect_err("no GPU, yet hipGetDeviceCount succeeded");
    assert_eq!(err.code, HIP_ERROR_NO_DEVICE);
    assert_eq!(err.call, "hipGetDeviceCount");

    let current = runtime.current_device();
    eprintln!("{soname} without a GPU: hipGetDevice -> {current:?}");
    let err = current.expect_err("no GPU, yet hipGetDevice succeeded");
    // ROCm 5.2 answers hipErrorInvalidDevice (101) here, not hipErrorNoDevice (100).
    assert!(
        err.code == HIP_ERROR_INVALID_DEVICE || err.code == HIP_ERROR_NO_DEVICE,
        "hipGetDevice -> {err}"
    );

    assert_eq!(
        runtime.set_device(0).map_err(|e| e.code),
        Err(HIP_ERROR_INVALID_DEVICE)
    );
    assert!(runtime.pci_bus_id(0).is_err());
    assert!(runtime.alloc_host(4096).is_err());
    assert!(runtime.make_visible_after_rdma_write(0).is_err());

    let local = [0u8; 16];
    assert_eq!(
        runtime.classify_pointer(local.as_ptr() as usize),
        PointerKind::Unknown
    );
    assert_eq!(runtime.classify_pointer(0), PointerKind::Unknown);
    assert!(runtime.address_range(local.as_ptr() as usize).is_err());

    // hipObjInit's gpuDevice rules on this host: -1 means "no GPU", 0 names a GPU that isn't there.
    assert!(
        matches!(hip::select_gpu(Some(runtime.as_ref()), -1), Ok(GpuSelection::NoGpu { hip_error }) if hip_error != 0)
    );
    assert_eq!(
        hip::select_gpu(Some(runtime.as_ref()), 0),
        Err(GpuSelectError::NoSuchDevice {
            requested: 0,
            count: 0
        })
    );

    let mut dst = [0u8; 16];
    // SAFETY: both are live 16-byte host arrays that outlive the call; with no device nothing is
    // queued (and a blocking fallback would have finished before returning).
    let copy = unsafe {
        runtime.start_copy(
            0,
            dst.as_mut_ptr() as usize,
            local.as_ptr() as usize,
            16,
            CopyDirection::HostToDevice,
        )
    };
    assert!(copy.is_err(), "a copy started on a GPU-less host: {copy:?}");
}

#[test]
fn dmabuf_export_reports_what_is_missing() {
    let soname = required_hip_soname();
    let runtime = match HipRuntime::load_from(&HIP_LIBRARY_NAMES) {
        Ok(runtime) => runtime,
        Err(err) => panic!("{soname} is installed but did not load: {err}"),
    };
    eprintln!(
        "{soname}: dmabuf export available = {}",
        runtime.has_dmabuf_export()
    );
    if !runtime.has_dmabuf_export() {
        let local = [0u8; 4096];
        let err = runtime
            .export_dmabuf(local.as_ptr() as usize, local.len())
            .expect_err("no export entry point");
        assert_eq!(err.code, HIP_ERROR_NOT_SUPPORTED);
        assert_eq!(err.call, "dmabuf export");
    }
}
