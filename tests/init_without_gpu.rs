//! `runtime::init_without_gpu` (the command line's start when no GPU is asked for and one NIC is
//! named): it never loads a GPU runtime, and it refuses a GPU device. Its own test binary, so no
//! other test of the process has loaded HIP or CUDA first. Run on a host with no RDMA device.

use hipobj::env::EnvConfig;
use hipobj::error::OpError;
use hipobj::runtime::{self, InitConfig};

fn config(gpu_device: i32) -> InitConfig {
    InitConfig {
        gpu_device,
        nic_hint: Some("rxe0".into()),
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

#[test]
fn no_gpu_runtime_is_loaded_and_a_gpu_is_refused() {
    if std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some()) {
        eprintln!("skipped: this host has an RDMA device");
        return;
    }
    if !std::path::Path::new("/usr/lib/x86_64-linux-gnu/libibverbs.so.1").exists() {
        eprintln!("skipped: libibverbs not installed (init stops at it first)");
        return;
    }
    let e = runtime::init_without_gpu(config(0)).expect_err("a GPU without a GPU runtime");
    assert_eq!(e.code, OpError::InvalidValue, "{e}");
    // -1 + a hint goes on to NIC selection, and there is no RDMA device on this host.
    let e = runtime::init_without_gpu(config(-1)).expect_err("no RDMA device here");
    assert_eq!(e.code, OpError::NicNotFound, "{e}");
    assert!(runtime::current().is_none());
    assert_eq!(gpu_runtime_loaded(), Vec::<String>::new());
}
