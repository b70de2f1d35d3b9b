//! GPU buffers through the simulated device (a TEST DOUBLE: `hipobj::hip::SimGpu`, feature `sim-gpu`,
//! whose "device memory" is host memory and whose dmabuf export always fails), over real RDMA verbs
//! against `hipobj-server` in the Soft-RoCE lane. Nothing here is a real GPU result. The tests are
//! `#[ignore]`d outside the lane; the lane runs them with `--include-ignored`, and there each one
//! FAILS without an RDMA device.

#[path = "support/data.rs"]
mod data;
#[path = "support/s3.rs"]
mod s3;
#[path = "support/server.rs"]
mod server;

use data::pattern;
use hipobj::error::OpError;
use hipobj::hip::SimGpu;
use hipobj::registry::BufferKind;
use hipobj::reply::Reply;
use hipobj::runtime::{self, InitConfig, MemoryKind, SyncDirection, TransferKind};
use s3::{RdmaRequest, S3};
use server::{required_device_pair, Server};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

struct Env {
    _lock: MutexGuard<'static, ()>,
    _server: Server,
    s3: S3,
    sim: Arc<SimGpu>,
}

impl Env {
    fn new(stage_timeout_ms: u64, require_gpu_direct: bool) -> Env {
        let lock = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let (client_dev, server_dev) = required_device_pair();
        let server = Server::start(Some(&server_dev), &[]);
        let s3 = S3::new(server.addr);
        assert!(s3.create_bucket("gpu").unwrap().status < 300);
        let sim = SimGpu::new(1);
        let mut cfg = InitConfig {
            gpu_device: 0,
            nic_hint: Some(client_dev),
            ..Default::default()
        };
        cfg.env.max_transfers = 4;
        cfg.env.stage_timeout_ms = stage_timeout_ms;
        cfg.env.require_gpu_direct = require_gpu_direct;
        runtime::init_with_gpu(cfg, sim.clone()).expect("init with the simulated GPU");
        Env {
            _lock: lock,
            _server: server,
            s3,
            sim,
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        runtime::shutdown().expect("hipObjShutdown");
    }
}

fn rt() -> Arc<runtime::Runtime> {
    runtime::current().expect("initialised")
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn staged_device_buffers_round_trip() {
    let env = Env::new(30_000, false);
    let size = 3 << 20;
    let src = env.sim.alloc_device(0, size).unwrap();
    let dst = env.sim.alloc_device(0, size).unwrap();
    let data = pattern(size, 1);
    env.sim.write(src, &data).unwrap();
    rt().register(src, size, MemoryKind::Device).unwrap();
    rt().register(dst, size, MemoryKind::Device).unwrap();
    assert_eq!(
        rt().buffer_kind(src),
        Some(BufferKind::DeviceStaged),
        "dmabuf fails on the sim: staged"
    );
    let mut put = RdmaRequest::put(&env.s3, "gpu", "dev");
    rt().transfer(TransferKind::Put, src, size, 0, &mut put)
        .unwrap();
    assert_eq!(
        env.s3.get("gpu", "dev").unwrap().body,
        data,
        "PUT staged device -> host -> server"
    );
    let mut get = RdmaRequest::get(&env.s3, "gpu", "dev");
    rt().transfer(TransferKind::Get, dst, size, 0, &mut get)
        .unwrap();
    assert_eq!(
        env.sim.read(dst, size).unwrap(),
        data,
        "GET lands in device memory"
    );
    // Part of the buffer, at an offset.
    let mut get = RdmaRequest::get(&env.s3, "gpu", "dev").with_range(0, 4095);
    env.sim.write(dst, &vec![0u8; size]).unwrap();
    rt().transfer(TransferKind::Get, dst, 4096, 65536, &mut get)
        .unwrap();
    let back = env.sim.read(dst, size).unwrap();
    assert_eq!(&back[65536..65536 + 4096], &data[..4096]);
    assert!(back[..65536].iter().all(|&b| b == 0) && back[65536 + 4096..].iter().all(|&b| b == 0));
    assert!(env.sim.calls().start_copy >= 3);
    rt().deregister(src).unwrap();
    rt().deregister(dst).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn stalled_copy_times_out_then_busy_until_released() {
    let env = Env::new(300, false);
    let size = 1 << 20;
    let buf = env.sim.alloc_device(0, size).unwrap();
    env.sim.write(buf, &pattern(size, 2)).unwrap();
    rt().register(buf, size, MemoryKind::Device).unwrap();
    env.sim.stall_copies();
    let t0 = Instant::now();
    let mut put = RdmaRequest::put(&env.s3, "gpu", "stall");
    let e = rt()
        .transfer(TransferKind::Put, buf, size, 0, &mut put)
        .unwrap_err();
    assert_eq!(e.code, OpError::InternalError, "{e}");
    assert!(t0.elapsed() >= Duration::from_millis(300));
    assert_eq!(put.requests, 0, "no request after a failed staging copy");
    // Until the copy ends: every call on the buffer is Busy, deregister too.
    let mut put = RdmaRequest::put(&env.s3, "gpu", "stall");
    assert_eq!(
        rt().transfer(TransferKind::Put, buf, size, 0, &mut put)
            .unwrap_err()
            .code,
        OpError::Busy
    );
    assert_eq!(
        rt().sync(buf, size, 0, SyncDirection::ToHost)
            .unwrap_err()
            .code,
        OpError::Busy
    );
    assert_eq!(
        rt().mint_token(buf, size, TransferKind::Get)
            .unwrap_err()
            .code,
        OpError::Busy
    );
    assert_eq!(rt().deregister(buf).unwrap_err().code, OpError::Busy);
    // Shutdown does not free the staging buffer under the running copy.
    env.sim.release_copies();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match rt().deregister(buf) {
            Ok(()) => break,
            Err(e) if e.code == OpError::Busy && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("deregister after the copy ended: {e}"),
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn failed_copy_is_internal_error_and_buffer_stays_usable() {
    let env = Env::new(5_000, false);
    let size = 64 << 10;
    let buf = env.sim.alloc_device(0, size).unwrap();
    rt().register(buf, size, MemoryKind::Device).unwrap();
    env.sim.fail_next_copy(700);
    let e = rt().sync(buf, size, 0, SyncDirection::ToHost).unwrap_err();
    assert_eq!(e.code, OpError::InternalError);
    rt().sync(buf, size, 0, SyncDirection::ToHost).unwrap();
    rt().deregister(buf).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn require_gpu_direct_refuses_staging_and_range_is_checked() {
    let env = Env::new(30_000, true);
    let size = 1 << 20;
    let buf = env.sim.alloc_device(0, size).unwrap();
    let e = rt().register(buf, size, MemoryKind::Device).unwrap_err();
    assert_eq!(e.code, OpError::RdmaError);
    assert_eq!(rt().registrations(), 0);
    // Host memory is not affected by HIPOBJ_REQUIRE_GPU_DIRECT.
    let host = vec![0u8; 4096];
    rt().register(host.as_ptr() as usize, 4096, MemoryKind::Device)
        .unwrap();
    assert_eq!(
        rt().buffer_kind(host.as_ptr() as usize),
        Some(BufferKind::Host)
    );
    rt().deregister(host.as_ptr() as usize).unwrap();
    // A range that runs past the allocation is refused, whatever the staging policy.
    let e = rt()
        .register(buf + 4096, size, MemoryKind::Device)
        .unwrap_err();
    assert_eq!(e.code, OpError::InvalidValue);
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn range_violations_are_rejected_with_staging() {
    let env = Env::new(30_000, false);
    let size = 1 << 20;
    let buf = env.sim.alloc_device(0, size).unwrap();
    assert_eq!(
        rt().register(buf + 1, size, MemoryKind::Device)
            .unwrap_err()
            .code,
        OpError::InvalidValue
    );
    assert_eq!(
        rt().register(buf, size + 1, MemoryKind::Device)
            .unwrap_err()
            .code,
        OpError::InvalidValue
    );
    rt().register(buf + 4096, size - 4096, MemoryKind::Device)
        .unwrap();
    rt().deregister(buf + 4096).unwrap();
    assert_eq!(rt().registrations(), 0);
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn application_driven_transfers_with_sync() {
    let env = Env::new(30_000, false);
    let size = 256 << 10;
    let src = env.sim.alloc_device(0, size).unwrap();
    let dst = env.sim.alloc_device(0, size).unwrap();
    let data = pattern(size, 3);
    env.sim.write(src, &data).unwrap();
    rt().register(src, size, MemoryKind::Device).unwrap();
    rt().register(dst, size, MemoryKind::Device).unwrap();
    let s3 = env.s3;
    // The application's own request loop: token, request, 428 -> pair -> again.
    let app_request = |method: &str, ptr: usize| -> u16 {
        for _ in 0..3 {
            let kind = if method == "GET" {
                TransferKind::Get
            } else {
                TransferKind::Put
            };
            let token = rt().mint_token(ptr, size, kind).unwrap();
            let resp = s3
                .request_from(
                    s3::token_nic(&token),
                    method,
                    "/gpu/app",
                    &[("x-amz-rdma-token", &token)],
                    &[],
                )
                .unwrap();
            // The exchange is over: invalidate the token's window (hipObjPutRdmaToken).
            hipobj::runtime::release_token(token.as_bytes());
            let reply = Reply::parse(resp.header("x-amz-rdma-reply").unwrap().as_bytes()).unwrap();
            if reply.http_code() == 428 {
                rt().apply_reply(&reply).unwrap();
                continue;
            }
            return reply.http_code() as u16;
        }
        panic!("still 428 after three requests");
    };
    // Overlap with pool transfers on other threads.
    std::thread::scope(|sc| {
        let other = sc.spawn(|| {
            let host = pattern(128 << 10, 9);
            rt().register(host.as_ptr() as usize, host.len(), MemoryKind::Host)
                .unwrap();
            for i in 0..8 {
                let mut r = RdmaRequest::put(&s3, "gpu", &format!("bg{i}"));
                rt().transfer(
                    TransferKind::Put,
                    host.as_ptr() as usize,
                    host.len(),
                    0,
                    &mut r,
                )
                .unwrap();
            }
            rt().deregister(host.as_ptr() as usize).unwrap();
        });
        rt().sync(src, size, 0, SyncDirection::ToHost).unwrap();
        assert_eq!(app_request("PUT", src), 200);
        assert_eq!(s3.get("gpu", "app").unwrap().body, data);
        assert_eq!(app_request("GET", dst), 200);
        // Before the sync the device memory has not changed; after it, it holds the object.
        assert!(env.sim.read(dst, size).unwrap().iter().all(|&b| b == 0));
        rt().sync(dst, size, 0, SyncDirection::ToDevice).unwrap();
        assert_eq!(env.sim.read(dst, size).unwrap(), data);
        other.join().unwrap();
    });
    rt().deregister(src).unwrap();
    rt().deregister(dst).unwrap();
}
