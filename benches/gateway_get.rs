//! RDMA GET through the gateway vs a plain HTTP GET from the store behind it, same boot, same
//! object, same store (s3s-fs 0.14.1, a separate process). Reports medians and the ratio
//! `RDMA-through-gateway throughput / direct-HTTP throughput` per size: above 1 the gateway's RDMA
//! path beats asking the store yourself over TCP; the gateway pays one store request (plus a
//! HEAD) per transfer, so the ratio is the whole cost of the extra hop.
//!
//! Run in the lane: `tests/vm/run -- target/.../gateway_get-* [SIZES_BYTES,...] [ROUNDS]`
//! (defaults 4096,1048576,8388608 and 9), with the store's release build
//! (`scripts/install-s3s-fs --release`; `make unit` installs a debug one, slower to time).
//! Prints `RATIO gateway_get size=N value=R` lines.

#[path = "../tests/support/data.rs"]
mod data;
#[path = "../tests/support/s3.rs"]
mod s3;
#[path = "../tests/support/server.rs"]
mod server;
#[path = "../tests/support/store.rs"]
mod store;

use std::time::{Duration, Instant};

use hipobj::runtime::{self, InitConfig, MemoryKind, TransferKind};
use s3::sigv4::{TEST_ACCESS_KEY, TEST_SECRET_KEY};
use s3::{RdmaRequest, S3};
use store::Store;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn mbs(size: usize, d: Duration) -> f64 {
    size as f64 / d.as_secs_f64() / 1e6
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let sizes: Vec<usize> = args
        .first()
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![4096, 1 << 20, 8 << 20]);
    let rounds: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(9);
    let Some((client_dev, server_dev)) = server::device_pair() else {
        eprintln!("gateway_get: no RDMA device (run it in the Soft-RoCE lane)");
        std::process::exit(2);
    };
    // The store knows the test identity; the gateway's credentials file too (it signs as the
    // requester).
    let store = Store::start(TEST_ACCESS_KEY, TEST_SECRET_KEY);
    store.make_bucket("bench");
    let mut args = store.gateway_args();
    // Deadlines that the lane's emulated CPUs cannot trip (they do not change the speed).
    args.extend(["--watchdog-ms", "20000", "--min-rate", "16384"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gateway = server::Server::start(Some(&server_dev), &args);
    let via_gateway = S3::new(gateway.addr);
    let direct = S3::new(store.addr);
    runtime::init(InitConfig {
        gpu_device: -1,
        nic_hint: Some(client_dev),
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("hipObjInit: {e}"));
    let rt = runtime::current().expect("initialised");
    let max = *sizes.iter().max().expect("sizes");
    let src = data::pattern(max, 77);
    let mut dst = vec![0u8; max];
    rt.register(src.as_ptr() as usize, max, MemoryKind::Host)
        .expect("register");
    rt.register(dst.as_mut_ptr() as usize, max, MemoryKind::Host)
        .expect("register");
    for &size in &sizes {
        let key = format!("o{size}");
        let mut put = RdmaRequest::put(&via_gateway, "bench", &key);
        rt.transfer(TransferKind::Put, src.as_ptr() as usize, size, 0, &mut put)
            .expect("RDMA PUT");
        let mut rdma = Vec::new();
        let mut http = Vec::new();
        // Both sides keep their connection: the library its pool, the HTTP client a keep-alive.
        let mut http_conn = direct.keep_alive();
        let mut rdma_conn = via_gateway.keep_alive();
        // Alternate the two, so drift in the guest hits both alike.
        for _ in 0..rounds {
            dst[..size].fill(0);
            let mut get = RdmaRequest::get(&via_gateway, "bench", &key).over(&mut rdma_conn);
            let t = Instant::now();
            rt.transfer(
                TransferKind::Get,
                dst.as_mut_ptr() as usize,
                size,
                0,
                &mut get,
            )
            .expect("RDMA GET");
            rdma.push(t.elapsed());
            assert!(dst[..size] == src[..size], "RDMA GET bytes differ");
            let t = Instant::now();
            let resp = http_conn
                .request("GET", &format!("/bench/{key}"), &[], b"")
                .expect("HTTP GET");
            http.push(t.elapsed());
            assert_eq!(resp.status, 200);
            assert!(resp.body == src[..size], "HTTP GET bytes differ");
        }
        let (r, h) = (median(rdma), median(http));
        println!(
            "gateway_get size={size}: RDMA via gateway median {:.3} ms ({:.1} MB/s), HTTP from store median {:.3} ms ({:.1} MB/s)",
            r.as_secs_f64() * 1e3,
            mbs(size, r),
            h.as_secs_f64() * 1e3,
            mbs(size, h)
        );
        println!(
            "RATIO gateway_get size={size} value={:.3}",
            h.as_secs_f64() / r.as_secs_f64()
        );
    }
    rt.deregister(src.as_ptr() as usize).expect("deregister");
    rt.deregister(dst.as_mut_ptr() as usize)
        .expect("deregister");
    let _ = runtime::shutdown();
}
