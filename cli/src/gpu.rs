//! GPU memory for `--gpu N`, from the GPU runtime the library itself uses
//! (`hipobj::hip::load_gpu_runtime`: HIP when it has a device, else CUDA): allocations and blocking
//! copies through the `GpuRuntime` trait (`hipobj::hip::DeviceBuffer`). The library registers the
//! memory (dmabuf, or host staging when the NIC cannot reach the GPU).

use crate::failure::Failure;
use hipobj::hip::{self, DeviceBuffer, GpuRuntime, HipError, HIP_ERROR_OUT_OF_MEMORY};
use std::sync::Arc;

/// One GPU of the runtime the library uses: device `device` of `runtime`.
pub struct Gpu {
    runtime: Arc<dyn GpuRuntime>,
    device: i32,
}

impl Gpu {
    /// `--gpu device` on this host: the library's GPU runtime, and the device if it has it.
    pub fn open(device: i32) -> Result<Gpu, Failure> {
        let runtime =
            hip::load_gpu_runtime().map_err(|e| Failure::Gpu(format!("--gpu {device}: {e}")))?;
        Gpu::on(runtime, device)
    }

    /// Device `device` of `runtime`, or why it can't be used (no device at all, or no such one).
    pub fn on(runtime: Arc<dyn GpuRuntime>, device: i32) -> Result<Gpu, Failure> {
        let platform = runtime.platform();
        let count = runtime.device_count().map_err(|e| {
            Failure::Gpu(format!(
                "--gpu {device}: the {platform} runtime loaded but finds no GPU ({e})"
            ))
        })?;
        if !(0..count).contains(&device) {
            return Err(Failure::Gpu(format!(
                "--gpu {device}: this host has {count} {platform} device(s), numbered from 0"
            )));
        }
        Ok(Gpu { runtime, device })
    }

    /// What this GPU is, e.g. `CUDA device 0`.
    pub fn describe(&self) -> String {
        format!("{} device {}", self.runtime.platform(), self.device)
    }

    /// `len` bytes of memory on this GPU, freed when dropped.
    pub fn alloc(&self, len: usize) -> Result<DeviceBuffer, Failure> {
        DeviceBuffer::new(self.runtime.clone(), self.device, len).map_err(|e| {
            let what = if e.code == HIP_ERROR_OUT_OF_MEMORY {
                "out of memory"
            } else {
                "allocation failed"
            };
            Failure::Gpu(format!(
                "{}: {what} for {len} bytes ({})",
                self.describe(),
                self.error_text(e)
            ))
        })
    }

    /// Copy `data` into the start of `buffer`.
    pub fn upload(&self, buffer: &DeviceBuffer, data: &[u8]) -> Result<(), Failure> {
        buffer.write(0, data).map_err(|e| {
            Failure::Gpu(format!(
                "{}: copying {} bytes to the GPU failed ({})",
                self.describe(),
                data.len(),
                self.error_text(e)
            ))
        })
    }

    /// The first `len` bytes of `buffer`, on the host.
    pub fn download(&self, buffer: &DeviceBuffer, len: usize) -> Result<Vec<u8>, Failure> {
        let mut out = vec![0u8; len];
        buffer.read(0, &mut out).map_err(|e| {
            Failure::Gpu(format!(
                "{}: copying {len} bytes from the GPU failed ({})",
                self.describe(),
                self.error_text(e)
            ))
        })?;
        Ok(out)
    }

    /// The call and its error code, with the runtime's name for the code where it has one.
    fn error_text(&self, e: HipError) -> String {
        let name = match self.runtime.platform() {
            hip::GpuPlatform::Cuda => hip::load_cuda().ok().map(|c| c.error_name(e.code)),
            _ => None,
        };
        match name {
            Some(name) => format!("{e}: {name}"),
            None => e.to_string(),
        }
    }
}

hipobj::with_sim_gpu! {
    /// The CLI's GPU path against the simulated GPU (`--features hipobj/sim-gpu`).
    #[cfg(test)]
    mod sim_tests {
        use super::*;
        use hipobj::hip::SimGpu;

        fn pattern(len: usize) -> Vec<u8> {
            (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
        }

        #[test]
        fn upload_then_download_gives_the_bytes_back_and_drop_frees() {
            let sim = SimGpu::new(2);
            let gpu = Gpu::on(sim.clone(), 1).expect("device 1 of 2");
            assert_eq!(gpu.describe(), "simulated device 1");
            let data = pattern(100_003);
            {
                let buffer = gpu.alloc(data.len() + 17).expect("alloc");
                assert_eq!(buffer.device(), 1);
                assert_eq!(sim.live_allocations(), 1);
                gpu.upload(&buffer, &data).expect("upload");
                // The bytes are on the device, not in some host copy of the CLI's.
                assert_eq!(sim.read(buffer.addr(), data.len()).expect("sim read"), data);
                assert_eq!(gpu.download(&buffer, data.len()).expect("download"), data);
                // A shorter read is the start.
                assert_eq!(gpu.download(&buffer, 10).expect("download"), data[..10]);
            }
            assert_eq!(sim.live_allocations(), 0, "the buffer was freed on drop");
            let calls = sim.calls();
            assert_eq!((calls.alloc_device, calls.free_device), (1, 1));
            assert_eq!(calls.copy_blocking, 3);
        }

        #[test]
        fn past_the_end_is_refused_and_copies_nothing() {
            let sim = SimGpu::new(1);
            let gpu = Gpu::on(sim.clone(), 0).expect("device 0");
            let buffer = gpu.alloc(64).expect("alloc");
            let err = gpu.upload(&buffer, &[1u8; 65]).expect_err("65 bytes into 64");
            assert_eq!(err.code(), 8);
            assert!(err.to_string().contains("copying 65 bytes to the GPU failed"), "{err}");
            assert!(gpu.download(&buffer, 65).is_err());
            assert_eq!(sim.read(buffer.addr(), 64).expect("sim read"), vec![0u8; 64]);
            assert_eq!(sim.calls().copy_blocking, 0, "nothing reached the runtime");
        }

        #[test]
        fn no_gpu_no_such_device_and_out_of_memory_say_so() {
            let Err(none) = Gpu::on(SimGpu::new(0), 0) else {
                panic!("a GPU on a sim without devices");
            };
            assert_eq!(none.code(), 8);
            assert!(
                none.to_string()
                    .contains("--gpu 0: the simulated runtime loaded but finds no GPU (hipGetDeviceCount returned 100)"),
                "{none}"
            );
            let Err(beyond) = Gpu::on(SimGpu::new(2), 2) else {
                panic!("device 2 of 2");
            };
            assert!(
                beyond.to_string()
                    .contains("--gpu 2: this host has 2 simulated device(s), numbered from 0"),
                "{beyond}"
            );
            assert!(Gpu::on(SimGpu::new(2), -1).is_err());
            let gpu = Gpu::on(SimGpu::new(1), 0).expect("device 0");
            let oom = gpu.alloc(usize::MAX / 2).expect_err("no such allocation");
            assert!(
                oom.to_string()
                    .contains("simulated device 0: out of memory for 9223372036854775807 bytes (hipMalloc returned 2)"),
                "{oom}"
            );
        }

        #[test]
        fn a_failed_copy_is_an_error_not_stale_bytes() {
            let sim = SimGpu::new(1);
            let gpu = Gpu::on(sim.clone(), 0).expect("device 0");
            let buffer = gpu.alloc(8).expect("alloc");
            sim.fail_next_copy(700);
            let err = gpu.upload(&buffer, &[9u8; 8]).expect_err("armed failure");
            assert!(err.to_string().contains("(hipMemcpy returned 700)"), "{err}");
        }
    }
}

/// The CLI's GPU path on this host's real GPU, through the runtime the library picks (CUDA on the
/// NVIDIA H200 machine, HIP on AMD). It needs a GPU, so it is ignored by default and run there:
/// `hipobj-cli` unit tests with `-- --ignored gpu::real_gpu` (see cli/README.md). Without a usable
/// GPU it FAILS: it never passes on a host it could not check.
#[cfg(test)]
mod real_gpu {
    use super::*;

    #[test]
    #[ignore = "needs a real GPU (HIP or CUDA): run with --ignored on a GPU host, see cli/README.md"]
    fn alloc_upload_download_free_on_the_system_gpu() {
        let gpu = Gpu::open(0).unwrap_or_else(|f| panic!("no usable GPU here: {f}"));
        let platform = hip::load_gpu_runtime().expect("loaded above").platform();
        assert_ne!(platform, hip::GpuPlatform::Simulated);
        eprintln!("GPU under test: {}", gpu.describe());
        // Sizes: one byte, an odd size, and 64 MiB (what `cp` moves in one part by default).
        for len in [1usize, 4099, 64 << 20] {
            let data: Vec<u8> = (0..len).map(|i| (i ^ (i >> 9) ^ len) as u8).collect();
            let buffer = gpu.alloc(len).expect("alloc");
            gpu.upload(&buffer, &data).expect("upload");
            let back = gpu.download(&buffer, len).expect("download");
            assert!(
                back == data,
                "{len} bytes did not come back from the GPU unchanged"
            );
            // A second upload overwrites: the download reads the device, not a cache of ours.
            let other: Vec<u8> = data.iter().map(|b| !b).collect();
            gpu.upload(&buffer, &other).expect("upload again");
            assert!(gpu.download(&buffer, len).expect("download again") == other);
            eprintln!("{len} bytes: up, down, overwritten, down again: equal");
        }
        // Frees really free: 200 rounds of 1 GiB would not fit in any GPU's memory otherwise.
        for _ in 0..200 {
            let buffer = gpu.alloc(1 << 30).expect("1 GiB after frees");
            gpu.upload(&buffer, &[1, 2, 3]).expect("touch");
        }
        eprintln!("200 x 1 GiB allocated and freed");
        let oom = gpu
            .alloc(1 << 50)
            .expect_err("1 PiB is more than any GPU has");
        eprintln!("1 PiB: {oom}");
        assert!(oom.to_string().contains("out of memory"), "{oom}");
    }
}
