//! Real RDMA end to end (needs a verbs device, e.g. Soft-RoCE `rxe0` in the VM of
//! shared/softroce): starts `hipobj-server --device $HIPOBJ_TEST_RDMA_DEVICE` and plays the
//! client side of docs/protocol.md with `hipobj::verbs` directly: token with pairing 0 -> 428 ->
//! connect the client QP to the server QP -> GET/PUT move data by the server's RDMA WRITE/READ.
//!
//! The server runs with authentication on and listens on every address; requests go to (and
//! so come from) the client device's own IPv4 address, as docs/protocol.md rule 9.4 wants. The
//! attacks of section 9 are played from other addresses and as another identity.
//!
//! Ignored by default; run with
//! `HIPOBJ_TEST_RDMA_DEVICE=rxe0 cargo test -p hipobj-server --test rdma_e2e -- --ignored`.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use common::sigv4::{Placement, OTHER_SIGNER};
use common::{pattern, Server};
use hipobj::reply::Reply;
use hipobj::token::{Token, Transport};
use hipobj::verbs::{random_psn, Access, Device, Lib, Mr, QpCaps, RcPeer, RcQp, MAX_PSN};

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

    /// Client rule 5.3: aim the never-paired QP at the server QP, through the project's one RC
    /// setup (`RcQp::connect`, as the client pool pairs): the server's first PSN is its token's
    /// rkey, ours is random.
    fn pair(&mut self, server: &Token) {
        let peer = RcPeer {
            qp_num: server.qp_num,
            gid: server.gid,
        };
        self.qp
            .connect(&peer, server.rkey & MAX_PSN, random_psn(), 1)
            .expect("INIT -> RTR -> RTS");
        self.pairing = server.lid;
    }
}

/// The IPv4 address of the device's RoCE v2 GID (`::ffff:a.b.c.d`).
fn gid_ipv4(dev: &Device) -> IpAddr {
    match Ipv6Addr::from(dev.port().gid).to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => panic!("the device's GID is not IPv4-mapped: {:?}", dev.port().gid),
    }
}

/// A server on every address of this host, with authentication on, and requests sent from the
/// client device's address.
fn lane_server(dev: &Device, extra: &[&str]) -> Server {
    let server = Server::start_listening("0.0.0.0:0", extra);
    server.send_from(Some(gid_ipv4(dev)));
    server
}

/// The device and its verbs, from `HIPOBJ_TEST_RDMA_DEVICE` (which the lane must set).
fn open_device() -> (String, Arc<Device>) {
    let name = std::env::var("HIPOBJ_TEST_RDMA_DEVICE").expect("HIPOBJ_TEST_RDMA_DEVICE");
    let lib = Lib::load().expect("libibverbs");
    let dev = Device::open(&lib, &name).expect("device");
    (name, dev)
}

/// Addresses of this host other than the client's: loopback and the lane's other rxe address
/// (`HIPOBJ_VM_ADDRS="rxe0=169.254.77.1 rxe1=169.254.77.2"`).
fn other_addresses(client: IpAddr) -> Vec<IpAddr> {
    let mut out = vec![IpAddr::V4(Ipv4Addr::LOCALHOST)];
    let lane = std::env::var("HIPOBJ_VM_ADDRS").unwrap_or_default();
    out.extend(
        lane.split_whitespace()
            .filter_map(|kv| kv.split_once('=')?.1.parse::<IpAddr>().ok())
            .filter(|ip| *ip != client),
    );
    out
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
    let (name, dev) = open_device();
    let server = lane_server(&dev, &["--device", &name, "--watchdog-ms", "3000"]);
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
    let (name, dev) = open_device();
    let server = lane_server(
        &dev,
        &[
            "--device",
            &name,
            "--chunk-bytes",
            "262144",
            "--rdma-workers",
            "3",
        ],
    );
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

// --- docs/protocol.md section 9: attacks on another client's transfers ---

/// A token naming the client QP `qp_num` at `::ffff:<ip>`, with `lid` as pairing id.
fn token_for(ip: IpAddr, qp_num: u32, lid: u16, len: u64) -> String {
    let IpAddr::V4(v4) = ip else {
        panic!("IPv4 only")
    };
    Token {
        transport: Transport::Rc,
        qp_num,
        gid: v4.to_ipv6_mapped().octets(),
        rkey: 0x1234,
        remote_addr: 0x7f00_0000_0000,
        length: len,
        port: 1,
        lid,
    }
    .encode_hex()
}

impl Client {
    /// This connection's token with another pairing id (what a replayer would send).
    fn token_with_pairing(&self, len: u64, lid: u16) -> String {
        let mut t = Token::decode_hex(self.token(len).as_bytes()).expect("own token");
        t.lid = lid;
        t.encode_hex()
    }
}

fn stat(stats: &str, name: &str) -> u64 {
    let key = format!("\"{name}\":");
    let at = stats
        .find(&key)
        .unwrap_or_else(|| panic!("{name} in {stats}"))
        + key.len();
    stats[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .expect("number")
}

impl Client {
    /// A token naming memory past the end of our registration: the server's RDMA fails.
    fn token_outside(&self, len: u64) -> String {
        let mut t = Token::decode_hex(self.token(len).as_bytes()).expect("own token");
        t.remote_addr += self.buf.len() as u64;
        t.encode_hex()
    }

    /// Send `method` with our token; pair first when the server asks (428). A 428 after we were
    /// paired means the server destroyed our pairing: start over with a fresh QP.
    fn send(
        &mut self,
        server: &Server,
        method: &str,
        target: &str,
        len: u64,
        range: Option<&str>,
    ) -> common::Response {
        for _ in 0..3 {
            let mut headers = vec![("x-amz-rdma-token", self.token(len))];
            if let Some(r) = range {
                headers.push(("range", r.to_string()));
            }
            let r = server.request(method, target, &headers, b"");
            if r.status != 428 {
                return r;
            }
            let Reply::PairingNeeded(st) = reply(&r) else {
                panic!("428 without a server token")
            };
            if self.pairing != 0 {
                self.qp = Client::fresh_qp(&self.dev);
                self.pairing = 0;
                continue;
            }
            self.pair(&st);
        }
        panic!("no pairing after three tries");
    }
}

/// Pipelined GET and PUT (chunks of 256 KiB, 4 in flight, 8 staging slots reused many times):
/// every byte exact, whole objects and ranges across chunk boundaries, odd sizes, one-chunk
/// transfers; GETs longer than a chunk sent straight from the object's registered file pages
/// (4 of them here) where the kernel registers read-only file pages (6.2 and later), else the
/// first refused and all copied; all of them through the staging copy with `--copy-gets`.
#[test]
#[ignore = "needs an RDMA device: set HIPOBJ_TEST_RDMA_DEVICE (e.g. rxe0) and pass --ignored"]
fn pipelined_get_and_put_are_byte_exact_with_ranges() {
    let name = std::env::var("HIPOBJ_TEST_RDMA_DEVICE").expect("HIPOBJ_TEST_RDMA_DEVICE");
    let lib = Lib::load().expect("libibverbs");
    let dev = Device::open(&lib, &name).expect("device");
    let by_default = match kernel_release() >= (6, 2) {
        true => (4, 0),
        false => (0, 1),
    };
    for (copy, expected) in [(None, by_default), (Some("--copy-gets"), (0, 0))] {
        let mut args = vec![
            "--device",
            &name,
            "--chunk-bytes",
            "262144",
            "--wr-depth",
            "4",
        ];
        args.extend(copy);
        let stats = pipelined_gets_and_puts(&dev, &args);
        let seen = (
            stat(&stats, "file_registrations"),
            stat(&stats, "file_registrations_refused"),
        );
        assert_eq!(seen, expected, "{args:?}: {stats}");
    }
}

/// The running kernel's (major, minor).
fn kernel_release() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    let mut parts = release.trim().split(['.', '-', '+']);
    let mut next = || {
        parts
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a version")
    };
    (next(), next())
}

/// The GETs and PUTs of [`pipelined_get_and_put_are_byte_exact_with_ranges`] on a server with
/// `args`; its statistics.
fn pipelined_gets_and_puts(dev: &Arc<Device>, args: &[&str]) -> String {
    let server = lane_server(dev, args);
    assert_eq!(server.request("PUT", "/bkt", &[], b"").status, 200);
    let size = 9 * 1024 * 1024 + 123;
    let data = pattern(size);
    assert_eq!(server.request("PUT", "/bkt/big", &[], &data).status, 200);
    let mut c = Client::new(dev, 10 * 1024 * 1024);
    let len = c.buf.len() as u64;

    let r = c.send(&server, "GET", "/bkt/big", len, None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(c.buf[..size] == data[..], "pipelined GET differs");

    for (range, first, last) in [
        ("bytes=262143-1048577", 262_143, 1_048_577),
        ("bytes=-1000", size - 1000, size - 1),
        ("bytes=9000000-", 9_000_000, size - 1),
        ("bytes=5-5", 5, 5),
    ] {
        c.buf.fill(0);
        let r = c.send(&server, "GET", "/bkt/big", len, Some(range));
        assert_eq!(r.status, 206, "{range}: {}", r.text());
        let n = last - first + 1;
        assert!(c.buf[..n] == data[first..=last], "{range}: bytes differ");
        assert!(
            c.buf[n..].iter().all(|&b| b == 0),
            "{range}: wrote past the range"
        );
    }

    for up_len in [5 * 1024 * 1024 + 13, 262_144, 1] {
        let upload: Vec<u8> = pattern(up_len).iter().map(|b| b ^ 0xa5).collect();
        c.buf[..up_len].copy_from_slice(&upload);
        let key = format!("/bkt/up-{up_len}");
        let r = c.send(&server, "PUT", &key, up_len as u64, None);
        assert_eq!(r.status, 200, "PUT {up_len}: {}", r.text());
        assert!(
            server.get(&key).body == upload,
            "PUT {up_len} stored other bytes"
        );
        c.buf.fill(0);
        let r = c.send(&server, "GET", &key, len, None);
        assert_eq!(r.status, 200);
        assert!(
            c.buf[..up_len] == upload[..],
            "GET after PUT {up_len} differs"
        );
    }
    let stats = server.stats();
    assert_eq!(stat(&stats, "replies_500"), 0, "{stats}");
    assert_eq!(stat(&stats, "pairings_created"), 1, "{stats}");
    assert!(server.stop().success());
    stats
}

/// A PUT whose RDMA READs fail (the token names memory outside the client's registration):
/// 500, nothing stored (an older object under the key is untouched, a new key stays absent),
/// every flush of the failed multi-WR transfer counted (no flush wait ran out), and the pairing
/// destroyed (the next request pairs again).
#[test]
#[ignore = "needs an RDMA device: set HIPOBJ_TEST_RDMA_DEVICE (e.g. rxe0) and pass --ignored"]
fn failed_pipelined_put_stores_nothing() {
    let name = std::env::var("HIPOBJ_TEST_RDMA_DEVICE").expect("HIPOBJ_TEST_RDMA_DEVICE");
    let lib = Lib::load().expect("libibverbs");
    let dev = Device::open(&lib, &name).expect("device");
    let server = lane_server(
        &dev,
        &[
            "--device",
            &name,
            "--chunk-bytes",
            "262144",
            "--wr-depth",
            "4",
            "--watchdog-ms",
            "5000",
        ],
    );
    assert_eq!(server.request("PUT", "/bkt", &[], b"").status, 200);
    let old = pattern(1000);
    assert_eq!(server.request("PUT", "/bkt/keep", &[], &old).status, 200);
    let mut c = Client::new(&dev, 4 * 1024 * 1024);
    // Pair with a good request first.
    let r = c.send(&server, "GET", "/bkt/keep", 1 << 20, None);
    assert_eq!(r.status, 200, "{}", r.text());

    for key in ["/bkt/keep", "/bkt/fresh"] {
        let bad = c.token_outside(3 * 1024 * 1024);
        let started = std::time::Instant::now();
        let r = server.request("PUT", key, &[("x-amz-rdma-token", bad)], b"");
        eprintln!(
            "failed RDMA PUT {key} answered after {:?}",
            started.elapsed()
        );
        assert_eq!(r.status, 500, "{key}: {}", r.text());
        assert_eq!(reply(&r), Reply::Code(500));
        // The pairing is gone: the client pairs again for the next request.
        let r = c.send(&server, "GET", "/bkt/keep", 1 << 20, None);
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert!(
        server.get("/bkt/keep").body == old,
        "the older object changed"
    );
    assert_eq!(
        server.get("/bkt/fresh").status,
        404,
        "a failed PUT stored something"
    );
    let stats = server.stats();
    assert_eq!(stat(&stats, "pairings_failed"), 2, "{stats}");
    assert!(stat(&stats, "completion_errors") >= 2, "{stats}");
    assert_eq!(stat(&stats, "flush_timeouts"), 0, "{stats}");
    assert!(server.stop().success());
}

/// While a transfer holds a pairing key, a second request naming the same client QP gets 503 at
/// once (with Retry-After), and the running transfer completes untouched.
#[test]
#[ignore = "needs an RDMA device: set HIPOBJ_TEST_RDMA_DEVICE (e.g. rxe0) and pass --ignored"]
fn a_request_for_a_busy_pairing_key_gets_503_at_once() {
    let name = std::env::var("HIPOBJ_TEST_RDMA_DEVICE").expect("HIPOBJ_TEST_RDMA_DEVICE");
    let lib = Lib::load().expect("libibverbs");
    let dev = Device::open(&lib, &name).expect("device");
    let server = lane_server(
        &dev,
        &[
            "--device",
            &name,
            "--chunk-bytes",
            "262144",
            "--wr-depth",
            "2",
        ],
    );
    assert_eq!(server.request("PUT", "/bkt", &[], b"").status, 200);
    let size = 32 * 1024 * 1024;
    let data = pattern(size);
    assert_eq!(server.request("PUT", "/bkt/big", &[], &data).status, 200);
    let mut c = Client::new(&dev, size);
    let r = c.send(&server, "GET", "/bkt/big", size as u64, None);
    assert_eq!(r.status, 200, "{}", r.text());
    let token = c.token(size as u64);
    let mut busy_seen = false;
    for attempt in 0..5 {
        let before = server.stats();
        let (gets, wrs) = (stat(&before, "rdma_gets"), stat(&before, "work_requests"));
        let get = || {
            server.request(
                "GET",
                "/bkt/big",
                &[("x-amz-rdma-token", token.clone())],
                b"",
            )
        };
        let (first, second) = std::thread::scope(|s| {
            let running = s.spawn(get);
            // Wait until the first transfer is posting work requests, then ask again.
            let second = loop {
                let now = server.stats();
                if stat(&now, "rdma_gets") > gets {
                    break None; // it finished before we looked: try again
                }
                if stat(&now, "work_requests") > wrs {
                    break Some(get());
                }
            };
            (running.join().expect("first request"), second)
        });
        let Some(second) = second else {
            eprintln!("attempt {attempt}: the first GET finished before the second was sent");
            continue;
        };
        assert_eq!(first.status, 200, "the running transfer: {}", first.text());
        if second.status == 200 {
            eprintln!("attempt {attempt}: the first GET finished before the second arrived");
            continue;
        }
        assert_eq!(second.status, 503, "{}", second.text());
        assert_eq!(reply(&second), Reply::Code(503));
        assert_eq!(second.header("retry-after"), Some("1"));
        busy_seen = true;
        break;
    }
    assert!(busy_seen, "never caught the first transfer running");
    assert!(c.buf[..] == data[..], "the running GET's bytes differ");
    let stats = server.stats();
    assert!(stat(&stats, "busy_key_rejections") >= 1, "{stats}");
    assert_eq!(stat(&stats, "replies_500"), 0, "{stats}");
}

#[test]
#[ignore = "needs an RDMA device: set HIPOBJ_TEST_RDMA_DEVICE (e.g. rxe0) and pass --ignored"]
fn a_gid_that_is_not_the_peer_is_403_and_creates_no_server_qp() {
    let (name, dev) = open_device();
    let server = lane_server(&dev, &["--device", &name]);
    assert_eq!(server.request("PUT", "/bkt", &[], b"").status, 200);
    assert_eq!(server.request("PUT", "/bkt/o", &[], b"object").status, 200);
    let c = Client::new(&dev, 1 << 16);
    let me = gid_ipv4(&dev);
    for ip in other_addresses(me) {
        server.send_from(Some(ip));
        for (method, target) in [("GET", "/bkt/o"), ("PUT", "/bkt/new")] {
            let r = server.request(
                method,
                target,
                &[("x-amz-rdma-token", c.token(1 << 16))],
                b"",
            );
            eprintln!(
                "{method} with the GID of {me} over HTTP from {ip}: {}",
                r.status
            );
            assert_eq!(r.status, 403, "{method} from {ip}: {}", r.text());
            assert_eq!(reply(&r), Reply::Code(403));
        }
    }
    server.send_from(Some(me));
    let stats = server.stats();
    assert_eq!(stat(&stats, "pairings_created"), 0, "{stats}");
    assert_eq!(stat(&stats, "pairings_live"), 0, "{stats}");
    assert_eq!(server.request("HEAD", "/bkt/new", &[], b"").status, 404);
    assert!(c.buf.iter().all(|&b| b == 0));
    assert!(server.stop().success());
}

#[test]
#[ignore = "needs an RDMA device: set HIPOBJ_TEST_RDMA_DEVICE (e.g. rxe0) and pass --ignored"]
fn a_replayed_token_reads_and_writes_none_of_the_victims_bytes() {
    const LEN: usize = 64 * 1024;
    let (name, dev) = open_device();
    let server = lane_server(&dev, &["--device", &name, "--watchdog-ms", "3000"]);
    let me = gid_ipv4(&dev);
    // The victim (the test identity) pairs its connection and GETs its object.
    let secret = pattern(LEN);
    assert_eq!(server.request("PUT", "/victim", &[], b"").status, 200);
    assert_eq!(
        server.request("PUT", "/victim/secret", &[], &secret).status,
        200
    );
    let mut c = Client::new(&dev, LEN);
    let r = server.request(
        "GET",
        "/victim/secret",
        &[("x-amz-rdma-token", c.token(LEN as u64))],
        b"",
    );
    let Reply::PairingNeeded(victim_server) = reply(&r) else {
        panic!("expected 428: {}", r.text())
    };
    c.pair(&victim_server);
    let r = server.request(
        "GET",
        "/victim/secret",
        &[("x-amz-rdma-token", c.token(LEN as u64))],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(c.buf[..] == secret[..]);
    // What the victim has in its registered buffer now, and its token as seen on the wire.
    let victim_bytes: Vec<u8> = secret.iter().map(|b| b ^ 0xa5).collect();
    c.buf.copy_from_slice(&victim_bytes);
    let seen = c.token(LEN as u64);
    // The attacker (another identity) has its own bucket and object.
    let evil = vec![0xeeu8; LEN];
    let as_attacker = |method: &str, target: &str, headers: &[(&str, String)], body: &[u8]| {
        server.request_as(
            Some(OTHER_SIGNER),
            Placement::Header,
            method,
            target,
            headers,
            body,
        )
    };
    assert_eq!(as_attacker("PUT", "/attacker", &[], b"").status, 200);
    assert_eq!(as_attacker("PUT", "/attacker/evil", &[], &evil).status, 200);

    // 1. From other addresses (as the attacker, or with the victim's own identity): 403.
    for ip in other_addresses(me) {
        server.send_from(Some(ip));
        for (method, target) in [("GET", "/attacker/evil"), ("PUT", "/attacker/stolen")] {
            let r = as_attacker(method, target, &[("x-amz-rdma-token", seen.clone())], b"");
            eprintln!(
                "replay, attacker identity, {method} from {ip}: {}",
                r.status
            );
            assert_eq!(r.status, 403, "{method} from {ip}: {}", r.text());
        }
        for (method, target) in [("GET", "/victim/secret"), ("PUT", "/victim/overwritten")] {
            let r = server.request(method, target, &[("x-amz-rdma-token", seen.clone())], b"");
            eprintln!("replay, victim identity, {method} from {ip}: {}", r.status);
            assert_eq!(r.status, 403, "{method} from {ip}: {}", r.text());
        }
    }
    // 2. From the victim's own address as another identity: the token names no pairing of the
    //    attacker's key, so it gets its own 428; with that pairing id the server's new QP
    //    reaches nothing (the victim's QP is paired with another server QP and PSN).
    server.send_from(Some(me));
    for (method, target) in [("GET", "/attacker/evil"), ("PUT", "/attacker/stolen")] {
        let r = as_attacker(method, target, &[("x-amz-rdma-token", seen.clone())], b"");
        eprintln!(
            "replay, attacker identity, {method} from the victim's address: {}",
            r.status
        );
        assert_eq!(r.status, 428, "{method}: {}", r.text());
        let Reply::PairingNeeded(own) = reply(&r) else {
            panic!("expected 428:<token>")
        };
        assert_ne!(own.lid, victim_server.lid);
        assert_ne!(own.qp_num, victim_server.qp_num);
        let with_own = c.token_with_pairing(LEN as u64, own.lid);
        let r = as_attacker(method, target, &[("x-amz-rdma-token", with_own)], b"");
        eprintln!(
            "  ... again with its own pairing id {}: {}",
            own.lid, r.status
        );
        assert_ne!(r.status, 200, "{method}: {}", r.text());
        assert!(r.status >= 400, "{method}: {}", r.text());
    }
    assert!(
        c.buf[..] == victim_bytes[..],
        "the victim's buffer was written"
    );
    assert_eq!(
        as_attacker("HEAD", "/attacker/stolen", &[], b"").status,
        404
    );
    assert_eq!(as_attacker("GET", "/attacker/evil", &[], b"").body, evil);

    // 3. The victim's pairing is untouched: its next transfers take one request each.
    let r = server.request(
        "PUT",
        "/victim/mine",
        &[("x-amz-rdma-token", c.token(LEN as u64))],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(reply(&r), Reply::Done(victim_server));
    assert_eq!(server.get("/victim/mine").body, victim_bytes);
    c.buf.fill(0);
    let r = server.request(
        "GET",
        "/victim/secret",
        &[("x-amz-rdma-token", c.token(LEN as u64))],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(c.buf[..] == secret[..]);
    assert!(server.stop().success());
}

#[test]
#[ignore = "needs an RDMA device: set HIPOBJ_TEST_RDMA_DEVICE (e.g. rxe0) and pass --ignored"]
fn spoofed_keys_cannot_tear_down_or_evict_the_victims_pairing() {
    let (name, dev) = open_device();
    let server = lane_server(
        &dev,
        &[
            "--device",
            &name,
            "--max-pairings",
            "8",
            "--max-pairings-per-client",
            "4",
        ],
    );
    let me = gid_ipv4(&dev);
    assert_eq!(server.request("PUT", "/victim", &[], b"").status, 200);
    assert_eq!(
        server
            .request("PUT", "/victim/o", &[], &pattern(4096))
            .status,
        200
    );
    let mut c = Client::new(&dev, 4096);
    let r = server.request(
        "GET",
        "/victim/o",
        &[("x-amz-rdma-token", c.token(4096))],
        b"",
    );
    let Reply::PairingNeeded(victim_server) = reply(&r) else {
        panic!("expected 428: {}", r.text())
    };
    c.pair(&victim_server);
    assert_eq!(
        server
            .request(
                "GET",
                "/victim/o",
                &[("x-amz-rdma-token", c.token(4096))],
                b""
            )
            .status,
        200
    );
    let victim_qpn = c.qp.qp_num();
    let as_attacker = |headers: &[(&str, String)]| {
        server.request_as(
            Some(OTHER_SIGNER),
            Placement::Header,
            "GET",
            "/attacker/o",
            headers,
            b"",
        )
    };
    assert_eq!(
        server
            .request_as(
                Some(OTHER_SIGNER),
                Placement::Header,
                "PUT",
                "/attacker",
                &[],
                b""
            )
            .status,
        200
    );
    assert_eq!(
        server
            .request_as(
                Some(OTHER_SIGNER),
                Placement::Header,
                "PUT",
                "/attacker/o",
                &[],
                b"x"
            )
            .status,
        200
    );
    // From the victim's address: the victim's own (GID, QPN) with pairing 0 (revision 1
    // re-paired, silencing the victim's QP) and with the victim's pairing id, then a flood of
    // made-up QP numbers; from the other address, a flood with that address's GID.
    let mut answers = Vec::new();
    for lid in [0, victim_server.lid] {
        answers.push(
            as_attacker(&[("x-amz-rdma-token", token_for(me, victim_qpn, lid, 4096))]).status,
        );
    }
    for n in 0..20u32 {
        let t = token_for(me, 0x100 + n, 0, 4096);
        answers.push(as_attacker(&[("x-amz-rdma-token", t)]).status);
    }
    let elsewhere = *other_addresses(me).last().expect("an address");
    server.send_from(Some(elsewhere));
    for n in 0..20u32 {
        let qpn = if n == 0 { victim_qpn } else { 0x200 + n };
        let t = token_for(elsewhere, qpn, 0, 4096);
        answers.push(as_attacker(&[("x-amz-rdma-token", t)]).status);
    }
    server.send_from(Some(me));
    eprintln!("spoofed-key answers: {answers:?}");
    assert!(answers.iter().all(|&s| s == 428), "{answers:?}");
    // The victim's next transfer: one request, the same pairing.
    let r = server.request(
        "GET",
        "/victim/o",
        &[("x-amz-rdma-token", c.token(4096))],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(reply(&r), Reply::Done(victim_server));
    assert_eq!(&c.buf[..], &pattern(4096)[..]);
    let stats = server.stats();
    eprintln!("{stats}");
    assert!(
        stat(&stats, "pairings_evicted") >= 30,
        "the flooders evicted their own: {stats}"
    );
    assert!(stat(&stats, "pairings_live") <= 8, "{stats}");
    assert!(server.stop().success());
}

// --- UploadPart by RDMA token ---

/// The text between `<tag>` and `</tag>` in an XML body.
fn xml_value(body: &[u8], tag: &str) -> String {
    let text = String::from_utf8_lossy(body);
    let open = format!("<{tag}>");
    let start = text
        .find(&open)
        .unwrap_or_else(|| panic!("{tag} in {text}"))
        + open.len();
    let end = text[start..]
        .find(&format!("</{tag}>"))
        .unwrap_or_else(|| panic!("</{tag}> in {text}"))
        + start;
    text[start..end].to_string()
}

/// Part `n` of the multipart test: 5 MiB (S3's minimum for all but the last part) with its own
/// bytes.
fn part_bytes(n: usize) -> Vec<u8> {
    pattern(5 * 1024 * 1024)
        .iter()
        .map(|b| b.wrapping_mul(3).wrapping_add(n as u8))
        .collect()
}

/// A multipart upload whose parts 1..=6 come by RDMA READ from three client threads (two parts
/// each, one connection per thread) and whose last part comes by HTTP body: every part is listed
/// with its size and MD5 ETag, CompleteMultipartUpload accepts them, and the object reads back
/// byte-exact. Before that, an RDMA part naming an unknown upload id gets 404 NoSuchUpload with
/// reply 404, creates no pairing and stores nothing.
#[test]
#[ignore = "needs an RDMA device: set HIPOBJ_TEST_RDMA_DEVICE (e.g. rxe0) and pass --ignored"]
fn multipart_upload_with_rdma_parts_from_several_threads() {
    let (name, dev) = open_device();
    let server = lane_server(
        &dev,
        &[
            "--device",
            &name,
            "--chunk-bytes",
            "1048576",
            "--wr-depth",
            "4",
        ],
    );
    assert_eq!(server.request("PUT", "/bkt", &[], b"").status, 200);
    let r = server.request("POST", "/bkt/mp?uploads", &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let id = xml_value(&r.body, "UploadId");

    // Unknown upload id: refused before any pairing, nothing read.
    let mut c = Client::new(&dev, 5 * 1024 * 1024);
    c.buf.copy_from_slice(&part_bytes(1));
    let r = server.request(
        "PUT",
        "/bkt/mp?partNumber=1&uploadId=0123456789abcdef",
        &[("x-amz-rdma-token", c.token(c.buf.len() as u64))],
        b"",
    );
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(reply(&r), Reply::Code(404));
    assert_eq!(xml_value(&r.body, "Code"), "NoSuchUpload");
    assert!(c.buf[..] == part_bytes(1)[..], "the buffer changed");
    let stats = server.stats();
    assert_eq!(stat(&stats, "pairings_created"), 0, "{stats}");
    assert_eq!(stat(&stats, "work_requests"), 0, "{stats}");
    drop(c);

    const THREADS: usize = 3;
    const PER_THREAD: usize = 2;
    let mut etags: Vec<(usize, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (server, dev, id) = (&server, &dev, &id);
                s.spawn(move || {
                    let mut c = Client::new(dev, 5 * 1024 * 1024);
                    let mut etags = Vec::new();
                    for i in 0..PER_THREAD {
                        let n = t * PER_THREAD + i + 1;
                        c.buf.copy_from_slice(&part_bytes(n));
                        let target = format!("/bkt/mp?partNumber={n}&uploadId={id}");
                        let r = c.send(server, "PUT", &target, c.buf.len() as u64, None);
                        assert_eq!(r.status, 200, "part {n}: {}", r.text());
                        assert!(matches!(reply(&r), Reply::Done(_)));
                        let etag = r.header("etag").expect("etag").to_string();
                        etags.push((n, etag));
                    }
                    etags
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect()
    });
    let last = THREADS * PER_THREAD + 1;
    let tail = pattern(1024 * 1024 + 17);
    let r = server.request(
        "PUT",
        &format!("/bkt/mp?partNumber={last}&uploadId={id}"),
        &[],
        &tail,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    etags.push((last, r.header("etag").expect("etag").to_string()));
    etags.sort();
    for (n, etag) in &etags {
        if *n < last {
            let md5 = <md5::Md5 as md5::Digest>::digest(part_bytes(*n));
            assert_eq!(*etag, format!("\"{}\"", hex::encode(md5)), "part {n}");
        }
    }

    let r = server.get(&format!("/bkt/mp?uploadId={id}"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text().matches("<Part>").count(), last, "{}", r.text());
    assert_eq!(
        r.text().matches("<Size>5242880</Size>").count(),
        last - 1,
        "{}",
        r.text()
    );

    let mut complete = String::from("<CompleteMultipartUpload>");
    for (n, etag) in &etags {
        complete.push_str(&format!(
            "<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>"
        ));
    }
    complete.push_str("</CompleteMultipartUpload>");
    let r = server.request(
        "POST",
        &format!("/bkt/mp?uploadId={id}"),
        &[],
        complete.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        xml_value(&r.body, "ETag").ends_with(&format!("-{last}&quot;"))
            || xml_value(&r.body, "ETag").ends_with(&format!("-{last}\"")),
        "{}",
        r.text()
    );

    let mut want: Vec<u8> = (1..last).flat_map(part_bytes).collect();
    want.extend_from_slice(&tail);
    let got = server.get("/bkt/mp");
    assert_eq!(got.status, 200);
    assert_eq!(got.body.len(), want.len());
    assert!(got.body == want, "the assembled object differs");
    let stats = server.stats();
    assert_eq!(
        stat(&stats, "rdma_parts"),
        (THREADS * PER_THREAD) as u64,
        "{stats}"
    );
    assert_eq!(stat(&stats, "pairings_created"), THREADS as u64, "{stats}");
    assert_eq!(stat(&stats, "replies_500"), 0, "{stats}");
    assert!(server.stop().success());
}

/// hipobj-rc-v2 PUT windows go through `hipobj::verbs::Window`: a bind that completes is
/// invalidated and fences nothing; a bind that is not confirmed (here: refused at the post, a
/// window longer than its staging buffer) fences the session's QP at once (ERR), and nothing
/// more is done with its window. (A bind the NIC itself refuses, over a registration without
/// MW_BIND, is covered by the library's lane tests; this server's only such registration, a
/// file's, is refused by the lane's 6.1 kernel.)
#[test]
#[ignore = "needs an RDMA device: set HIPOBJ_TEST_RDMA_DEVICE (e.g. rxe0) and pass --ignored"]
fn a_v2_window_bind_not_confirmed_fences_the_server_qp() {
    use hipobj_server::rdma::port::{Peer, RdmaPort, RdmaQp};
    use hipobj_server::rdma::verbs_port::VerbsPort;
    const LEN: u32 = 4096;
    let wait = std::time::Duration::from_secs(2);
    let name = std::env::var("HIPOBJ_TEST_RDMA_DEVICE").expect("HIPOBJ_TEST_RDMA_DEVICE");
    let port = VerbsPort::open(&name).expect("open the device");
    // Binds are local operations: each QP is aimed at itself, which never answers.
    let connected = || {
        let mut qp = port.create_qp(4).expect("create_qp");
        let peer = Peer {
            gid: port.info().gid,
            qp_num: qp.qp_num(),
        };
        qp.connect(&peer, 0x10, 0x20).expect("connect");
        qp
    };
    let staging = port.alloc_staging(LEN as usize).expect("staging");
    let mut qp = connected();
    let window = qp.bind_window(&staging, LEN, wait).expect("bind");
    assert_ne!(window.rkey, 0);
    qp.invalidate_window(wait).expect("invalidate");
    assert!(
        !qp.is_fenced(),
        "a confirmed bind and invalidation fence nothing"
    );

    let mut qp = connected();
    assert!(
        qp.bind_window(&staging, 2 * LEN, wait).is_err(),
        "a window longer than its staging buffer is never bound"
    );
    assert!(qp.is_fenced(), "the unconfirmed bind fenced the server QP");
    assert!(
        qp.invalidate_window(wait).is_err(),
        "a window of a fenced QP is never invalidated as if it could be"
    );
}
