//! End-to-end transfers over real RDMA verbs against `hipobj-server`, inside the Soft-RoCE lane
//! (`make e2e`). The tests are `#[ignore]`d so that a host without a device reports them as ignored,
//! not passed; the lane runs them with `--include-ignored`, and there each one FAILS without a device.
//!
//! The library has one global state, so the tests take a lock and run one at a time.

#[path = "support/data.rs"]
mod data;
#[path = "support/s3.rs"]
mod s3;
#[path = "support/server.rs"]
mod server;

use data::pattern;
use hipobj::error::OpError;
use hipobj::runtime::{self, InitConfig, MemoryKind, TransferKind};
use s3::{RdmaRequest, S3};
use server::{required_device_pair, Server};
use std::sync::{Arc, Mutex, MutexGuard};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

struct Env {
    _lock: MutexGuard<'static, ()>,
    server: Server,
    s3: S3,
    client_dev: String,
}

impl Env {
    fn new(max_transfers: usize, server_args: &[&str]) -> Env {
        let lock = serial();
        let (client_dev, server_dev) = required_device_pair();
        let server = Server::start(Some(&server_dev), server_args);
        let s3 = S3::new(server.addr);
        assert!(s3.create_bucket("bkt").unwrap().status < 300);
        let env = Env {
            _lock: lock,
            server,
            s3,
            client_dev,
        };
        env.init(max_transfers);
        env
    }

    fn init(&self, max_transfers: usize) {
        let mut cfg = InitConfig {
            gpu_device: -1,
            nic_hint: Some(self.client_dev.clone()),
            ..Default::default()
        };
        cfg.env.max_transfers = max_transfers;
        runtime::init(cfg).expect("hipObjInit");
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

/// One transfer of `len` bytes at `offset` of the registration based at `base`; its result and the
/// number of S3 requests it took.
fn transfer_once(
    s3: &S3,
    kind: TransferKind,
    key: &str,
    base: usize,
    offset: usize,
    len: usize,
) -> (hipobj::error::Result<()>, usize) {
    let mut req = match kind {
        TransferKind::Put => RdmaRequest::put(s3, "bkt", key),
        TransferKind::Get => RdmaRequest::get(s3, "bkt", key),
    };
    let r = rt().transfer(kind, base, len, offset as u64, &mut req);
    (r, req.requests)
}

fn put(
    s3: &S3,
    key: &str,
    buf: &[u8],
    offset: usize,
    len: usize,
) -> (hipobj::error::Result<()>, usize) {
    transfer_once(
        s3,
        TransferKind::Put,
        key,
        buf.as_ptr() as usize,
        offset,
        len,
    )
}

fn get(
    s3: &S3,
    key: &str,
    buf: &mut [u8],
    offset: usize,
    len: usize,
) -> (hipobj::error::Result<()>, usize) {
    transfer_once(
        s3,
        TransferKind::Get,
        key,
        buf.as_mut_ptr() as usize,
        offset,
        len,
    )
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn round_trips_of_many_sizes() {
    let env = Env::new(4, &[]);
    for (i, &size) in [1usize, 4096, 1 << 20, 64 << 20, 256 << 20]
        .iter()
        .enumerate()
    {
        let src = pattern(size, i as u64 + 1);
        let mut dst = vec![0u8; size];
        let rt = rt();
        rt.register(src.as_ptr() as usize, size, MemoryKind::Host)
            .unwrap();
        rt.register(dst.as_mut_ptr() as usize, size, MemoryKind::Host)
            .unwrap();
        let key = format!("obj-{size}");
        let (r, _) = put(&env.s3, &key, &src, 0, size);
        r.unwrap_or_else(|e| panic!("PUT {size}: {e}"));
        // The object really is on the server, byte for byte.
        let plain = env.s3.get("bkt", &key).unwrap();
        assert_eq!(plain.status, 200);
        assert!(plain.body == src, "server copy of {size} bytes differs");
        let (r, _) = get(&env.s3, &key, &mut dst, 0, size);
        r.unwrap_or_else(|e| panic!("GET {size}: {e}"));
        assert!(dst == src, "GET of {size} bytes differs");
        rt.deregister(src.as_ptr() as usize).unwrap();
        rt.deregister(dst.as_mut_ptr() as usize).unwrap();
        println!("round trip {size} bytes: ok");
    }
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn offsets_and_ranges_inside_a_registration() {
    let env = Env::new(2, &[]);
    let total = 1 << 20;
    let mut buf = vec![0xAAu8; total];
    let base = buf.as_mut_ptr() as usize;
    rt().register(base, total, MemoryKind::Host).unwrap();
    let obj = pattern(10_000, 7);
    assert_eq!(env.s3.put("bkt", "ten-k", &obj).unwrap().status, 200);
    // GET into the middle of the registration: only those bytes change.
    let (r, _) = get(&env.s3, "ten-k", &mut buf, 300_000, 10_000);
    r.unwrap();
    assert_eq!(&buf[300_000..310_000], &obj[..]);
    assert!(buf[..300_000].iter().all(|&b| b == 0xAA) && buf[310_000..].iter().all(|&b| b == 0xAA));
    // Ranged GET: bytes 1000..=4999 of the object into offset 8.
    let mut req = RdmaRequest::get(&env.s3, "bkt", "ten-k").with_range(1000, 4999);
    rt().transfer(TransferKind::Get, base, 4000, 8, &mut req)
        .unwrap();
    assert_eq!(&buf[8..4008], &obj[1000..5000]);
    // PUT from an offset.
    let (r, _) = put(&env.s3, "from-offset", &buf, 300_000, 10_000);
    r.unwrap();
    assert_eq!(env.s3.get("bkt", "from-offset").unwrap().body, obj);
    // Registration errors: the same base twice, a pointer inside a registration, an unknown base.
    assert_eq!(
        rt().register(base, 16, MemoryKind::Host).unwrap_err().code,
        OpError::BufAlreadyRegistered
    );
    assert_eq!(
        rt().deregister(base + 8).unwrap_err().code,
        OpError::BufNotRegistered
    );
    let mut req = RdmaRequest::get(&env.s3, "bkt", "ten-k");
    let e = rt()
        .transfer(TransferKind::Get, base + 8, 16, 0, &mut req)
        .unwrap_err();
    assert_eq!(e.code, OpError::BufNotRegistered);
    assert_eq!(
        rt().mint_token(base, total + 1, TransferKind::Get)
            .unwrap_err()
            .code,
        OpError::InvalidValue
    );
    assert_eq!(rt().registrations(), 1);
    // A range that leaves the registration is refused before any request.
    let mut req = RdmaRequest::get(&env.s3, "bkt", "ten-k");
    let e = rt()
        .transfer(
            TransferKind::Get,
            base,
            10_000,
            (total - 5_000) as u64,
            &mut req,
        )
        .unwrap_err();
    assert_eq!(e.code, OpError::InvalidValue);
    assert_eq!(req.requests, 0);
    rt().deregister(base).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn pairing_takes_one_extra_round_trip_once() {
    let env = Env::new(1, &[]);
    let size = 4096;
    let src = pattern(size, 3);
    rt().register(src.as_ptr() as usize, size, MemoryKind::Host)
        .unwrap();
    let mut req = RdmaRequest::put(&env.s3, "bkt", "p");
    rt().transfer(TransferKind::Put, src.as_ptr() as usize, size, 0, &mut req)
        .unwrap();
    assert_eq!(
        req.requests, 2,
        "first transfer: 428 then 200 ({:?})",
        req.replies
    );
    assert!(req.replies[0].starts_with("428:") && req.replies[1].starts_with("200:"));
    for _ in 0..5 {
        let (r, n) = put(&env.s3, "p", &src, 0, size);
        r.unwrap();
        assert_eq!(n, 1, "a paired connection takes one round trip");
    }
    rt().deregister(src.as_ptr() as usize).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn an_rdma_put_stores_and_checks_the_headers_an_http_put_would() {
    let env = Env::new(1, &[]);
    let size = 64 << 10;
    let src = pattern(size, 7);
    let base = src.as_ptr() as usize;
    rt().register(base, size, MemoryKind::Host).unwrap();
    let mut req = RdmaRequest::put(&env.s3, "bkt", "described")
        .with_header("x-amz-meta-color", "blue")
        .with_header("Content-Type", "application/x-hipobj-test")
        .with_header("x-amz-tagging", "team=ml&kind=shard");
    rt().transfer(TransferKind::Put, base, size, 0, &mut req)
        .unwrap();
    let head = env.s3.request("HEAD", "/bkt/described", &[], &[]).unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(head.header("x-amz-meta-color"), Some("blue"));
    assert_eq!(
        head.header("content-type"),
        Some("application/x-hipobj-test")
    );
    assert_eq!(head.header("x-amz-tagging-count"), Some("2"));
    let tags = env
        .s3
        .request("GET", "/bkt/described?tagging", &[], &[])
        .unwrap();
    let tags = String::from_utf8_lossy(&tags.body);
    assert!(
        tags.contains("<Key>team</Key>") && tags.contains("<Value>shard</Value>"),
        "{tags}"
    );

    // Refused like an HTTP PUT, and nothing of the stored object changes.
    let refusals: [(&str, &str, u16); 3] = [
        ("Content-MD5", "AAAAAAAAAAAAAAAAAAAAAA==", 400),
        ("If-None-Match", "*", 412),
        ("x-amz-server-side-encryption", "AES256", 501),
    ];
    let other = pattern(size, 8);
    rt().register(other.as_ptr() as usize, size, MemoryKind::Host)
        .unwrap();
    for (name, value, status) in refusals {
        let mut req = RdmaRequest::put(&env.s3, "bkt", "described").with_header(name, value);
        let e = rt()
            .transfer(
                TransferKind::Put,
                other.as_ptr() as usize,
                size,
                0,
                &mut req,
            )
            .unwrap_err();
        assert_eq!(e.code, OpError::S3Error, "{name}");
        assert_eq!(req.last_status, status, "{name}: {:?}", req.failure);
        let now = env.s3.get("bkt", "described").unwrap();
        assert_eq!(now.body, src, "{name} changed the stored bytes");
        let head = env.s3.request("HEAD", "/bkt/described", &[], &[]).unwrap();
        assert_eq!(head.header("x-amz-meta-color"), Some("blue"), "{name}");
    }
    rt().deregister(other.as_ptr() as usize).unwrap();
    rt().deregister(base).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn server_restart_means_re_pairing() {
    let mut env = Env::new(1, &[]);
    let size = 64 << 10;
    let src = pattern(size, 4);
    let mut dst = vec![0u8; size];
    rt().register(src.as_ptr() as usize, size, MemoryKind::Host)
        .unwrap();
    rt().register(dst.as_mut_ptr() as usize, size, MemoryKind::Host)
        .unwrap();
    put(&env.s3, "r", &src, 0, size).0.unwrap();
    env.server.restart();
    // The old pairing is unknown to the new server: 428 -> fresh QP -> 428 -> paired -> 200.
    let mut req = RdmaRequest::get(&env.s3, "bkt", "r");
    rt().transfer(
        TransferKind::Get,
        dst.as_mut_ptr() as usize,
        size,
        0,
        &mut req,
    )
    .unwrap();
    assert_eq!(req.requests, 3, "replies {:?}", req.replies);
    assert_eq!(dst, src);
    let (r, n) = put(&env.s3, "r2", &src, 0, size);
    r.unwrap();
    assert_eq!(n, 1);
    rt().deregister(src.as_ptr() as usize).unwrap();
    rt().deregister(dst.as_mut_ptr() as usize).unwrap();
}

/// Revision 5 (docs/protocol.md section 12): a GET of a missing key is refused before anything
/// starts, so the connection keeps its QP and pairing: the next GET takes one request on the same
/// QP, and the server made no new pairing.
#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn a_refusal_that_starts_nothing_keeps_the_pairing() {
    let env = Env::new(1, &[]);
    let size = 4096;
    let src = pattern(size, 6);
    let mut dst = vec![0u8; size];
    rt().register(src.as_ptr() as usize, size, MemoryKind::Host)
        .unwrap();
    rt().register(dst.as_mut_ptr() as usize, size, MemoryKind::Host)
        .unwrap();
    put(&env.s3, "present", &src, 0, size).0.unwrap();
    let pairings = env.server.counter("pairings_created");
    let mut missing = RdmaRequest::get(&env.s3, "bkt", "missing");
    let e = rt()
        .transfer(
            TransferKind::Get,
            dst.as_mut_ptr() as usize,
            size,
            0,
            &mut missing,
        )
        .unwrap_err();
    assert_eq!(e.code, OpError::S3Error);
    assert!(e.pairing_kept, "{e}");
    assert_eq!(missing.replies, ["404"]);
    let mut present = RdmaRequest::get(&env.s3, "bkt", "present");
    rt().transfer(
        TransferKind::Get,
        dst.as_mut_ptr() as usize,
        size,
        0,
        &mut present,
    )
    .unwrap();
    assert_eq!(dst, src);
    assert_eq!(
        present.requests, 1,
        "the kept pairing takes one request ({:?})",
        present.replies
    );
    let (before, after) = (decode(&missing.tokens[0]), decode(&present.tokens[0]));
    assert_eq!(
        (after.qp_num, after.lid),
        (before.qp_num, before.lid),
        "same QP, same pairing"
    );
    assert_eq!(
        env.server.counter("pairings_created"),
        pairings,
        "the server made no new pairing"
    );
    rt().deregister(src.as_ptr() as usize).unwrap();
    rt().deregister(dst.as_mut_ptr() as usize).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn callback_failure_is_s3_error_and_resets_the_connection() {
    let env = Env::new(1, &[]);
    let size = 4096;
    let src = pattern(size, 5);
    rt().register(src.as_ptr() as usize, size, MemoryKind::Host)
        .unwrap();
    let mut ok = RdmaRequest::put(&env.s3, "bkt", "c");
    rt().transfer(TransferKind::Put, src.as_ptr() as usize, size, 0, &mut ok)
        .unwrap();
    let first_token =
        hipobj::token::Token::decode_hex(ok.tokens.last().unwrap().as_bytes()).unwrap();
    assert_ne!(first_token.lid, 0, "second request carries the pairing id");
    let mut bad = RdmaRequest::put(&env.s3, "bkt", "c");
    bad.fail_send = true;
    let e = rt()
        .transfer(TransferKind::Put, src.as_ptr() as usize, size, 0, &mut bad)
        .unwrap_err();
    assert_eq!(e.code, OpError::S3Error);
    // The only connection was reset: a new QP number, unpaired.
    let mut next = RdmaRequest::put(&env.s3, "bkt", "c");
    rt().transfer(TransferKind::Put, src.as_ptr() as usize, size, 0, &mut next)
        .unwrap();
    let t = hipobj::token::Token::decode_hex(next.tokens[0].as_bytes()).unwrap();
    assert_ne!(t.qp_num, first_token.qp_num);
    assert_eq!(t.lid, 0);
    assert_eq!(next.requests, 2);
    rt().deregister(src.as_ptr() as usize).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn unregistered_remote_range_writes_nothing() {
    let env = Env::new(1, &[]);
    let size = 8192;
    let mut buf = vec![0x55u8; size];
    let base = buf.as_mut_ptr() as usize;
    rt().register(base, size, MemoryKind::Host).unwrap();
    let obj = pattern(size, 6);
    assert_eq!(env.s3.put("bkt", "u", &obj).unwrap().status, 200);
    // Pair the application connection, then send a token whose address lies outside the MR.
    let tok = rt().mint_token(base, size, TransferKind::Get).unwrap();
    let mut t = hipobj::token::Token::decode_hex(tok.as_bytes()).unwrap();
    assert_eq!(
        t.rkey, 0,
        "a token of an unpaired connection grants nothing"
    );
    let nic = s3::token_nic(&tok);
    assert!(nic.is_some(), "the lane's GIDs are IPv4-mapped");
    let resp = env
        .s3
        .request_from(nic, "GET", "/bkt/u", &[("x-amz-rdma-token", &tok)], &[])
        .unwrap();
    let reply = resp.header("x-amz-rdma-reply").unwrap().to_string();
    assert!(reply.starts_with("428:"), "{reply}");
    rt().apply_reply(&hipobj::reply::Reply::parse(reply.as_bytes()).unwrap())
        .unwrap();
    let tok = rt().mint_token(base, size, TransferKind::Get).unwrap();
    let bound = hipobj::token::Token::decode_hex(tok.as_bytes()).unwrap();
    assert_ne!(
        bound.rkey, 0,
        "a paired connection's token carries a window"
    );
    assert_eq!(rt().open_token_windows(), 1);
    t = hipobj::token::Token {
        remote_addr: t.remote_addr + (1 << 30),
        lid: bound.lid,
        rkey: bound.rkey,
        ..t
    };
    let resp = env
        .s3
        .request_from(
            nic,
            "GET",
            "/bkt/u",
            &[("x-amz-rdma-token", &t.encode_hex())],
            &[],
        )
        .unwrap();
    assert_eq!(
        resp.header("x-amz-rdma-reply"),
        Some("500"),
        "status {}",
        resp.status
    );
    assert!(buf.iter().all(|&b| b == 0x55), "nothing may be written");
    hipobj::runtime::release_token(tok.as_bytes());
    assert_eq!(rt().open_token_windows(), 0);
    rt().deregister(base).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn many_threads_many_transfers() {
    // The server's own limit on RDMA transfers at once must not be what this test measures.
    let env = Env::new(16, &["--max-rdma-transfers", "64"]);
    let threads = 16;
    let per_thread = 16;
    let size = 256 << 10;
    let s3 = env.s3;
    std::thread::scope(|sc| {
        for t in 0..threads {
            sc.spawn(move || {
                let src = pattern(size, 100 + t as u64);
                let mut dst = vec![0u8; size];
                let rt = rt();
                rt.register(src.as_ptr() as usize, size, MemoryKind::Host)
                    .unwrap();
                rt.register(dst.as_mut_ptr() as usize, size, MemoryKind::Host)
                    .unwrap();
                for i in 0..per_thread {
                    let key = format!("t{t}-{i}");
                    put(&s3, &key, &src, 0, size)
                        .0
                        .unwrap_or_else(|e| panic!("PUT {key}: {e}"));
                    dst.fill(0);
                    get(&s3, &key, &mut dst, 0, size)
                        .0
                        .unwrap_or_else(|e| panic!("GET {key}: {e}"));
                    assert!(dst == src, "{key} differs");
                }
                rt.deregister(src.as_ptr() as usize).unwrap();
                rt.deregister(dst.as_mut_ptr() as usize).unwrap();
            });
        }
    });
    assert_eq!(rt().free_connections(), 16);
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn more_threads_than_connections_wait() {
    let env = Env::new(2, &[]);
    let size = 64 << 10;
    let s3 = env.s3;
    std::thread::scope(|sc| {
        for t in 0..8 {
            sc.spawn(move || {
                let src = pattern(size, 200 + t as u64);
                let rt = rt();
                rt.register(src.as_ptr() as usize, size, MemoryKind::Host)
                    .unwrap();
                for i in 0..4 {
                    put(&s3, &format!("w{t}-{i}"), &src, 0, size).0.unwrap();
                }
                rt.deregister(src.as_ptr() as usize).unwrap();
            });
        }
    });
    assert_eq!(rt().free_connections(), 2);
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn callbacks_re_enter_deregister_busy_and_full_pool_busy() {
    let env = Env::new(1, &[]);
    let size = 4096;
    let src = pattern(size, 9);
    let base = src.as_ptr() as usize;
    rt().register(base, size, MemoryKind::Host).unwrap();
    let seen = std::cell::RefCell::new(Vec::new());
    let s3 = env.s3;
    {
        let mut req = RdmaRequest::put(&s3, "bkt", "re");
        req.on_send = Some(Box::new(|| {
            // The transfer's own buffer is in use: deregister says Busy and keeps it.
            seen.borrow_mut()
                .push(rt().deregister(base).map_err(|e| e.code));
            // The only connection is ours: a nested transfer gets Busy at once.
            let mut inner = RdmaRequest::put(&s3, "bkt", "inner");
            seen.borrow_mut().push(
                rt().transfer(TransferKind::Put, base, size, 0, &mut inner)
                    .map_err(|e| e.code),
            );
        }));
        rt().transfer(TransferKind::Put, base, size, 0, &mut req)
            .unwrap();
    }
    let seen = seen.into_inner();
    assert!(seen.iter().all(|r| *r == Err(OpError::Busy)), "{seen:?}");
    assert_eq!(rt().registrations(), 1);
    rt().deregister(base).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn shutdown_while_transfers_run_then_release() {
    let env = Env::new(2, &[]);
    let size = 8 << 20;
    let src = pattern(size, 10);
    let base = src.as_ptr() as usize;
    rt().register(base, size, MemoryKind::Host).unwrap();
    let s3 = env.s3;
    let started = std::sync::Barrier::new(3);
    let results = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..2)
            .map(|t| {
                let started = &started;
                sc.spawn(move || {
                    let rt = rt();
                    let mut req = RdmaRequest::put(&s3, "bkt", &format!("s{t}"));
                    let mut once = Some(());
                    req.on_send = Some(Box::new(move || {
                        if once.take().is_some() {
                            started.wait();
                        }
                    }));
                    rt.transfer(TransferKind::Put, base, size, 0, &mut req)
                        .map_err(|e| e.code)
                })
            })
            .collect();
        started.wait();
        runtime::shutdown().expect("hipObjShutdown");
        assert!(runtime::current().is_none());
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert_eq!(results, vec![Ok(()), Ok(())]);
    assert_eq!(
        hipobj::pool::LIVE_QPS.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "QPs released after the last call"
    );
    assert_eq!(
        hipobj::registry::LIVE_BUFFERS.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    // Re-init works and the object is there.
    env.init(1);
    assert_eq!(env.s3.get("bkt", "s0").unwrap().body.len(), size);
}

/// The entries of a `/proc/self` directory that `describe` keeps, as (entry name, what it is),
/// sorted. An entry that went away while it was read is not listed.
fn proc_entries(
    dir: &str,
    describe: impl Fn(&std::path::Path) -> Option<String>,
) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut listed: Vec<(String, String)> = entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let what = describe(&entry.path())?;
            Some((entry.file_name().to_string_lossy().into_owned(), what))
        })
        .collect();
    listed.sort();
    listed
}

/// The threads of this process that the library named (`hipobj-*`): (tid, name). A thread whose
/// name cannot be read any more has been reaped and is not listed.
fn library_threads() -> Vec<(String, String)> {
    proc_entries("/proc/self/task", |task| {
        let comm = std::fs::read_to_string(task.join("comm")).ok()?;
        let name = comm.trim_end().to_string();
        name.starts_with("hipobj-").then_some(name)
    })
}

/// Returns once the library's threads are named `expected` (in any order); fails the test, naming
/// the threads there are, if they are not after 10 s. Waiting is needed both ways: a new thread
/// takes its name itself once it runs, and a thread that shutdown joined can stay listed in /proc
/// for a moment after the join returns (glibc's join returns when the kernel clears the thread's
/// tid, before the kernel reaps it).
fn wait_for_library_threads(when: &str, expected: &[&str]) {
    let mut expected = expected.to_vec();
    expected.sort_unstable();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let threads = library_threads();
        let mut names: Vec<&str> = threads.iter().map(|(_, name)| name.as_str()).collect();
        names.sort_unstable();
        if names == expected {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{when}: the library's threads (tid, name) are {threads:?} 10 s later, not {expected:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// This process's open file descriptors: (fd, what it refers to).
fn open_fds() -> Vec<(String, String)> {
    proc_entries("/proc/self/fd", |fd| {
        let target = std::fs::read_link(fd).ok()?;
        Some(target.to_string_lossy().into_owned())
    })
}

/// Fails the test, naming what is left, if a QP, a registration (MR) or a memory window of the
/// library is still live, or if a descriptor not in `fds_before` is open.
fn assert_nothing_live(after: &str, fds_before: &[(String, String)]) {
    use std::sync::atomic::Ordering::SeqCst;
    let live = [
        ("QPs", hipobj::pool::LIVE_QPS.load(SeqCst)),
        ("MRs", hipobj::registry::LIVE_BUFFERS.load(SeqCst)),
        ("memory windows", hipobj::verbs::LIVE_WINDOWS.load(SeqCst)),
    ];
    for (what, n) in live {
        assert_eq!(n, 0, "{after}: {n} {what} of the library still live");
    }
    let fds = open_fds();
    let opened: Vec<_> = fds.iter().filter(|fd| !fds_before.contains(fd)).collect();
    let closed: Vec<_> = fds_before.iter().filter(|fd| !fds.contains(fd)).collect();
    assert!(
        opened.is_empty() && closed.is_empty(),
        "{after}: file descriptors (fd, target) opened {opened:?}, closed {closed:?}"
    );
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn init_shutdown_cycles_leak_nothing() {
    let env = Env::new(4, &[]);
    let size = 4096;
    let src = pattern(size, 11);
    // Warm up once (loads libibverbs, starts the supervisor), then measure.
    rt().register(src.as_ptr() as usize, size, MemoryKind::Host)
        .unwrap();
    put(&env.s3, "l", &src, 0, size).0.unwrap();
    runtime::shutdown().expect("hipObjShutdown");
    // The supervisor lives for the process; every other thread of the library ends with its runtime.
    let supervisor_only = ["hipobj-sup"];
    let up = [
        "hipobj-sup",
        "hipobj-qp-00",
        "hipobj-qp-01",
        "hipobj-qp-02",
        "hipobj-qp-03",
    ];
    wait_for_library_threads("after the first shutdown", &supervisor_only);
    let fds = open_fds();
    for i in 0..100 {
        env.init(4);
        rt().register(src.as_ptr() as usize, size, MemoryKind::Host)
            .unwrap();
        if i % 10 == 0 {
            put(&env.s3, "l", &src, 0, size).0.unwrap();
        }
        wait_for_library_threads(&format!("cycle {i}, initialized"), &up);
        let windows = hipobj::verbs::LIVE_WINDOWS.load(std::sync::atomic::Ordering::SeqCst);
        if rt().protection() == hipobj::pool::Protection::Windows {
            assert!(windows >= 4, "cycle {i}: {windows} windows while up");
        }
        runtime::shutdown().expect("hipObjShutdown");
        let after = format!("cycle {i}, after shutdown");
        wait_for_library_threads(&after, &supervisor_only);
        assert_nothing_live(&after, &fds);
    }
    env.init(1);
}

/// Returns once `n` calls wait for a connection of `rt`'s pool and `waiter` is still running (so
/// it is one of them); fails the test if `waiter` returns first or after 10 s.
fn wait_for_connection_waiters<T>(
    rt: &runtime::Runtime,
    n: usize,
    waiter: &std::thread::ScopedJoinHandle<'_, T>,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while rt.connection_waiters() < n {
        assert!(
            !waiter.is_finished(),
            "the waiter returned instead of waiting for a connection"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "no call waited for a connection within 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(rt.connection_waiters(), n, "calls waiting for a connection");
    assert!(!waiter.is_finished(), "the waiter is blocked on the pool");
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn shutdown_wakes_a_transfer_waiting_for_a_connection() {
    let env = Env::new(1, &[]);
    let size = 4096;
    let src = pattern(size, 12);
    let base = src.as_ptr() as usize;
    rt().register(base, size, MemoryKind::Host).unwrap();
    let s3 = env.s3;
    let holding = std::sync::Barrier::new(2);
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let (holder, waiter) = std::thread::scope(|sc| {
        // Owned here: if a check below fails, unwinding drops it and so releases the holder
        // before the scope joins it.
        let release_tx = release_tx;
        let holding = &holding;
        let holder = sc.spawn(move || {
            let rt = rt();
            let mut req = RdmaRequest::put(&s3, "bkt", "held");
            let mut first = true;
            req.on_send = Some(Box::new(move || {
                if std::mem::take(&mut first) {
                    holding.wait();
                    // Hold the only connection until the test has shut down.
                    let _ = release_rx.recv();
                }
            }));
            rt.transfer(TransferKind::Put, base, size, 0, &mut req)
                .map_err(|e| e.code)
        });
        holding.wait();
        let waiter = sc.spawn(move || {
            let rt = rt();
            let mut req = RdmaRequest::put(&s3, "bkt", "waiting");
            let r = rt
                .transfer(TransferKind::Put, base, size, 0, &mut req)
                .map_err(|e| e.code);
            (r, req.requests)
        });
        // The waiter cannot get the held connection: shut down once the pool counts it as blocked.
        wait_for_connection_waiters(&rt(), 1, &waiter);
        runtime::shutdown().expect("hipObjShutdown");
        let waiter = waiter.join().unwrap();
        let _ = release_tx.send(());
        (holder.join().unwrap(), waiter)
    });
    assert_eq!(
        waiter,
        (Err(OpError::NotInitialized), 0),
        "the waiter is woken by shutdown"
    );
    assert_eq!(holder, Ok(()), "the transfer in progress finishes normally");
    assert_eq!(
        hipobj::pool::LIVE_QPS.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    env.init(1);
}

// ---- Protocol revision 2: memory windows (docs/protocol.md 9.6-9.9) --------------------------------

fn decode(token: &str) -> hipobj::token::Token {
    hipobj::token::Token::decode_hex(token.as_bytes()).expect("a valid token")
}

/// `token` with its rkey replaced.
fn with_rkey(token: &str, rkey: u32) -> String {
    hipobj::token::Token {
        rkey,
        ..decode(token)
    }
    .encode_hex()
}

/// Send `token` in a request of our own (an observer's), from the token's NIC address; the
/// response's `x-amz-rdma-reply`.
fn replay(s3: &S3, method: &str, path: &str, token: &str) -> String {
    let resp = s3
        .request_from(
            s3::token_nic(token),
            method,
            path,
            &[("x-amz-rdma-token", token)],
            &[],
        )
        .expect("replayed request");
    resp.header("x-amz-rdma-reply")
        .unwrap_or_else(|| panic!("no reply header (status {})", resp.status))
        .to_string()
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn tokens_carry_a_fresh_window_per_request_and_rkey_0_unpaired() {
    let env = Env::new(1, &[]);
    assert_eq!(
        rt().protection(),
        hipobj::pool::Protection::Windows,
        "rxe has type-2 memory windows"
    );
    let size = 4096;
    let src = pattern(size, 21);
    let base = src.as_ptr() as usize;
    rt().register(base, size, MemoryKind::Host).unwrap();
    let mr_rkey = rt().registration_rkey(base).unwrap();
    let mut first = RdmaRequest::put(&env.s3, "bkt", "w");
    rt().transfer(TransferKind::Put, base, size, 0, &mut first)
        .unwrap();
    assert_eq!(first.requests, 2, "{:?}", first.replies);
    assert_eq!(decode(&first.tokens[0]).rkey, 0, "unpaired: rkey 0");
    let bound = decode(&first.tokens[1]);
    assert_ne!(bound.rkey, 0, "paired: a window");
    assert_ne!(
        bound.rkey, mr_rkey,
        "the window, never the registration's rkey"
    );
    let mut rkeys = vec![bound.rkey];
    for _ in 0..3 {
        let mut req = RdmaRequest::put(&env.s3, "bkt", "w");
        rt().transfer(TransferKind::Put, base, size, 0, &mut req)
            .unwrap();
        let t = decode(&req.tokens[0]);
        assert_eq!(t.qp_num, bound.qp_num, "the connection stays paired");
        assert!(!rkeys.contains(&t.rkey), "each request binds a new rkey");
        assert_eq!((t.remote_addr, t.length), (base as u64, size as u64));
        rkeys.push(t.rkey);
    }
    assert_eq!(env.s3.get("bkt", "w").unwrap().body, src);
    rt().deregister(base).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn the_registrations_own_rkey_grants_nothing() {
    let env = Env::new(1, &[]);
    let size = 4096;
    let mut buf = vec![0x11u8; size];
    let base = buf.as_mut_ptr() as usize;
    rt().register(base, size, MemoryKind::Host).unwrap();
    let mr_rkey = rt().registration_rkey(base).unwrap();
    let obj = pattern(size, 22);
    assert_eq!(env.s3.put("bkt", "mr", &obj).unwrap().status, 200);
    // Pair the connection with a PUT of other bytes (so the buffer's content is known).
    let (r, _) = put(&env.s3, "pairing", &buf, 0, size);
    r.unwrap();
    // GET with the registration's rkey instead of the window's: the server's WRITE is refused.
    let mut req = RdmaRequest::get(&env.s3, "bkt", "mr");
    req.token_filter = Some(Box::new(move |t: &str| with_rkey(t, mr_rkey)));
    let e = rt()
        .transfer(TransferKind::Get, base, size, 0, &mut req)
        .unwrap_err();
    assert_eq!(e.code, OpError::S3Error, "{e} / replies {:?}", req.replies);
    assert_eq!(req.replies.last().map(String::as_str), Some("500"));
    assert!(
        buf.iter().all(|&b| b == 0x11),
        "the registration's rkey wrote the buffer"
    );
    // PUT with the registration's rkey: the server's READ is refused, no object appears.
    let mut req = RdmaRequest::put(&env.s3, "bkt", "stolen");
    req.token_filter = Some(Box::new(move |t: &str| with_rkey(t, mr_rkey)));
    let e = rt()
        .transfer(TransferKind::Put, base, size, 0, &mut req)
        .unwrap_err();
    assert_eq!(e.code, OpError::S3Error, "{e} / replies {:?}", req.replies);
    assert_ne!(
        env.s3.get("bkt", "stolen").unwrap().body,
        buf,
        "the registration's rkey let the server read the buffer"
    );
    // The connection recovers: the next transfer works.
    let (r, _) = get(&env.s3, "mr", &mut buf, 0, size);
    r.unwrap();
    assert_eq!(buf, obj);
    rt().deregister(base).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn a_token_replayed_after_its_transfer_returned_is_refused_by_the_nic() {
    let env = Env::new(1, &[]);
    let size = 4096;
    let mut victim = vec![0u8; size];
    let base = victim.as_mut_ptr() as usize;
    rt().register(base, size, MemoryKind::Host).unwrap();
    let secret = pattern(size, 23);
    assert_eq!(env.s3.put("bkt", "victim", &secret).unwrap().status, 200);
    let junk = pattern(size, 24);
    assert_eq!(env.s3.put("bkt", "junk", &junk).unwrap().status, 200);
    // The victim's GET (pairs on the way) and its token as seen on the wire.
    let mut req = RdmaRequest::get(&env.s3, "bkt", "victim");
    rt().transfer(TransferKind::Get, base, size, 0, &mut req)
        .unwrap();
    assert_eq!(victim, secret);
    let seen = req.tokens.last().unwrap().clone();
    assert_ne!(decode(&seen).rkey, 0);
    // Replayed into a GET of other bytes: the server's WRITE through the dead window is refused.
    let reply = replay(&env.s3, "GET", "/bkt/junk", &seen);
    assert_eq!(reply, "500", "replayed GET token");
    assert_eq!(
        victim, secret,
        "a replayed GET token wrote the victim's buffer"
    );
    // The victim's PUT token, replayed into a PUT of the observer's own key.
    let mut req = RdmaRequest::put(&env.s3, "bkt", "victim-copy");
    rt().transfer(TransferKind::Put, base, size, 0, &mut req)
        .unwrap();
    let seen = req.tokens.last().unwrap().clone();
    let reply = replay(&env.s3, "PUT", "/bkt/observer", &seen);
    assert_eq!(reply, "500", "replayed PUT token");
    let observed = env.s3.get("bkt", "observer").unwrap();
    assert!(
        observed.status != 200 || observed.body != secret,
        "a replayed PUT token read the victim's buffer"
    );
    // The victim's connection recovers from the refused access (both QPs went to ERR).
    let (r, _) = get(&env.s3, "junk", &mut victim, 0, size);
    r.unwrap();
    assert_eq!(victim, junk);
    rt().deregister(base).unwrap();
}

/// A client whose callback sends the request and gives up at once, keeping the socket.
struct GiveUp<'a> {
    s3: &'a S3,
    path: &'a str,
    before_send: Box<dyn FnMut() + 'a>,
    pending: Option<std::net::TcpStream>,
    replies: Vec<String>,
}

impl hipobj::runtime::S3Ops for GiveUp<'_> {
    fn send_request(&mut self, token: &str) -> i32 {
        (self.before_send)();
        let sent = self.s3.send_from(
            s3::token_nic(token),
            "GET",
            self.path,
            &[("x-amz-rdma-token", token)],
            &[],
        );
        self.pending = sent.ok();
        // Paired (a window in the token): give up while the server is about to write.
        if decode(token).rkey != 0 {
            -7
        } else {
            let mut r = std::io::BufReader::new(self.pending.take().expect("sent"));
            let resp = s3::read_response(&mut r, false).expect("response");
            self.pending = None;
            self.replies.push(
                resp.header("x-amz-rdma-reply")
                    .unwrap_or_default()
                    .to_string(),
            );
            0
        }
    }

    fn recv_reply(&mut self, buf: &mut [u8]) -> std::result::Result<usize, i32> {
        let r = self.replies.pop().ok_or(-1)?;
        let b = r.as_bytes();
        buf.get_mut(..b.len()).ok_or(-2)?.copy_from_slice(b);
        Ok(b.len())
    }
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn a_late_server_write_after_a_client_side_failure_does_not_land() {
    let env = Env::new(1, &[]);
    let size = 4096;
    let mut buf = vec![0x33u8; size];
    let base = buf.as_mut_ptr() as usize;
    rt().register(base, size, MemoryKind::Host).unwrap();
    let obj = pattern(size, 25);
    assert_eq!(env.s3.put("bkt", "late", &obj).unwrap().status, 200);
    let server = &env.server;
    let mut paired = false;
    let mut client = GiveUp {
        s3: &env.s3,
        path: "/bkt/late",
        // Freeze the server before the paired request: it accepts the connection in the kernel
        // and writes only after hipObjGet has returned.
        before_send: Box::new(|| {
            if paired {
                server.pause(true);
            }
            paired = true;
        }),
        pending: None,
        replies: Vec::new(),
    };
    let e = rt()
        .transfer(TransferKind::Get, base, size, 0, &mut client)
        .unwrap_err();
    assert_eq!(e.code, OpError::S3Error);
    let stream = client.pending.take().expect("the paired request was sent");
    // Now the server wakes up and tries to write the buffer.
    server.pause(false);
    let resp = s3::read_response(&mut std::io::BufReader::new(stream), false).unwrap();
    assert_ne!(
        resp.header("x-amz-rdma-reply"),
        Some("200:"),
        "the server's late write must fail"
    );
    assert!(
        resp.header("x-amz-rdma-reply").is_some_and(|r| r == "500"),
        "reply {:?}",
        resp.header("x-amz-rdma-reply")
    );
    assert!(buf.iter().all(|&b| b == 0x33), "the late write landed");
    // The buffer is usable again at once.
    let (r, _) = get(&env.s3, "late", &mut buf, 0, size);
    r.unwrap();
    assert_eq!(buf, obj);
    rt().deregister(base).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn app_driven_tokens_bind_at_get_and_invalidate_at_put() {
    let env = Env::new(1, &[]);
    let size = 4096;
    let mut buf = vec![0x44u8; size];
    let base = buf.as_mut_ptr() as usize;
    rt().register(base, size, MemoryKind::Host).unwrap();
    let obj = pattern(size, 26);
    assert_eq!(env.s3.put("bkt", "app", &obj).unwrap().status, 200);
    let unpaired = rt().mint_token(base, size, TransferKind::Get).unwrap();
    assert_eq!(decode(&unpaired).rkey, 0);
    assert_eq!(rt().open_token_windows(), 0);
    let reply = replay(&env.s3, "GET", "/bkt/app", &unpaired);
    assert!(reply.starts_with("428:"), "{reply}");
    hipobj::runtime::reply_code(reply.as_bytes()).unwrap();
    let tok = rt().mint_token(base, size, TransferKind::Get).unwrap();
    assert_ne!(decode(&tok).rkey, 0);
    assert_eq!(rt().open_token_windows(), 1);
    let reply = replay(&env.s3, "GET", "/bkt/app", &tok);
    assert!(reply.starts_with("200:"), "{reply}");
    assert_eq!(buf, obj);
    hipobj::runtime::release_token(tok.as_bytes());
    assert_eq!(rt().open_token_windows(), 0);
    // Released: the same token now moves nothing.
    buf.fill(0x44);
    let reply = replay(&env.s3, "GET", "/bkt/app", &tok);
    assert_eq!(reply, "500", "a released token's window must be dead");
    assert!(buf.iter().all(|&b| b == 0x44));
    rt().deregister(base).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn require_mw_succeeds_on_rxe_and_refuses_a_device_used_without_windows() {
    let env = Env::new(1, &[]);
    runtime::shutdown().expect("shutdown");
    let mut cfg = InitConfig {
        gpu_device: -1,
        nic_hint: Some(env.client_dev.clone()),
        ..Default::default()
    };
    cfg.env.max_transfers = 1;
    cfg.env.require_mw = true;
    runtime::init(cfg.clone()).expect("HIPOBJ_REQUIRE_MW on a device with type-2 windows");
    assert_eq!(rt().protection(), hipobj::pool::Protection::Windows);
    runtime::shutdown().expect("shutdown");
    cfg.env.perf_no_mw = true;
    let e = runtime::init(cfg.clone()).unwrap_err();
    assert_eq!(e.code, OpError::RdmaError, "{e}");
    assert!(runtime::current().is_none());
    cfg.env.require_mw = false;
    runtime::init(cfg).unwrap();
    assert_eq!(rt().protection(), hipobj::pool::Protection::Registration);
}

/// What an observer's replay of a victim's token did, seen while the victim's window was bound.
#[derive(Debug, Default)]
struct Replayed {
    replies: Vec<String>,
    victim_untouched: bool,
}

/// The victim transfers `key` (GET into / PUT from `victim`), and while its paired request's window
/// is bound, each observer replays its token in a request of its own (method, path).
fn replay_during(
    env: &Env,
    kind: TransferKind,
    key: &str,
    victim: &mut [u8],
    observers: &[(S3, Option<std::net::IpAddr>, &str)],
) -> Replayed {
    let base = victim.as_mut_ptr() as usize;
    let len = victim.len();
    let before = victim.to_vec();
    let seen = std::cell::RefCell::new(Replayed::default());
    let mut req = match kind {
        TransferKind::Get => RdmaRequest::get(&env.s3, "bkt", key),
        TransferKind::Put => RdmaRequest::put(&env.s3, "bkt", key),
    };
    let method = if kind == TransferKind::Get {
        "GET"
    } else {
        "PUT"
    };
    req.token_filter = Some(Box::new(|token: &str| {
        if decode(token).rkey != 0 {
            let mut seen = seen.borrow_mut();
            for (observer, from, path) in observers {
                let resp = observer
                    .request_from(*from, method, path, &[("x-amz-rdma-token", token)], &[])
                    .expect("observer request");
                seen.replies.push(format!(
                    "{} {}",
                    resp.status,
                    resp.header("x-amz-rdma-reply").unwrap_or("-")
                ));
            }
            // SAFETY: the victim's buffer is registered and alive for the whole transfer; only
            // the server's RDMA could write it, and reading it here races with nothing else.
            let now = unsafe { std::slice::from_raw_parts(base as *const u8, len) };
            seen.victim_untouched = now == before.as_slice();
        }
        token.to_string()
    }));
    rt().transfer(kind, base, len, 0, &mut req)
        .expect("the victim's own transfer");
    drop(req);
    seen.into_inner()
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn a_token_replayed_from_another_address_or_identity_is_refused() {
    let env = Env::new(1, &[]);
    let size = 4096;
    let mut victim = vec![0x11u8; size];
    let base = victim.as_mut_ptr() as usize;
    rt().register(base, size, MemoryKind::Host).unwrap();
    let secret = pattern(size, 31);
    assert_eq!(env.s3.put("bkt", "victim", &secret).unwrap().status, 200);
    let other = S3 {
        signer: Some(s3::sigv4::OTHER_SIGNER),
        ..env.s3
    };
    assert!(other.create_bucket("obs").unwrap().status < 300);
    assert_eq!(
        other.put("obs", "junk", &pattern(size, 32)).unwrap().status,
        200
    );
    assert_eq!(
        env.s3
            .put("bkt", "junk", &pattern(size, 32))
            .unwrap()
            .status,
        200
    );
    let nic = s3::token_nic(&rt().mint_token(base, size, TransferKind::Get).unwrap());
    // Pair the victim's connection first.
    put(&env.s3, "pairing", &victim, 0, size).0.unwrap();
    let observers = [
        // Same identity, from loopback (not the GID's address).
        (env.s3, None, "/bkt/junk"),
        // Another identity, from the victim's own NIC address, on its own bucket.
        (other, nic, "/obs/junk"),
    ];
    let got = replay_during(&env, TransferKind::Get, "victim", &mut victim, &observers);
    println!("replayed GET token: {:?}", got.replies);
    assert_eq!(
        got.replies[0], "403 403",
        "another address: GID is not the peer"
    );
    assert!(
        got.replies[1].ends_with(" 428") || got.replies[1].contains("428:"),
        "another identity: unpaired under its own key, {:?}",
        got.replies[1]
    );
    assert!(
        got.victim_untouched,
        "a replayed GET token wrote the victim's buffer"
    );
    assert_eq!(victim, secret, "the victim's own GET still works");
    // PUT: the observers try to read the victim's buffer into objects of their own.
    let observers = [
        (env.s3, None, "/bkt/stolen-a"),
        (other, nic, "/obs/stolen-b"),
    ];
    let got = replay_during(
        &env,
        TransferKind::Put,
        "victim-put",
        &mut victim,
        &observers,
    );
    println!("replayed PUT token: {:?}", got.replies);
    assert_eq!(got.replies[0], "403 403");
    assert!(got.replies[1].contains("428"), "{:?}", got.replies[1]);
    for (s3, path) in [(env.s3, ("bkt", "stolen-a")), (other, ("obs", "stolen-b"))] {
        let r = s3.get(path.0, path.1).unwrap();
        assert!(
            r.status != 200 || r.body != secret,
            "a replayed PUT token read the victim's buffer into {path:?}"
        );
    }
    rt().deregister(base).unwrap();
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn with_the_gid_check_relaxed_the_pairing_key_still_refuses_another_address() {
    let env = Env::new(1, &["--allow-gid-peer-mismatch"]);
    let size = 4096;
    let mut victim = vec![0x22u8; size];
    let base = victim.as_mut_ptr() as usize;
    rt().register(base, size, MemoryKind::Host).unwrap();
    let secret = pattern(size, 33);
    assert_eq!(env.s3.put("bkt", "victim", &secret).unwrap().status, 200);
    assert_eq!(
        env.s3
            .put("bkt", "junk", &pattern(size, 34))
            .unwrap()
            .status,
        200
    );
    put(&env.s3, "pairing", &victim, 0, size).0.unwrap();
    let observers = [(env.s3, None, "/bkt/junk")];
    let got = replay_during(&env, TransferKind::Get, "victim", &mut victim, &observers);
    println!("replayed GET token, GID check off: {:?}", got.replies);
    assert!(got.replies[0].contains("428"), "{:?}", got.replies[0]);
    assert!(got.victim_untouched);
    let observers = [(env.s3, None, "/bkt/stolen")];
    let got = replay_during(
        &env,
        TransferKind::Put,
        "victim-put",
        &mut victim,
        &observers,
    );
    assert!(got.replies[0].contains("428"), "{:?}", got.replies[0]);
    let r = env.s3.get("bkt", "stolen").unwrap();
    assert!(r.status != 200 || r.body != secret);
    rt().deregister(base).unwrap();
}
