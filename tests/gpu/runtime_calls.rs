//! The `GpuRuntime` calls registration relies on: pointer kinds, allocation ranges, dmabuf export,
//! device selection and the visibility call after a direct RDMA write.

use crate::device::{TestGpu, DEVICE};
use hipobj::error::OpError;
use hipobj::hip::{
    self, choose_runtime, GpuPlatform, GpuRuntime, GpuSelectError, GpuSelection, HipLoadError,
    PointerKind, SimGpu,
};
use std::os::fd::AsRawFd;
use std::sync::Arc;

#[test]
fn device_and_host_pointers_are_classified() {
    let gpu = TestGpu::from_env();
    let rt = gpu.runtime();
    let len = 1 << 20;
    let device = gpu.alloc(len);
    let base = device.addr();
    assert_eq!(
        rt.classify_pointer(base),
        PointerKind::Device { device: DEVICE }
    );
    assert_eq!(
        rt.classify_pointer(base + len / 2),
        PointerKind::Device { device: DEVICE },
        "an interior device pointer"
    );
    let pinned = rt.alloc_host(64 << 10).expect("pinned host memory");
    assert_eq!(rt.classify_pointer(pinned.addr()), PointerKind::Host);
    assert_eq!(rt.classify_pointer(pinned.addr() + 100), PointerKind::Host);
    // malloc memory: Host on CUDA (CU_MEMORYTYPE 0); Unknown on the sim (as ROCm 5). Both are
    // registered as host memory; what matters is that it is never taken for device memory.
    let plain = vec![7u8; 4096];
    let kind = rt.classify_pointer(plain.as_ptr() as usize);
    eprintln!("malloc memory: {kind:?}");
    assert!(
        matches!(kind, PointerKind::Host | PointerKind::Unknown),
        "{kind:?}"
    );
    if gpu.is_real() {
        assert_eq!(kind, PointerKind::Host);
    }
    assert_eq!(rt.classify_pointer(0), PointerKind::Unknown);
    drop(device);
    let freed = rt.classify_pointer(base);
    assert!(
        !matches!(freed, PointerKind::Device { .. }),
        "freed device memory still classified as device: {freed:?}"
    );
}

#[test]
fn a_buffer_running_past_its_allocation_is_refused() {
    let gpu = TestGpu::from_env();
    let rt = gpu.runtime();
    let len = (1 << 20) + 1000;
    let device = gpu.alloc(len);
    let base = device.addr();
    let range = rt.address_range(base).expect("address range");
    eprintln!("allocation of {len} bytes: {range:?}");
    assert_eq!(range.base, base);
    assert!(range.len >= len, "{range:?}");
    assert_eq!(rt.address_range(base + 4096).expect("interior"), range);
    // hipObjBufRegister's rule, as the library applies it.
    let check = |ptr, len| hip::check_inside_allocation(rt.as_ref(), ptr, len).map_err(|e| e.code);
    let end = range.len;
    assert_eq!(check(base, len), Ok(range));
    assert_eq!(check(base, end), Ok(range));
    assert_eq!(check(base + 4096, end - 4096), Ok(range));
    assert_eq!(check(base, end + 1), Err(OpError::InvalidValue));
    assert_eq!(check(base + 4096, end), Err(OpError::InvalidValue));
    assert_eq!(check(base + end - 1, 2), Err(OpError::InvalidValue));
    // Host memory has no device allocation to lie in.
    let plain = vec![0u8; 4096];
    assert_eq!(
        check(plain.as_ptr() as usize, plain.len()),
        Err(OpError::InvalidValue)
    );
}

/// The size of the dmabuf behind `fd` (dmabufs answer `lseek(SEEK_END)` with their size).
fn dmabuf_size(fd: &impl AsRawFd) -> i64 {
    // SAFETY: lseek on a descriptor we own; it only moves that descriptor's offset.
    unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_END) }
}

/// The test double offers no dmabuf export: it refuses one, whole allocation or not (the path
/// `hipObjBufRegister` takes on a runtime without export). Runs on the sim whatever the backend.
#[test]
fn dmabuf_export_is_refused_where_none_is_offered() {
    let sim = SimGpu::new(1);
    for len in [2 << 20, (1 << 20) + 1000] {
        let base = sim.alloc_device(DEVICE, len).expect("sim alloc");
        let err = sim
            .export_dmabuf(base, len)
            .expect_err("export where none is offered");
        eprintln!("dmabuf export of {len} bytes refused as expected: {err}");
        sim.free_device(base).expect("sim free");
    }
}

/// The GPU under test must offer dmabuf export (the H200 does); FAILS where it does not.
fn require_dmabuf(gpu: &TestGpu) {
    assert!(
        gpu.dmabuf_expected(),
        "{}: no dmabuf export (this test needs a GPU that offers it)",
        gpu.describe()
    );
}

#[test]
#[ignore = "needs a GPU with dmabuf export: run by tests/gpu/run-on-device"]
fn dmabuf_export_of_device_memory() {
    let gpu = TestGpu::from_env();
    require_dmabuf(&gpu);
    let rt = gpu.runtime();
    let len = 2 << 20;
    let device = gpu.alloc(len);
    let base = device.addr();
    let whole = rt
        .export_dmabuf(base, len)
        .unwrap_or_else(|e| panic!("dmabuf export of a whole allocation failed: {e}"));
    eprintln!(
        "whole allocation: fd {} offset {} dmabuf size {}",
        whole.fd.as_raw_fd(),
        whole.offset,
        dmabuf_size(&whole.fd)
    );
    assert_eq!(whole.offset, 0);
    assert!(dmabuf_size(&whole.fd) >= len as i64);
    // An unaligned range inside it: the export covers its pages, the offset says where it starts.
    let inner = rt
        .export_dmabuf(base + 4096 + 100, 5000)
        .unwrap_or_else(|e| panic!("dmabuf export of an inner range failed: {e}"));
    eprintln!(
        "inner range: offset {} dmabuf size {}",
        inner.offset,
        dmabuf_size(&inner.fd)
    );
    assert_eq!(inner.offset, 100);
    let size = dmabuf_size(&inner.fd);
    assert!(
        size >= 100 + 5000 && size % 4096 == 0,
        "dmabuf of {size} bytes"
    );
    // Host memory is not exported.
    let plain = vec![0u8; 8192];
    assert!(rt.export_dmabuf(plain.as_ptr() as usize, 4096).is_err());
}

#[test]
fn gpu_device_indexes_the_runtime_devices() {
    let gpu = TestGpu::from_env();
    let rt = gpu.runtime();
    let count = rt.device_count().expect("device count");
    assert!(count >= 1);
    let bus = rt.pci_bus_id(DEVICE).expect("PCI bus id");
    eprintln!("{} device(s); device {DEVICE} at {bus}", count);
    assert_eq!(
        hip::select_gpu(Some(rt.as_ref()), DEVICE),
        Ok(GpuSelection::Gpu {
            device: DEVICE,
            pci_bus_id: Some(bus.clone())
        })
    );
    assert_eq!(
        hip::select_gpu(Some(rt.as_ref()), count),
        Err(GpuSelectError::NoSuchDevice {
            requested: count,
            count
        })
    );
    rt.set_device(DEVICE).expect("set device");
    assert_eq!(rt.current_device(), Ok(DEVICE));
    assert!(matches!(
        hip::select_gpu(Some(rt.as_ref()), -1),
        Ok(GpuSelection::Gpu { device: DEVICE, .. })
    ));
    assert!(rt.set_device(count).is_err());
}

#[test]
fn init_picks_the_runtime_that_has_a_device() {
    let gpu = TestGpu::from_env();
    // A runtime without devices first (as HIP on an NVIDIA host), the GPU under test second.
    let no_device = || Ok(SimGpu::new(0) as Arc<dyn GpuRuntime>);
    let under_test = || Ok(gpu.runtime());
    let absent = || -> Result<Arc<dyn GpuRuntime>, HipLoadError> {
        Err(HipLoadError::LibraryNotFound {
            tried: vec!["libamdhip64.so.7".into()],
            reason: "not installed".into(),
        })
    };
    let expected = gpu.runtime().platform();
    for loaders in [
        [&no_device as _, &under_test as _],
        [&absent as _, &under_test as _],
    ] {
        let chosen = choose_runtime(&loaders).expect("a runtime");
        assert_eq!(chosen.platform(), expected);
    }
    if gpu.is_real() {
        // What hipObjInit itself loads on this host.
        let chosen = hip::load_gpu_runtime().expect("a GPU runtime");
        eprintln!(
            "hipObjInit's runtime here: {} ({:?} device(s)); HIP alone: {:?}",
            chosen.platform(),
            chosen.device_count(),
            hip::load().map(|h| h.device_count())
        );
        assert_eq!(chosen.platform(), GpuPlatform::Cuda);
    }
}

#[test]
fn visibility_after_a_direct_rdma_write() {
    let gpu = TestGpu::from_env();
    let rt = gpu.runtime();
    rt.make_visible_after_rdma_write(DEVICE)
        .expect("visibility call");
    if let Some(cuda) = gpu.cuda() {
        eprintln!(
            "made visible with {:?}; GPUDirect RDMA supported = {:?}, writes ordering = {:?}",
            cuda.visibility_method(),
            cuda.gpu_direct_rdma_supported(DEVICE),
            cuda.gpu_direct_rdma_writes_ordering(DEVICE)
        );
        assert_ne!(cuda.visibility_method(), hip::VisibilityMethod::None);
    }
    let count = rt.device_count().expect("device count");
    assert!(rt.make_visible_after_rdma_write(count).is_err());
}

#[test]
#[ignore = "needs a GPU with dmabuf export: run by tests/gpu/run-on-device"]
fn dmabuf_export_of_a_whole_allocation_whose_size_is_not_page_aligned() {
    let gpu = TestGpu::from_env();
    require_dmabuf(&gpu);
    let rt = gpu.runtime();
    // What hipObjBufRegister exports for a whole odd-sized allocation: its pages, the last one
    // only partly inside the allocation's requested size.
    let len = (1 << 20) + 1000;
    let device = gpu.alloc(len);
    let exported = rt
        .export_dmabuf(device.addr(), len)
        .unwrap_or_else(|e| panic!("export of {len} bytes failed: {e}"));
    let size = dmabuf_size(&exported.fd);
    eprintln!(
        "{len}-byte allocation: offset {} dmabuf size {size}",
        exported.offset
    );
    assert_eq!(exported.offset, 0);
    assert!(
        size >= len as i64 && size % 4096 == 0,
        "dmabuf of {size} bytes"
    );
}
