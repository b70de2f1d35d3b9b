//! hipobj-rc-v2 over real RDMA (needs a verbs device, e.g. Soft-RoCE `rxe0` in the lane):
//! starts `hipobj-server --device $HIPOBJ_TEST_RDMA_DEVICE` and plays a v2 client with
//! `hipobj::verbs` and the one codec (`hipobj::rcv2`): PREPARE -> a QP of its own connected with
//! `verbs::rc` -> READY -> the server's WRITE_WITH_IMM (GET) or the client's WRITE_WITH_IMM into
//! the server's staging window (PUT) -> FINAL. Then the session rules with real verbs: replays
//! from another identity or address and forged cookies move nothing; an expired session's
//! window refuses the client's write.
//!
//! Ignored by default; run with
//! `HIPOBJ_TEST_RDMA_DEVICE=rxe0 cargo test -p hipobj-server --test rcv2_e2e -- --ignored`.

mod common;

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use common::sigv4::{Placement, OTHER_SIGNER};
use common::{pattern, Response, Server};
use hipobj::checksum::CrcAlgo;
use hipobj::rcv2::{
    self, Cookie, FinalAnswer, Op, PrepareAnswer, PrepareRequest, Psn, ReadyRequest, Target,
};
use hipobj::token::{Token, Transport};
use hipobj::verbs::{
    self, Access, BindRange, Device, Lib, Mr, QpCaps, RcPeer, RcQp, RdmaOp, WC_BIND_MW,
    WC_RECV_RDMA_WITH_IMM,
};

const WAIT: Duration = Duration::from_secs(5);

/// One v2 transfer's client side: a buffer, its registration (no remote rights) and a QP.
struct V2Client {
    dev: Arc<Device>,
    // Declared before `buf`: deregistered first.
    qp: RcQp,
    mr: Mr,
    buf: Box<[u8]>,
    psn: Psn,
    cookie: Cookie,
}

impl V2Client {
    fn new(dev: &Arc<Device>, len: usize) -> V2Client {
        let buf = vec![0u8; len].into_boxed_slice();
        // SAFETY: `buf` lives in the same struct and is dropped after `mr` (field order).
        let mr = unsafe {
            dev.register(
                buf.as_ptr() as usize,
                len,
                Access::LOCAL_WRITE | Access::MW_BIND,
            )
        }
        .expect("register");
        let mut qp = dev
            .create_rc_qp(QpCaps {
                max_send_wr: 4,
                max_recv_wr: 2,
                cq_depth: 8,
            })
            .expect("qp");
        qp.to_init(Access::REMOTE_WRITE).expect("INIT");
        V2Client {
            dev: Arc::clone(dev),
            qp,
            mr,
            buf,
            psn: Psn::random(),
            cookie: Cookie::random(),
        }
    }

    fn prepare(&self, op: Op, bucket: &str, key: &str, size: u64, offset: u64) -> PrepareRequest {
        PrepareRequest {
            token: Token {
                transport: Transport::Rc,
                qp_num: self.qp.qp_num(),
                gid: self.dev.port().gid,
                rkey: 0,
                remote_addr: 0,
                length: 0,
                port: self.dev.port().port,
                lid: 0,
            },
            psn: self.psn,
            cookie: self.cookie,
            op,
            target: Target {
                bucket: bucket.into(),
                key: key.into(),
                query: Vec::new(),
            },
            size,
            offset,
        }
    }

    /// INIT -> RTR -> RTS aimed at the server QP of the PREPARE answer.
    fn connect(&mut self, a: &PrepareAnswer) {
        let peer = RcPeer {
            qp_num: a.server.qp_num,
            gid: a.server.gid,
        };
        self.qp
            .connect(&peer, a.psn.get(), self.psn.get(), 1)
            .expect("connect");
    }

    /// GET: a window over the first `len` bytes, remote write only, and one receive for the
    /// server's WRITE_WITH_IMM. Returns the window's rkey.
    fn expose(&mut self, len: u64) -> (verbs::Mw, u32) {
        let mut mw = self.dev.alloc_mw().expect("alloc_mw");
        let range = BindRange {
            mr: &self.mr,
            addr: self.mr.addr() as u64,
            len,
            access: Access::REMOTE_WRITE,
        };
        let rkey = self.qp.post_bind_mw(1, &mw, &range).expect("bind");
        let c = self.qp.wait_completion(1, WAIT).expect("bind completion");
        assert!(c.is_success() && c.opcode == WC_BIND_MW, "{c:?}");
        self.qp.bound(&mut mw, rkey);
        self.qp.post_recv(2, None).expect("post_recv");
        (mw, rkey)
    }

    fn ready(&self, a: &PrepareAnswer, rkey: u32) -> ReadyRequest {
        ReadyRequest {
            session: a.session,
            cookie: self.cookie,
            qpn: self.qp.qp_num(),
            mr_addr: self.mr.addr() as u64,
            mr_rkey: rkey,
        }
    }
}

fn prepared(server: &Server, req: &PrepareRequest) -> PrepareAnswer {
    let r = server.request("POST", rcv2::PREPARE_PATH, &req.headers(), b"");
    assert_eq!(r.status, 200, "PREPARE: {}", r.text());
    PrepareAnswer::from_headers(|n| r.header(n)).expect("PREPARE answer")
}

fn final_answer(r: &Response) -> FinalAnswer {
    FinalAnswer::from_headers(|n| r.header(n)).expect("FINAL answer")
}

fn open_device() -> (String, Arc<Device>) {
    let name = std::env::var("HIPOBJ_TEST_RDMA_DEVICE").expect("HIPOBJ_TEST_RDMA_DEVICE");
    let lib = Lib::load().expect("libibverbs");
    let dev = Device::open(&lib, &name).expect("device");
    (name, dev)
}

fn gid_ipv4(dev: &Device) -> IpAddr {
    match Ipv6Addr::from(dev.port().gid).to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => panic!("the device's GID is not IPv4-mapped"),
    }
}

fn lane_server(dev: &Device, extra: &[&str]) -> Server {
    let server = Server::start_listening("0.0.0.0:0", extra);
    server.send_from(Some(gid_ipv4(dev)));
    server
}

#[test]
#[ignore = "needs an RDMA device: set HIPOBJ_TEST_RDMA_DEVICE (e.g. rxe0) and pass --ignored"]
fn v2_get_and_put_over_real_rdma() {
    let (name, dev) = open_device();
    let server = lane_server(
        &dev,
        &[
            "--device",
            &name,
            "--chunk-bytes",
            "1048576",
            "--watchdog-ms",
            "3000",
        ],
    );
    assert_eq!(server.request("PUT", "/bkt", &[], b"").status, 200);
    let data = pattern(3 * 1024 * 1024 + 123);
    assert_eq!(server.request("PUT", "/bkt/big", &[], &data).status, 200);

    for (offset, size) in [(0u64, data.len() as u64), (1_000_000, 1), (5000, 4096)] {
        let mut c = V2Client::new(&dev, size as usize);
        let a = prepared(&server, &c.prepare(Op::Get, "bkt", "big", size, offset));
        assert_eq!(a.staging, None);
        c.connect(&a);
        let (_mw, rkey) = c.expose(size);
        let t = std::time::Instant::now();
        let r = server.request("POST", rcv2::READY_PATH, &c.ready(&a, rkey).headers(), b"");
        eprintln!(
            "v2 GET of {size} bytes at {offset} (READY round trip): {:?}",
            t.elapsed()
        );
        assert_eq!(r.status, 200, "READY: {}", r.text());
        let fin = final_answer(&r);
        assert_eq!((fin.cookie, fin.bytes), (c.cookie, size));
        let wc = c.qp.wait_completion(2, WAIT).expect("receive completion");
        assert!(wc.is_success(), "{wc:?}");
        assert_eq!(wc.opcode, WC_RECV_RDMA_WITH_IMM);
        assert_eq!(
            wc.imm_data,
            c.cookie.get(),
            "the last WRITE carries the cookie"
        );
        let range = offset as usize..(offset + size) as usize;
        assert!(
            c.buf[..] == data[range],
            "v2 GET data differs at {offset}+{size}"
        );
        // The whole object: FINAL names its stored CRC64NVME (docs/protocol.md 15.5), which the
        // bytes that landed have; part of it: none.
        let landed = CrcAlgo::Crc64Nvme.encode(CrcAlgo::Crc64Nvme.of(&c.buf));
        let named = fin.checksum.clone();
        if size == data.len() as u64 {
            assert_eq!(
                named,
                Some(format!("CRC64NVME {landed}")),
                "FINAL's checksum of the whole object"
            );
        } else {
            assert_eq!(named, None, "FINAL of a range names no checksum");
        }
    }

    // PUT: the client writes as soon as it has the PREPARE answer (no grace sleep).
    let upload: Vec<u8> = pattern(2 * 1024 * 1024 + 5)
        .iter()
        .map(|b| b ^ 0x3c)
        .collect();
    let mut c = V2Client::new(&dev, upload.len());
    c.buf.copy_from_slice(&upload);
    let a = prepared(
        &server,
        &c.prepare(Op::Put, "bkt", "up", upload.len() as u64, 0),
    );
    let (addr, rkey) = a.staging.expect("PUT staging advertised");
    c.connect(&a);
    let op = RdmaOp::WriteWithImm(c.cookie.get());
    c.qp.post_rdma(op, 7, &c.mr, 0, upload.len() as u32, addr, rkey, true)
        .expect("post WRITE_WITH_IMM");
    let wc = c.qp.wait_completion(7, WAIT).expect("write completion");
    assert!(wc.is_success(), "client WRITE_WITH_IMM: {wc:?}");
    let r = server.request("POST", rcv2::READY_PATH, &c.ready(&a, 0).headers(), b"");
    assert_eq!(r.status, 200, "READY: {}", r.text());
    let fin = final_answer(&r);
    assert_eq!((fin.cookie, fin.bytes), (c.cookie, upload.len() as u64));
    let back = server.get("/bkt/up");
    assert_eq!(back.status, 200);
    assert!(back.body == upload, "v2 PUT stored other bytes");
    assert_eq!(back.header("etag"), fin.etag.as_deref());

    let stats = server.stats();
    for c in [
        "\"v2_prepared\":4",
        "\"v2_ready\":4",
        "\"v2_sessions_live\":0",
    ] {
        assert!(stats.contains(c), "{c} in {stats}");
    }
}

#[test]
#[ignore = "needs an RDMA device: set HIPOBJ_TEST_RDMA_DEVICE (e.g. rxe0) and pass --ignored"]
fn v2_replays_forged_cookies_and_expired_sessions_move_nothing() {
    let (name, dev) = open_device();
    let server = lane_server(&dev, &["--device", &name, "--v2-prepare-ms", "400"]);
    assert_eq!(server.request("PUT", "/bkt", &[], b"").status, 200);
    let data = pattern(64 * 1024);
    assert_eq!(server.request("PUT", "/bkt/obj", &[], &data).status, 200);

    let mut c = V2Client::new(&dev, data.len());
    let a = prepared(
        &server,
        &c.prepare(Op::Get, "bkt", "obj", data.len() as u64, 0),
    );
    c.connect(&a);
    let (_mw, rkey) = c.expose(data.len() as u64);
    let ready = c.ready(&a, rkey).headers();
    // Another identity from the same address: an unknown session.
    let r = server.request_as(
        Some(OTHER_SIGNER),
        Placement::Header,
        "POST",
        rcv2::READY_PATH,
        &ready,
        b"",
    );
    assert_eq!(r.status, 404, "{}", r.text());
    // A forged cookie: 403, the session stays.
    let mut forged = c.ready(&a, rkey);
    forged.cookie = Cookie::new(c.cookie.get() ^ 1).expect("cookie");
    let r = server.request("POST", rcv2::READY_PATH, &forged.headers(), b"");
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(c.buf.iter().all(|&b| b == 0), "nothing moved");
    let r = server.request("POST", rcv2::READY_PATH, &ready, b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(c.buf[..] == data[..]);
    // Replayed after it moved: 409.
    let r = server.request("POST", rcv2::READY_PATH, &ready, b"");
    assert_eq!(r.status, 409, "{}", r.text());

    // A PUT session past T_prep: READY is 404, nothing stored, and its window is gone.
    let mut p = V2Client::new(&dev, 4096);
    p.buf.fill(0xab);
    let a = prepared(&server, &p.prepare(Op::Put, "bkt", "late", 4096, 0));
    let (addr, rkey) = a.staging.expect("staging");
    p.connect(&a);
    // Ordered by the server's own event, its reaper reclaiming the session (v2_expired), not by
    // a sleep past T_prep: polled for at most 10 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !server.stats().contains("\"v2_expired\":1") {
        assert!(
            std::time::Instant::now() < deadline,
            "the session past T_prep (400 ms) was not reclaimed within 10 s: {}",
            server.stats()
        );
        std::thread::sleep(Duration::from_millis(50)); // the polling interval
    }
    let r = server.request("POST", rcv2::READY_PATH, &p.ready(&a, 0).headers(), b"");
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(server.get("/bkt/late").status, 404);
    let op = RdmaOp::WriteWithImm(p.cookie.get());
    p.qp.post_rdma(op, 9, &p.mr, 0, 4096, addr, rkey, true)
        .expect("post");
    let refused = match p.qp.wait_completion(9, WAIT) {
        Ok(wc) => !wc.is_success(),
        Err(_) => true,
    };
    assert!(
        refused,
        "a write into an expired session's window must fail"
    );
    assert_eq!(server.get("/bkt/late").status, 404);
    let stats = server.stats();
    assert!(stats.contains("\"v2_expired\":1"), "{stats}");
}
