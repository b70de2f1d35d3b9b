//! hipobj-rc-v2 transfers through `Runtime::transfer_v2` against elbencho's `s3rdma-server` (an
//! independently written v2 server, run as a separate process) in the Soft-RoCE lane
//! (tests/vm/e2e.d/28-v2-peer). `#[ignore]`d: outside the lane there is no device and no peer.
//! Each test checks the bytes (both ways, and through plain HTTP) and that the server's own log
//! has one RDMA line per transfer (the bytes did not go over HTTP).

#[path = "support/data.rs"]
mod data;
#[path = "support/peer.rs"]
mod peer;
#[path = "support/s3.rs"]
mod s3;
#[path = "support/server.rs"]
mod server;
#[path = "support/v2ops.rs"]
mod v2ops;

use data::pattern;
use hipobj::checksum::{CrcAlgo, Unchecked, Verdict};
use hipobj::error::OpError;
use hipobj::rcv2::client::{V2Outcome, V2Target};
use hipobj::runtime::{self, InitConfig, MemoryKind, TransferKind};
use peer::Peer;
use s3::S3;
use server::{required_device_pair, Server};
use std::sync::{Arc, Mutex, MutexGuard};
use v2ops::V2Http;

static SERIAL: Mutex<()> = Mutex::new(());

const BUCKET: &str = "v2bkt";

/// One server (s3rdma-server, or our own hipobj-server) and an initialised library on the client
/// device.
struct Env {
    _lock: MutexGuard<'static, ()>,
    peer: Option<Peer>,
    own: Option<Server>,
    s3: S3,
}

impl Env {
    /// Against elbencho's s3rdma-server.
    fn new() -> Env {
        Env::start(false)
    }

    /// Against hipobj-server (its hipobj-rc-v2 side, SigV4 as the test identity).
    fn own() -> Env {
        Env::start(true)
    }

    fn start(own: bool) -> Env {
        let lock = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let (client_dev, server_dev) = required_device_pair();
        let (peer, own, addr) = if own {
            let server = Server::start(Some(&server_dev), &[]);
            let addr = server.addr;
            (None, Some(server), addr)
        } else {
            let peer = Peer::start(&server_dev);
            let addr = peer.addr;
            (Some(peer), None, addr)
        };
        let s3 = S3::new(addr);
        let made = s3.create_bucket(BUCKET).expect("CreateBucket");
        assert!(made.status < 300, "CreateBucket: {}", made.status);
        runtime::init(InitConfig {
            gpu_device: -1,
            nic_hint: Some(client_dev),
            ..Default::default()
        })
        .expect("init");
        Env {
            _lock: lock,
            peer,
            own,
            s3,
        }
    }

    /// Whether the server is hipobj-server.
    fn is_own(&self) -> bool {
        self.own.is_some()
    }

    /// The s3rdma-server's RDMA log lines (none for hipobj-server, which logs no line per
    /// transfer).
    fn rdma_lines(&self) -> Option<Vec<String>> {
        self.peer.as_ref().map(Peer::rdma_lines)
    }

    fn transfer(
        &self,
        kind: TransferKind,
        buf: &mut [u8],
        size: usize,
        key: &str,
        offset: u64,
    ) -> Result<V2Outcome, OpError> {
        let mut target = V2Target::new(BUCKET, key);
        target.offset = offset;
        let mut ops = V2Http::new(self.s3);
        rt().transfer_v2(kind, buf.as_mut_ptr() as usize, size, &target, &mut ops)
            .map_err(|e| {
                eprintln!(
                    "{kind:?} {key} ({size} bytes at {offset}): {e}; seen {:?}",
                    ops.seen
                );
                e.code
            })
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = runtime::shutdown();
    }
}

fn rt() -> Arc<runtime::Runtime> {
    runtime::current().expect("initialised")
}

/// A registered host buffer, deregistered on drop.
struct Registered(Vec<u8>);

impl Registered {
    fn new(data: Vec<u8>) -> Registered {
        let mut r = Registered(data);
        let (ptr, len) = (r.0.as_mut_ptr() as usize, r.0.len());
        rt().register(ptr, len, MemoryKind::Host).expect("register");
        r
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Some(rt) = runtime::current() {
            let _ = rt.deregister(self.0.as_mut_ptr() as usize);
        }
    }
}

#[test]
#[ignore = "needs the RDMA lane and s3rdma-server (tests/vm/e2e.d/28-v2-peer)"]
fn the_peer_declines_a_v1_token_with_the_unsupported_marker() {
    let env = Env::new();
    let token = "01".to_string() + &"0".repeat(86);
    let r = env
        .s3
        .request(
            "GET",
            &format!("/{BUCKET}/none"),
            &[("x-amz-rdma-token", &token)],
            &[],
        )
        .expect("GET");
    let marker = r.header("x-amz-rdma-protocol-status");
    eprintln!("v1 token: {} {:?}", r.status, marker);
    assert_eq!(r.status, 501);
    assert_eq!(marker, Some("unsupported"));
}

#[test]
#[ignore = "needs the RDMA lane and s3rdma-server (tests/vm/e2e.d/28-v2-peer)"]
fn put_then_get_byte_exact_at_every_size_and_a_range() {
    sizes_and_a_range(&Env::new(), "s3rdma-server");
}

#[test]
#[ignore = "needs the RDMA lane and hipobj-server (tests/vm/e2e.d/28-v2-peer)"]
fn against_hipobj_server_put_then_get_byte_exact_at_every_size_and_a_range() {
    sizes_and_a_range(&Env::own(), "hipobj-server");
}

/// PUT then GET of 1 B, 4 KiB, 1 MiB and 64 MiB, a range, the bytes read back over plain HTTP,
/// and (s3rdma-server) one server log line per transfer.
fn sizes_and_a_range(env: &Env, server: &str) {
    let sizes = [1usize, 4096, 1 << 20, 64 << 20];
    let mut transfers = 0;
    for (i, &size) in sizes.iter().enumerate() {
        let key = format!("obj-{size}");
        let mut src = Registered::new(pattern(size, i as u64 + 1));
        let t0 = std::time::Instant::now();
        let put = env.transfer(TransferKind::Put, &mut src.0, size, &key, 0);
        let put_s = t0.elapsed().as_secs_f64();
        assert_eq!(put.as_ref().map(|o| o.bytes), Ok(size as u64), "PUT {size}");
        let mut dst = Registered::new(vec![0u8; size]);
        let t0 = std::time::Instant::now();
        let got = env.transfer(TransferKind::Get, &mut dst.0, size, &key, 0);
        let get_s = t0.elapsed().as_secs_f64();
        let verdict = got.as_ref().map(|o| o.verdict).ok();
        assert_eq!(got.map(|o| o.bytes), Ok(size as u64), "GET {size}");
        println!("v2 vs {server}: GET {size} B checksum: {verdict:?}");
        if env.is_own() {
            // hipobj-server's FINAL names the stored CRC64NVME of a whole object, and the client
            // checked the bytes that landed against it (docs/protocol.md 15.5).
            assert_eq!(
                verdict,
                Some(Verdict::Verified(CrcAlgo::Crc64Nvme.into())),
                "{size}"
            );
        }
        assert!(dst.0 == src.0, "{size} bytes came back different");
        transfers += 2;
        println!(
            "v2 vs {server}: {size} B PUT {:.1} ms, GET {:.1} ms ({:.1} MB/s)",
            put_s * 1e3,
            get_s * 1e3,
            size as f64 / get_s / 1e6
        );
        if size == 1 << 20 {
            // the server stored the bytes themselves (read back over plain HTTP)
            let plain = env.s3.get(BUCKET, &key).expect("plain GET");
            assert_eq!(plain.status, 200);
            assert!(plain.body == src.0, "plain HTTP GET differs");
            // a range: object bytes [1000, 6000) into the start of a buffer
            let mut part = Registered::new(vec![0u8; 5000]);
            let got = env.transfer(TransferKind::Get, &mut part.0, 5000, &key, 1000);
            if env.is_own() {
                let verdict = got.as_ref().map(|o| o.verdict);
                let none = Verdict::Unchecked(Unchecked::NoneStored);
                assert_eq!(verdict, Ok(none), "a range: FINAL names no checksum");
            }
            assert_eq!(got.map(|o| o.bytes), Ok(5000));
            assert!(part.0[..] == src.0[1000..6000], "range differs");
            transfers += 1;
        }
    }
    if let Some(lines) = env.rdma_lines() {
        println!("s3rdma-server RDMA lines:\n{}", lines.join("\n"));
        assert_eq!(lines.len(), transfers, "one server RDMA line per transfer");
    }
}

#[test]
#[ignore = "needs the RDMA lane and s3rdma-server (tests/vm/e2e.d/28-v2-peer)"]
fn eight_threads_at_once() {
    let env = Env::new();
    const THREADS: usize = 8;
    const SIZE: usize = 256 << 10;
    let results: Vec<bool> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let env = &env;
                s.spawn(move || {
                    let key = format!("thread-{t}");
                    let mut src = Registered::new(pattern(SIZE, 100 + t as u64));
                    let put = env.transfer(TransferKind::Put, &mut src.0, SIZE, &key, 0);
                    let mut dst = Registered::new(vec![0u8; SIZE]);
                    let got = env.transfer(TransferKind::Get, &mut dst.0, SIZE, &key, 0);
                    put.is_ok() && got.is_ok() && dst.0 == src.0
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(false))
            .collect()
    });
    assert!(results.iter().all(|&ok| ok), "per thread: {results:?}");
    assert_eq!(env.rdma_lines().map(|l| l.len()), Some(2 * THREADS));
}

#[test]
#[ignore = "needs the RDMA lane and s3rdma-server (tests/vm/e2e.d/28-v2-peer)"]
fn a_missing_object_fails_before_any_rdma_and_leaves_the_buffer() {
    let env = Env::new();
    let mut dst = Registered::new(vec![0x5a; 4096]);
    let got = env.transfer(TransferKind::Get, &mut dst.0, 4096, "no-such-key", 0);
    assert!(
        matches!(got, Err(OpError::S3Error | OpError::InvalidValue)),
        "{got:?}"
    );
    assert!(dst.0.iter().all(|&b| b == 0x5a), "the buffer was written");
    assert_eq!(env.rdma_lines().map(|l| l.len()), Some(0));
}
