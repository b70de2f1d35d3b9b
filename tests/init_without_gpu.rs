//! `runtime::init_without_gpu` (the command line's start when no GPU is asked for and one NIC is
//! named): it never loads a GPU runtime, and it refuses a GPU device. Its own test binary, so no
//! other test of the process has loaded HIP or CUDA first. On a host without RDMA (`make unit`)
//! it stops at NIC selection; in the lane (`e2e.d/20-rust-e2e`) it starts on the first device.

use hipobj::env::EnvConfig;
use hipobj::error::OpError;
use hipobj::runtime::{self, InitConfig};

fn config(gpu_device: i32, nic: &str) -> InitConfig {
    InitConfig {
        gpu_device,
        nic_hint: Some(nic.into()),
        env: EnvConfig::default(),
    }
}

fn gpu_runtime_loaded() -> Vec<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    let mut libs: Vec<String> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| {
            ["libamdhip64", "libhsa-runtime", "libcuda"]
                .iter()
                .any(|n| p.contains(n))
        })
        .map(str::to_owned)
        .collect();
    libs.dedup();
    libs
}

/// The first RDMA device of this host, if it has one (the lane's rxe0).
fn rdma_device() -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names.into_iter().next()
}

#[test]
fn no_gpu_runtime_is_loaded_and_a_gpu_is_refused() {
    // libibverbs is loaded first: `make test` installs it (scripts/install-deps).
    let device = rdma_device();
    let nic = device.clone().unwrap_or_else(|| "rxe0".into());
    let e = runtime::init_without_gpu(config(0, &nic)).expect_err("a GPU without a GPU runtime");
    assert_eq!(e.code, OpError::InvalidValue, "{e}");
    match runtime::init_without_gpu(config(-1, &nic)) {
        // In the lane: started on the device, with no GPU.
        Ok(()) => {
            assert!(device.is_some(), "started without an RDMA device");
            assert!(runtime::current().is_some());
            runtime::shutdown().expect("shutdown");
        }
        // On a host without RDMA: -1 + a hint went on to NIC selection, and found none.
        Err(e) => {
            assert_eq!(device, None, "{nic} is here, but: {e}");
            assert_eq!(e.code, OpError::NicNotFound, "{e}");
            assert!(runtime::current().is_none());
        }
    }
    assert_eq!(gpu_runtime_loaded(), Vec::<String>::new());
}
