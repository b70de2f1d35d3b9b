//! Real RDMA end to end (needs a verbs device, e.g. Soft-RoCE `rxe0` in the VM of
//! shared/softroce): starts `hipobj-server --device $HIPOBJ_TEST_RDMA_DEVICE` and plays the
//! client side of PROTOCOL.md with `hipobj::verbs` directly: token with pairing 0 -> 428 ->
//! connect the client QP to the server QP -> GET/PUT move data by the server's RDMA WRITE/READ.
//!
//! Ignored by default; run with
//! `HIPOBJ_TEST_RDMA_DEVICE=rxe0 cargo test -p hipobj-server --test rdma_e2e -- --ignored`.

mod common;

use std::sync::Arc;

use common::{pattern, Server};
use hipobj::reply::Reply;
use hipobj::token::{Token, Transport};
use hipobj::verbs::{Access, Device, Lib, Mr, QpCaps, RcQp, RtrParams, RtsParams};

struct Client {
    dev: Arc<Device>,
    // Declared before `buf`: deregistered first.
    mr: Mr,
    buf: Box<[u8]>,
    qp: RcQp,
    pairing: u16,
}

impl Client {
    fn new(dev: &Arc<Device>, len: usize) -> Client {
        let buf = vec![0u8; len].into_boxed_slice();
        // SAFETY: `buf` lives in the same struct and is dropped after `mr` (field order).
        let mr = unsafe {
            dev.register(
                buf.as_ptr() as usize,
                len,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            )
        }
        .expect("register");
        let qp = Self::fresh_qp(dev);
        Client {
            dev: Arc::clone(dev),
            mr,
            buf,
            qp,
            pairing: 0,
        }
    }

    fn fresh_qp(dev: &Arc<Device>) -> RcQp {
        let mut qp = dev
            .create_rc_qp(QpCaps {
                max_send_wr: 1,
                max_recv_wr: 1,
                cq_depth: 2,
            })
            .expect("qp");
        qp.to_init(Access::REMOTE_WRITE | Access::REMOTE_READ)
            .expect("INIT");
        qp
    }

    fn token(&self, len: u64) -> String {
        Token {
            transport: Transport::Rc,
            qp_num: self.qp.qp_num(),
            gid: self.dev.port().gid,
            rkey: self.mr.rkey(),
            remote_addr: self.mr.addr() as u64,
            length: len,
            port: self.dev.port().port,
            lid: self.pairing,
        }
        .encode_hex()
    }

    /// Client rule 5.3: aim the never-paired QP at the server QP.
    fn pair(&mut self, server: &Token) {
        self.qp
            .to_rtr(&RtrParams {
                dest_qp_num: server.qp_num,
                dest_gid: server.gid,
                rq_psn: server.rkey,
                path_mtu: self.dev.port().active_mtu,
                max_dest_rd_atomic: self.dev.caps().max_qp_rd_atom,
                min_rnr_timer: 12,
            })
            .expect("RTR");
        self.qp
            .to_rts(&RtsParams {
                sq_psn: 0,
                timeout: 14,
                retry_cnt: 6,
                rnr_retry: 6,
                max_rd_atomic: 1,
            })
            .expect("RTS");
        self.pairing = server.lid;
    }
}

fn reply(r: &common::Response) -> Reply {
    Reply::parse(
        r.header("x-amz-rdma-reply")
            .expect("reply header")
            .as_bytes(),
    )
    .expect("valid reply")
}

#[test]
#[ignore = "needs an RDMA device: set HIPOBJ_TEST_RDMA_DEVICE (e.g. rxe0) and pass --ignored"]
fn get_and_put_over_real_rdma() {
    let name = std::env::var("HIPOBJ_TEST_RDMA_DEVICE").expect("HIPOBJ_TEST_RDMA_DEVICE");
    let lib = Lib::load().expect("libibverbs");
    let dev = Device::open(&lib, &name).expect("device");
    let server = Server::start(&[
        "--device",
        &name,
        "--chunk-bytes",
        "1048576",
        "--watchdog-ms",
        "3000",
    ]);
    assert_eq!(server.request("PUT", "/bkt", &[], b"").status, 200);
    let data = pattern(9 * 1024 * 1024 + 123);
    assert_eq!(server.request("PUT", "/bkt/big", &[], &data).status, 200);

    let mut c = Client::new(&dev, 10 * 1024 * 1024);
    let len = c.buf.len() as u64;

    // Unpaired: 428 with the server token; nothing written.
    let r = server.request(
        "GET",
        "/bkt/big",
        &[("x-amz-rdma-token", c.token(len))],
        b"",
    );
    assert_eq!(r.status, 428, "{}", r.text());
    let Reply::PairingNeeded(st) = reply(&r) else {
        panic!("expected 428:<token>")
    };
    assert!(c.buf.iter().all(|&b| b == 0));
    c.pair(&st);

    // Paired GET: the object lands in our buffer.
    let t = std::time::Instant::now();
    let r = server.request(
        "GET",
        "/bkt/big",
        &[("x-amz-rdma-token", c.token(len))],
        b"",
    );
    eprintln!(
        "RDMA GET of {} bytes (incl. HTTP): {:?}",
        data.len(),
        t.elapsed()
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(reply(&r), Reply::Done(st));
    assert_eq!(
        r.header("x-amz-rdma-bytes-transferred"),
        Some(data.len().to_string().as_str())
    );
    assert!(c.buf[..data.len()] == data[..], "RDMA GET data differs");

    // Ranged GET.
    let r = server.request(
        "GET",
        "/bkt/big",
        &[
            ("x-amz-rdma-token", c.token(len)),
            ("range", "bytes=5000000-5999999".into()),
        ],
        b"",
    );
    assert_eq!(r.status, 206);
    assert!(
        c.buf[..1_000_000] == data[5_000_000..6_000_000],
        "ranged data differs"
    );

    // PUT: the server reads our buffer.
    let upload = pattern(3 * 1024 * 1024 + 7)
        .iter()
        .map(|b| b ^ 0x5a)
        .collect::<Vec<u8>>();
    c.buf[..upload.len()].copy_from_slice(&upload);
    let t = std::time::Instant::now();
    let r = server.request(
        "PUT",
        "/bkt/up",
        &[("x-amz-rdma-token", c.token(upload.len() as u64))],
        b"",
    );
    eprintln!(
        "RDMA PUT of {} bytes (incl. HTTP): {:?}",
        upload.len(),
        t.elapsed()
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(reply(&r), Reply::Done(st));
    assert!(r.header("etag").is_some());
    let back = server.get("/bkt/up");
    assert_eq!(back.status, 200);
    assert!(back.body == upload, "RDMA PUT stored other bytes");

    // A second connection pairs independently.
    let mut c2 = Client::new(&dev, 1 << 20);
    let r = server.request(
        "GET",
        "/bkt/up",
        &[("x-amz-rdma-token", c2.token(1 << 20))],
        b"",
    );
    assert_eq!(r.status, 400, "buffer too small for the object");
    let small = b"small object";
    assert_eq!(server.request("PUT", "/bkt/small", &[], small).status, 200);
    let r = server.request(
        "GET",
        "/bkt/small",
        &[("x-amz-rdma-token", c2.token(1 << 20))],
        b"",
    );
    let Reply::PairingNeeded(st2) = reply(&r) else {
        panic!("expected 428")
    };
    assert_ne!(st2.qp_num, st.qp_num);
    c2.pair(&st2);
    let r = server.request(
        "GET",
        "/bkt/small",
        &[("x-amz-rdma-token", c2.token(1 << 20))],
        b"",
    );
    assert_eq!(r.status, 200);
    assert_eq!(&c2.buf[..small.len()], small);

    let stats = server.stats();
    assert!(stats.contains("\"rdma_gets\":3"), "{stats}");
    assert!(stats.contains("\"rdma_puts\":1"), "{stats}");
    assert!(server.stop().success());
}

#[test]
#[ignore = "needs an RDMA device: set HIPOBJ_TEST_RDMA_DEVICE (e.g. rxe0) and pass --ignored"]
fn transfer_into_a_destroyed_client_qp_fails_with_500() {
    let name = std::env::var("HIPOBJ_TEST_RDMA_DEVICE").expect("HIPOBJ_TEST_RDMA_DEVICE");
    let lib = Lib::load().expect("libibverbs");
    let dev = Device::open(&lib, &name).expect("device");
    let server = Server::start(&["--device", &name, "--watchdog-ms", "3000"]);
    assert_eq!(server.request("PUT", "/bkt", &[], b"").status, 200);
    assert_eq!(
        server
            .request("PUT", "/bkt/o", &[], &pattern(100_000))
            .status,
        200
    );

    let mut c = Client::new(&dev, 1 << 20);
    let r = server.request(
        "GET",
        "/bkt/o",
        &[("x-amz-rdma-token", c.token(1 << 20))],
        b"",
    );
    let Reply::PairingNeeded(st) = reply(&r) else {
        panic!("expected 428")
    };
    c.pair(&st);
    // Remember the paired token, then destroy the QP behind it.
    let paired = c.token(1 << 20);
    c.qp = Client::fresh_qp(&dev);
    let started = std::time::Instant::now();
    let r = server.request(
        "GET",
        "/bkt/o",
        &[("x-amz-rdma-token", paired.clone())],
        b"",
    );
    assert_eq!(r.status, 500, "{}", r.text());
    assert_eq!(reply(&r), Reply::Code(500));
    eprintln!("failed transfer answered after {:?}", started.elapsed());
    // The pairing was destroyed: the same token now gets a new pairing.
    let r = server.request("GET", "/bkt/o", &[("x-amz-rdma-token", paired)], b"");
    assert_eq!(r.status, 428);
    let stats = server.stats();
    assert!(stats.contains("\"pairings_failed\":1"), "{stats}");
    assert!(server.stop().success());
}

#[test]
#[ignore = "needs an RDMA device: set HIPOBJ_TEST_RDMA_DEVICE (e.g. rxe0) and pass --ignored"]
fn parallel_connections_each_pair_once_and_move_correct_bytes() {
    let name = std::env::var("HIPOBJ_TEST_RDMA_DEVICE").expect("HIPOBJ_TEST_RDMA_DEVICE");
    let lib = Lib::load().expect("libibverbs");
    let dev = Device::open(&lib, &name).expect("device");
    let server = Server::start(&[
        "--device",
        &name,
        "--chunk-bytes",
        "262144",
        "--rdma-workers",
        "3",
    ]);
    assert_eq!(server.request("PUT", "/bkt", &[], b"").status, 200);
    const CONNS: usize = 4;
    const ROUNDS: usize = 5;
    const SIZE: usize = 1 << 20;
    std::thread::scope(|s| {
        for conn in 0..CONNS {
            let (server, dev) = (&server, &dev);
            s.spawn(move || {
                let mut c = Client::new(dev, SIZE);
                for round in 0..ROUNDS {
                    let key = format!("/bkt/c{conn}-r{round}");
                    let content: Vec<u8> = pattern(SIZE)
                        .iter()
                        .map(|b| b.wrapping_add((conn * 31 + round) as u8))
                        .collect();
                    c.buf.copy_from_slice(&content);
                    let mut r = server.request(
                        "PUT",
                        &key,
                        &[("x-amz-rdma-token", c.token(SIZE as u64))],
                        b"",
                    );
                    if r.status == 428 {
                        assert_eq!(round, 0, "a connection pairs once");
                        let Reply::PairingNeeded(st) = reply(&r) else {
                            panic!("expected 428:<token>")
                        };
                        c.pair(&st);
                        r = server.request(
                            "PUT",
                            &key,
                            &[("x-amz-rdma-token", c.token(SIZE as u64))],
                            b"",
                        );
                    }
                    assert_eq!(r.status, 200, "{}", r.text());
                    c.buf.fill(0);
                    let r = server.request(
                        "GET",
                        &key,
                        &[("x-amz-rdma-token", c.token(SIZE as u64))],
                        b"",
                    );
                    assert_eq!(r.status, 200, "{}", r.text());
                    assert!(
                        c.buf[..] == content[..],
                        "conn {conn} round {round}: data differs"
                    );
                }
            });
        }
    });
    let stats = server.stats();
    assert!(
        stats.contains(&format!("\"pairings_created\":{CONNS}")),
        "{stats}"
    );
    assert!(
        stats.contains(&format!("\"rdma_puts\":{}", CONNS * ROUNDS)),
        "{stats}"
    );
    assert!(
        stats.contains(&format!("\"rdma_gets\":{}", CONNS * ROUNDS)),
        "{stats}"
    );
    assert!(stats.contains("\"replies_500\":0"), "{stats}");
    assert!(server.stop().success());
}
