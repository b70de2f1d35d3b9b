//! The GPU under test: the real CUDA one or the simulated one, with what the tests need beyond the
//! `GpuRuntime` trait's own calls.

use hipobj::hip::{CudaRuntime, DeviceBuffer, GpuRuntime, SimGpu};
use std::sync::Arc;
use std::time::Duration;

/// Which GPU the tests run against.
enum Backend {
    Sim(Arc<SimGpu>),
    Cuda(Arc<CudaRuntime>),
}

/// The GPU under test (device 0 of its runtime).
pub struct TestGpu {
    backend: Backend,
}

/// The device the tests use.
pub const DEVICE: i32 = 0;

impl TestGpu {
    /// The backend `HIPOBJ_TEST_GPU` names (see the crate documentation). Panics, failing the
    /// test, when `cuda` is asked for and no CUDA GPU can be used.
    pub fn from_env() -> TestGpu {
        let wanted = std::env::var("HIPOBJ_TEST_GPU").unwrap_or_default();
        let backend = match wanted.as_str() {
            "" | "sim" => Backend::Sim(SimGpu::new(1)),
            "cuda" => {
                let cuda = hipobj::hip::load_cuda()
                    .unwrap_or_else(|e| panic!("HIPOBJ_TEST_GPU=cuda but {e}"));
                let count = cuda
                    .device_count()
                    .unwrap_or_else(|e| panic!("HIPOBJ_TEST_GPU=cuda but no CUDA GPU: {e}"));
                assert!(count > 0);
                Backend::Cuda(cuda)
            }
            other => panic!("HIPOBJ_TEST_GPU={other:?}: expected sim or cuda"),
        };
        let gpu = TestGpu { backend };
        eprintln!("GPU under test: {}", gpu.describe());
        gpu
    }

    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Sim(_) => "simulated device (test double, not a GPU)".into(),
            Backend::Cuda(cuda) => format!(
                "CUDA {} (driver {:?}), device {DEVICE} at {}",
                cuda.library_name(),
                cuda.driver_version(),
                cuda.pci_bus_id(DEVICE).unwrap_or_else(|e| e.to_string())
            ),
        }
    }

    pub fn is_real(&self) -> bool {
        matches!(self.backend, Backend::Cuda(_))
    }

    pub fn runtime(&self) -> Arc<dyn GpuRuntime> {
        match &self.backend {
            Backend::Sim(sim) => sim.clone(),
            Backend::Cuda(cuda) => cuda.clone(),
        }
    }

    pub fn cuda(&self) -> Option<&Arc<CudaRuntime>> {
        match &self.backend {
            Backend::Cuda(cuda) => Some(cuda),
            Backend::Sim(_) => None,
        }
    }

    /// `len` bytes of device memory on [`DEVICE`] ([`GpuRuntime::alloc_device`]).
    pub fn alloc(&self, len: usize) -> DeviceBuffer {
        DeviceBuffer::new(self.runtime(), DEVICE, len).expect("device allocation")
    }

    /// Write `bytes` into the start of `device` (blocking, [`GpuRuntime::copy_blocking`]).
    pub fn write(&self, device: &DeviceBuffer, bytes: &[u8]) {
        device.write(0, bytes).expect("copy to the device");
    }

    /// Read the first `len` bytes of `device` (blocking).
    pub fn read(&self, device: &DeviceBuffer, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        device.read(0, &mut out).expect("copy from the device");
        out
    }

    /// A copy size that takes the GPU far longer than [`TINY_TIMEOUT`]: 4 GiB over PCIe on the real
    /// GPU; on the sim, whose copies are a memcpy, a smaller one that [`TestGpu::make_copies_slow`]
    /// delays.
    pub fn large_copy_len(&self) -> usize {
        match &self.backend {
            Backend::Sim(_) => 16 << 20,
            Backend::Cuda(_) => 4 << 30,
        }
    }

    /// On the sim, delay copies by half a second (a real GPU needs no help: the copy is large).
    pub fn make_copies_slow(&self) {
        if let Backend::Sim(sim) = &self.backend {
            sim.set_copy_delay(Duration::from_millis(500));
        }
    }

    /// Undo [`TestGpu::make_copies_slow`].
    pub fn make_copies_fast(&self) {
        if let Backend::Sim(sim) = &self.backend {
            sim.set_copy_delay(Duration::ZERO);
        }
    }

    /// Whether dmabuf export should work: never on the sim; on CUDA what the driver says
    /// (`CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED`).
    pub fn dmabuf_expected(&self) -> bool {
        match &self.backend {
            Backend::Sim(_) => false,
            Backend::Cuda(cuda) => {
                let supported = cuda.dmabuf_supported(DEVICE).expect("device attribute");
                eprintln!(
                    "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = {supported}, entry point present = {}",
                    cuda.has_dmabuf_export()
                );
                supported && cuda.has_dmabuf_export()
            }
        }
    }
}

/// A staging timeout far below any copy of [`TestGpu::large_copy_len`] bytes.
pub const TINY_TIMEOUT: Duration = Duration::from_millis(1);

/// Bytes that differ from one seed to the next and along the buffer (fast for GiB sizes).
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for chunk in out.chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
    out
}
