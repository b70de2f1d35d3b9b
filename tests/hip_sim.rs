//! The simulated GPU (feature `sim-gpu`): devices, pointer classification, allocation ranges,
//! dmabuf failure, staging copies that complete, are delayed, stall until released, or fail, and
//! device buffers (`DeviceBuffer`: allocation, blocking copies, free on drop).
#![cfg(feature = "sim-gpu")]

use hipobj::hip::{
    CopyDirection, CopyInFlight, CopyStatus, DeviceBuffer, GpuRuntime, PointerKind, SimGpu,
    HIP_ERROR_INVALID_DEVICE, HIP_ERROR_INVALID_VALUE, HIP_ERROR_NOT_SUPPORTED,
    HIP_ERROR_NO_DEVICE,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Poll until the copy finishes or `limit` passes (a generous bound, not a timing assertion).
fn wait(copy: &mut CopyInFlight, limit: Duration) -> CopyStatus {
    let deadline = Instant::now() + limit;
    loop {
        let status = copy.poll();
        if status != CopyStatus::Pending || Instant::now() >= deadline {
            return status;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

const LONG: Duration = Duration::from_secs(20);

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

#[test]
fn devices_bus_ids_and_current_device() {
    let sim = SimGpu::with_bus_ids(vec!["0000:42:00.0".into(), "0000:c1:00.0".into()]);
    let gpu: Arc<dyn GpuRuntime> = sim.clone();
    assert_eq!(gpu.device_count(), Ok(2));
    assert_eq!(gpu.current_device(), Ok(0));
    assert_eq!(gpu.pci_bus_id(1).as_deref(), Ok("0000:c1:00.0"));
    assert_eq!(gpu.set_device(1), Ok(()));
    assert_eq!(gpu.current_device(), Ok(1));
    assert_eq!(
        gpu.set_device(2).map_err(|e| e.code),
        Err(HIP_ERROR_INVALID_DEVICE)
    );
    assert_eq!(
        gpu.set_device(-1).map_err(|e| e.code),
        Err(HIP_ERROR_INVALID_DEVICE)
    );
    assert_eq!(
        gpu.pci_bus_id(2).map_err(|e| e.code),
        Err(HIP_ERROR_INVALID_DEVICE)
    );
    assert_eq!(gpu.current_device(), Ok(1));
    assert_eq!(SimGpu::new(3).pci_bus_id(2).as_deref(), Ok("0000:12:00.0"));
    let calls = sim.calls();
    assert_eq!(
        (calls.device_count, calls.set_device, calls.pci_bus_id),
        (1, 3, 2)
    );
}

#[test]
fn no_devices_answers_like_rocm_without_a_gpu() {
    let sim = SimGpu::new(0);
    assert_eq!(
        sim.device_count().map_err(|e| e.code),
        Err(HIP_ERROR_NO_DEVICE)
    );
    assert_eq!(
        sim.current_device().map_err(|e| e.code),
        Err(HIP_ERROR_INVALID_DEVICE)
    );
    assert_eq!(
        sim.set_device(0).map_err(|e| e.code),
        Err(HIP_ERROR_INVALID_DEVICE)
    );
    assert!(sim.alloc_device(0, 64).is_err());
}

#[test]
fn classification_and_address_ranges() {
    let sim = SimGpu::new(2);
    let dev = sim.alloc_device(1, 1 << 20).expect("sim alloc");
    let staging = sim.alloc_host(4096).expect("sim host alloc");
    let plain = [0u8; 64];

    assert_eq!(sim.classify_pointer(dev), PointerKind::Device { device: 1 });
    assert_eq!(
        sim.classify_pointer(dev + 12345),
        PointerKind::Device { device: 1 }
    );
    assert_eq!(sim.classify_pointer(dev + (1 << 20)), PointerKind::Unknown);
    assert_eq!(sim.classify_pointer(staging.addr()), PointerKind::Host);
    assert_eq!(
        sim.classify_pointer(plain.as_ptr() as usize),
        PointerKind::Unknown
    );

    let range = sim.address_range(dev + 4096).expect("inside an allocation");
    assert_eq!((range.base, range.len), (dev, 1 << 20));
    assert!(range.contains(dev + 4096, (1 << 20) - 4096));
    assert!(!range.contains(dev + 4096, (1 << 20) - 4095));
    assert_eq!(
        sim.address_range(plain.as_ptr() as usize)
            .map_err(|e| e.code),
        Err(HIP_ERROR_INVALID_VALUE)
    );

    assert_eq!(
        sim.free_device(dev + 1).map_err(|e| e.code),
        Err(HIP_ERROR_INVALID_VALUE)
    );
    assert_eq!(
        sim.free_device(staging.addr()).map_err(|e| e.code),
        Err(HIP_ERROR_INVALID_VALUE)
    );
    assert_eq!(sim.free_device(dev), Ok(()));
    assert_eq!(sim.classify_pointer(dev), PointerKind::Unknown);
    assert!(sim.address_range(dev).is_err());
    assert_eq!(sim.calls().classify_pointer, 6);
}

#[test]
fn dmabuf_export_always_fails() {
    let sim = SimGpu::new(1);
    let dev = sim.alloc_device(0, 8192).expect("sim alloc");
    let err = sim
        .export_dmabuf(dev, 8192)
        .expect_err("the sim has no GPU-direct path");
    assert_eq!(err.code, HIP_ERROR_NOT_SUPPORTED);
    assert!(sim.export_dmabuf(dev, 4096).is_err());
    assert_eq!(sim.calls().export_dmabuf, 2);
}

#[test]
fn copies_complete_both_ways() {
    let sim = SimGpu::new(1);
    let gpu: Arc<dyn GpuRuntime> = sim.clone();
    let dev = sim.alloc_device(0, 64 << 10).expect("sim alloc");
    let staging = gpu.alloc_host(64 << 10).expect("sim host alloc");
    let data = pattern(64 << 10);
    sim.write(staging.addr(), &data).expect("write staging");

    // SAFETY: both ranges are live sim allocations that outlive the copy (we wait for it).
    let mut up = unsafe {
        gpu.start_copy(
            0,
            dev,
            staging.addr(),
            data.len(),
            CopyDirection::HostToDevice,
        )
    }
    .expect("start");
    assert_eq!(wait(&mut up, LONG), CopyStatus::Done);
    assert_eq!(sim.read(dev, data.len()).expect("read device"), data);

    // Offsets inside both buffers, as hipObjBufSync uses them.
    sim.write(staging.addr(), &vec![0u8; data.len()])
        .expect("clear staging");
    // SAFETY: as above; [1000, 1000 + 5000) lies inside both allocations.
    let mut down = unsafe {
        gpu.start_copy(
            0,
            staging.addr() + 1000,
            dev + 1000,
            5000,
            CopyDirection::DeviceToHost,
        )
    }
    .expect("start");
    assert_eq!(wait(&mut down, LONG), CopyStatus::Done);
    let back = sim.read(staging.addr(), data.len()).expect("read staging");
    assert_eq!(&back[1000..6000], &data[1000..6000]);
    assert!(back[..1000].iter().chain(&back[6000..]).all(|&b| b == 0));

    let calls = sim.calls();
    assert_eq!(
        (calls.start_copy, calls.copies_finished, calls.alloc_host),
        (2, 2, 1)
    );
}

#[test]
fn delayed_copies_finish_after_the_delay() {
    let sim = SimGpu::new(1);
    let dev = sim.alloc_device(0, 4096).expect("sim alloc");
    let staging = sim.alloc_host(4096).expect("sim host alloc");
    sim.write(staging.addr(), &pattern(4096)).expect("write");
    let delay = Duration::from_millis(300);
    sim.set_copy_delay(delay);
    let started = Instant::now();
    // SAFETY: live sim allocations that outlive the copy.
    let mut copy =
        unsafe { sim.start_copy(0, dev, staging.addr(), 4096, CopyDirection::HostToDevice) }
            .expect("start");
    assert_eq!(wait(&mut copy, LONG), CopyStatus::Done);
    assert!(started.elapsed() >= delay, "finished before its delay");
    assert_eq!(sim.read(dev, 4096).expect("read"), pattern(4096));
}

#[test]
fn stalled_copies_stay_pending_until_released() {
    let sim = SimGpu::new(1);
    let dev = sim.alloc_device(0, 4096).expect("sim alloc");
    let staging = sim.alloc_host(4096).expect("sim host alloc");
    sim.write(dev, &pattern(4096)).expect("write");
    sim.stall_copies();
    // SAFETY: live sim allocations that outlive the copy.
    let mut copy =
        unsafe { sim.start_copy(0, staging.addr(), dev, 4096, CopyDirection::DeviceToHost) }
            .expect("start");
    for _ in 0..50 {
        assert_eq!(copy.poll(), CopyStatus::Pending);
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(
        sim.read(staging.addr(), 4096).expect("read"),
        vec![0u8; 4096],
        "a stalled copy wrote"
    );
    assert_eq!(sim.calls().copies_finished, 0);
    sim.release_copies();
    assert_eq!(wait(&mut copy, LONG), CopyStatus::Done);
    assert_eq!(sim.read(staging.addr(), 4096).expect("read"), pattern(4096));
    assert_eq!(copy.poll(), CopyStatus::Done, "the outcome is sticky");
}

#[test]
fn injected_failure_fails_one_copy() {
    let sim = SimGpu::new(1);
    let dev = sim.alloc_device(0, 256).expect("sim alloc");
    let staging = sim.alloc_host(256).expect("sim host alloc");
    sim.fail_next_copy(700);
    // SAFETY: live sim allocations that outlive both copies.
    let mut first =
        unsafe { sim.start_copy(0, dev, staging.addr(), 256, CopyDirection::HostToDevice) }
            .expect("start");
    assert_eq!(wait(&mut first, LONG), CopyStatus::Failed(700));
    // SAFETY: as above.
    let mut second =
        unsafe { sim.start_copy(0, dev, staging.addr(), 256, CopyDirection::HostToDevice) }
            .expect("start");
    assert_eq!(wait(&mut second, LONG), CopyStatus::Done);
}

#[test]
fn a_copy_whose_memory_was_freed_fails_instead_of_writing() {
    let sim = SimGpu::new(1);
    let dev = sim.alloc_device(0, 4096).expect("sim alloc");
    let staging = sim.alloc_host(4096).expect("sim host alloc");
    sim.stall_copies();
    // SAFETY: live when queued; the sim re-checks before running it.
    let mut copy =
        unsafe { sim.start_copy(0, dev, staging.addr(), 4096, CopyDirection::HostToDevice) }
            .expect("start");
    assert_eq!(sim.free_device(dev), Ok(()));
    sim.release_copies();
    assert_eq!(
        wait(&mut copy, LONG),
        CopyStatus::Failed(HIP_ERROR_INVALID_VALUE)
    );
}

#[test]
fn invalid_copies_are_refused_up_front() {
    let sim = SimGpu::new(2);
    let dev0 = sim.alloc_device(0, 4096).expect("sim alloc");
    let staging = sim.alloc_host(4096).expect("sim host alloc");
    let plain = [0u8; 4096];
    let refused = |device, dst, src, len, direction| {
        // SAFETY: each of these is refused before anything is queued.
        let result = unsafe { sim.start_copy(device, dst, src, len, direction) };
        result.map(|_| ()).map_err(|e| e.code)
    };
    let h2d = CopyDirection::HostToDevice;
    assert_eq!(
        refused(0, dev0, staging.addr(), 4097, h2d),
        Err(HIP_ERROR_INVALID_VALUE)
    );
    assert_eq!(
        refused(0, dev0 + 1, staging.addr(), 4096, h2d),
        Err(HIP_ERROR_INVALID_VALUE)
    );
    assert_eq!(
        refused(0, dev0, plain.as_ptr() as usize, 16, h2d),
        Err(HIP_ERROR_INVALID_VALUE)
    );
    assert_eq!(
        refused(1, dev0, staging.addr(), 16, h2d),
        Err(HIP_ERROR_INVALID_VALUE)
    );
    assert_eq!(
        refused(0, staging.addr(), dev0, 16, h2d),
        Err(HIP_ERROR_INVALID_VALUE)
    );
    assert_eq!(
        refused(0, dev0, staging.addr(), 0, h2d),
        Err(HIP_ERROR_INVALID_VALUE)
    );
    assert_eq!(
        refused(5, dev0, staging.addr(), 16, h2d),
        Err(HIP_ERROR_INVALID_DEVICE)
    );
    assert_eq!(sim.calls().copies_finished, 0);
}

#[test]
fn host_buffers_free_on_drop_and_leak_on_request() {
    let sim = SimGpu::new(1);
    let before = sim.live_allocations();
    let buffer = sim.alloc_host(1024).expect("sim host alloc");
    assert_eq!(buffer.len(), 1024);
    assert_eq!(sim.live_allocations(), before + 1);
    drop(buffer);
    assert_eq!(sim.live_allocations(), before);
    assert_eq!(sim.calls().free_host, 1);
    let leaked = sim.alloc_host(1024).expect("sim host alloc").leak();
    assert_eq!(sim.live_allocations(), before + 1);
    assert_eq!(sim.classify_pointer(leaked), PointerKind::Host);
    assert_eq!(sim.calls().free_host, 1);
    assert!(sim.alloc_host(0).is_err());
}

#[test]
fn visibility_sync_is_counted_and_checks_the_device() {
    let sim = SimGpu::new(1);
    assert_eq!(sim.make_visible_after_rdma_write(0), Ok(()));
    assert_eq!(
        sim.make_visible_after_rdma_write(1).map_err(|e| e.code),
        Err(HIP_ERROR_INVALID_DEVICE)
    );
    assert_eq!(sim.calls().make_visible, 2);
}

#[test]
fn dropping_the_sim_with_a_stalled_copy_does_not_hang() {
    let sim = SimGpu::new(1);
    let dev = sim.alloc_device(0, 64).expect("sim alloc");
    let staging = sim.alloc_host(64).expect("sim host alloc");
    sim.set_copy_delay(Duration::from_secs(3600));
    sim.stall_copies();
    // SAFETY: the sim keeps its own memory alive until its copy thread has drained.
    let mut copy =
        unsafe { sim.start_copy(0, dev, staging.addr(), 64, CopyDirection::HostToDevice) }
            .expect("start");
    drop(staging);
    drop(sim);
    // The queue drained when the sim went away; the staging buffer was freed first, so the copy
    // failed rather than wrote.
    assert_eq!(copy.poll(), CopyStatus::Failed(HIP_ERROR_INVALID_VALUE));
}

#[test]
fn device_buffer_copies_both_ways_and_frees_on_drop() {
    let sim = SimGpu::new(2);
    let gpu: Arc<dyn GpuRuntime> = sim.clone();
    let data = pattern(10_000);
    {
        let buf = DeviceBuffer::new(gpu.clone(), 1, 12_000).expect("alloc");
        assert_eq!((buf.len(), buf.device()), (12_000, 1));
        assert_eq!(
            sim.classify_pointer(buf.addr()),
            PointerKind::Device { device: 1 }
        );
        buf.write(2_000, &data).expect("host to device");
        // Where it landed, read behind the runtime's back.
        assert_eq!(
            sim.read(buf.addr() + 2_000, data.len()).expect("sim read"),
            data
        );
        assert_eq!(
            sim.read(buf.addr(), 2_000).expect("sim read"),
            vec![0u8; 2_000]
        );
        let mut back = vec![0u8; data.len()];
        buf.read(2_000, &mut back).expect("device to host");
        assert_eq!(back, data);
        // Past the end: refused before the runtime is asked, nothing copied.
        let before = sim.calls().copy_blocking;
        assert_eq!(
            buf.write(2_001, &data).map_err(|e| e.code),
            Err(HIP_ERROR_INVALID_VALUE)
        );
        assert_eq!(
            buf.read(usize::MAX, &mut back[..1]).map_err(|e| e.code),
            Err(HIP_ERROR_INVALID_VALUE)
        );
        assert_eq!(sim.calls().copy_blocking, before);
        assert_eq!(sim.live_allocations(), 1);
    }
    assert_eq!(sim.live_allocations(), 0, "dropped buffer freed");
    let calls = sim.calls();
    assert_eq!(
        (calls.alloc_device, calls.free_device, calls.copy_blocking),
        (1, 1, 2)
    );
}

#[test]
fn device_allocation_and_copy_failures_carry_the_runtime_error() {
    let sim = SimGpu::new(1);
    let gpu: Arc<dyn GpuRuntime> = sim.clone();
    let code =
        |r: Result<DeviceBuffer, _>| r.map(|_| ()).map_err(|e: hipobj::hip::HipError| e.code);
    assert_eq!(
        code(DeviceBuffer::new(gpu.clone(), 1, 64)),
        Err(HIP_ERROR_INVALID_DEVICE)
    );
    assert_eq!(
        code(DeviceBuffer::new(gpu.clone(), 0, 0)),
        Err(HIP_ERROR_INVALID_VALUE)
    );
    assert_eq!(
        code(DeviceBuffer::new(gpu.clone(), 0, usize::MAX / 2)),
        Err(hipobj::hip::HIP_ERROR_OUT_OF_MEMORY)
    );
    let buf = DeviceBuffer::new(gpu.clone(), 0, 64).expect("alloc");
    sim.fail_next_copy(700);
    assert_eq!(buf.write(0, &[1; 8]).map_err(|e| e.code), Err(700));
    assert_eq!(sim.read(buf.addr(), 8).expect("sim read"), vec![0u8; 8]);
    // A host buffer is not device memory: the sim refuses to free it as such.
    let host = sim.alloc_host(64).expect("host alloc");
    // SAFETY: the sim only looks the address up and refuses it; nothing is freed.
    let refused = unsafe { gpu.free_device(0, host.addr()) };
    assert_eq!(refused.map_err(|e| e.code), Err(HIP_ERROR_INVALID_VALUE));
}
