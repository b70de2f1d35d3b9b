//! The main job and its benchmark: real RDMA PUTs and GETs of a 64 MiB object through
//! hipobj-server, byte-checked, with throughput. `make demo` runs it in the Soft-RoCE lane right
//! after perftest's ib_write_bw and ib_read_bw in the same boot, and it reports its throughput as a
//! ratio to them (`HIPOBJ_BASELINE_WRITE_MBS`, `HIPOBJ_BASELINE_READ_MBS`): GET is the server's RDMA
//! WRITE, PUT its RDMA READ, plus an HTTP round trip and the server's file I/O.
//!
//! Usage: rdma_throughput [SIZE_BYTES] [ROUNDS]   (defaults 67108864, 3)

#[path = "../tests/support/data.rs"]
mod data;
#[path = "../tests/support/s3.rs"]
mod s3;
#[path = "../tests/support/server.rs"]
mod server;

use hipobj::runtime::{self, InitConfig, MemoryKind, TransferKind};
use s3::{RdmaRequest, S3};
use std::time::Instant;

fn main() {
    // `cargo bench` passes --bench; skip flags.
    let args: Vec<String> = std::env::args().filter(|a| !a.starts_with("--")).collect();
    let size: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(64 << 20);
    let rounds: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
    let Some((client_dev, server_dev)) = server::device_pair() else {
        eprintln!(
            "demo: no RDMA device (run it through `make demo`, which uses the Soft-RoCE lane)"
        );
        std::process::exit(2);
    };
    let srv = server::Server::start(Some(&server_dev), &[]);
    let s3 = S3::new(srv.addr);
    assert!(s3.create_bucket("demo").expect("create bucket").status < 300);
    println!(
        "demo: client NIC {client_dev}, server NIC {server_dev}, object {} MiB, {rounds} rounds",
        size >> 20
    );

    let cfg = InitConfig {
        gpu_device: -1,
        nic_hint: Some(client_dev),
        ..Default::default()
    };
    runtime::init(cfg).unwrap_or_else(|e| panic!("hipObjInit: {e}"));
    let rt = runtime::current().expect("initialised");
    let src = data::pattern(size, 0x2545_f491_4f6c_dd1d);
    let mut dst = vec![0u8; size];
    rt.register(src.as_ptr() as usize, size, MemoryKind::Host)
        .expect("register src");
    rt.register(dst.as_mut_ptr() as usize, size, MemoryKind::Host)
        .expect("register dst");

    // The first transfer on a connection pairs it (one extra round trip); do it once up front.
    let mut warm = RdmaRequest::put(&s3, "demo", "warm-up");
    rt.transfer(TransferKind::Put, src.as_ptr() as usize, 4096, 0, &mut warm)
        .expect("warm-up PUT");
    println!(
        "demo: connection paired ({} requests, first reply {:?})",
        warm.requests,
        warm.replies.first().map(|r| &r[..4])
    );

    let mut put_mbs = Vec::new();
    let mut get_mbs = Vec::new();
    for round in 0..rounds {
        let key = format!("object-{round}");
        let mut req = RdmaRequest::put(&s3, "demo", &key);
        let t = Instant::now();
        rt.transfer(TransferKind::Put, src.as_ptr() as usize, size, 0, &mut req)
            .expect("PUT");
        put_mbs.push(size as f64 / t.elapsed().as_secs_f64() / 1e6);
        dst.fill(0);
        let mut req = RdmaRequest::get(&s3, "demo", &key);
        let t = Instant::now();
        rt.transfer(
            TransferKind::Get,
            dst.as_mut_ptr() as usize,
            size,
            0,
            &mut req,
        )
        .expect("GET");
        get_mbs.push(size as f64 / t.elapsed().as_secs_f64() / 1e6);
        assert!(dst == src, "GET returned different bytes");
        println!(
            "demo: round {round}: PUT {:.1} MB/s, GET {:.1} MB/s, {} bytes verified",
            put_mbs[round], get_mbs[round], size
        );
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    println!(
        "RESULT hipobj {} MiB: PUT {:.1} MB/s (server RDMA READ), GET {:.1} MB/s (server RDMA WRITE), median of {rounds}",
        size >> 20,
        median(&mut put_mbs),
        median(&mut get_mbs)
    );
    let baseline = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|v| *v > 0.0)
    };
    let (put, get) = (median(&mut put_mbs), median(&mut get_mbs));
    if let Some(w) = baseline("HIPOBJ_BASELINE_WRITE_MBS") {
        println!(
            "RATIO GET / ib_write_bw: {:.2} ({get:.1} / {w:.1} MB/s, same boot)",
            get / w
        );
    }
    if let Some(r) = baseline("HIPOBJ_BASELINE_READ_MBS") {
        println!(
            "RATIO PUT / ib_read_bw: {:.2} ({put:.1} / {r:.1} MB/s, same boot)",
            put / r
        );
    }
    rt.deregister(src.as_ptr() as usize).expect("deregister");
    rt.deregister(dst.as_mut_ptr() as usize)
        .expect("deregister");
    drop(rt);
    runtime::shutdown().expect("hipObjShutdown");
}
