//! Library overhead and memory-window cost of a warm 4 KiB GET, in the Soft-RoCE lane (real verbs,
//! hipobj-server, issues 9 and 10). Every figure is a ratio measured in one boot:
//!
//! 1. Overhead: the time spent inside `hipObjGet` (the C entry point) outside its two callbacks,
//!    as a median and as a percentage of the median whole transfer, at 1 thread and at 16 threads
//!    (16 connections, each thread its own buffer and keep-alive HTTP connection). Target <= 2 %.
//! 2. Windows: the median 4 KiB GET with type-2 memory windows (bind + invalidate per request)
//!    against the same GET with `HIPOBJ_PERF_NO_MW` (the registration's rkey, revision 1), in
//!    alternating blocks of one process. Target <= 15 % added.
//!
//! The application side is a keep-alive HTTP/1.1 client whose socket is bound to the NIC address
//! of the token (`hipObjTokenClientNic`), as the protocol asks of every client, and which signs
//! each request (SigV4, the token header included) as the test identity. The time it spends
//! signing is callback time, not library time.
//!
//! 3. Breakdown (only in the build with the `stage-timing` feature, which
//!    `benches/run-transfer-overhead` runs after the plain build in the same boot): the median time
//!    per stage of the warm GET (`hipobj_actors::stages`), the library's share of the callback
//!    stage (the adapter around the application's callbacks), what lies outside the marks (the C
//!    boundary), and what one clock read costs here (each stage pays about one).
//!
//! 4. The verbs floor: the two operations revision 2 requires per request (docs/protocol.md 9.7/9.8),
//!    a type-2 window bind and its invalidation, each posted and waited for, on a paired QP of the
//!    client device with nothing else in between (and once more with a loopback TCP round trip
//!    between them, as the HTTP exchange sits between them in a GET), as a share of the 1-thread
//!    transfer median: the part of the overhead no library code can remove.
//!
//! 5. RDMA against plain HTTP (issue 25): the median 4 KiB GET through `hipObjGet` against the
//!    median plain HTTP GET of the same object (body in the response) by the same kind of
//!    keep-alive client bound to the same NIC address, at 1 and at 16 threads, HTTP blocks before
//!    and after the RDMA block. Target: RDMA <= 1.0x HTTP.
//!
//! Usage: transfer_overhead [GETS_PER_BLOCK] [BLOCKS]   (defaults 300, 4; BLOCKS 0 skips part 2)

#[path = "../tests/support/data.rs"]
mod data;
#[path = "../tests/support/s3.rs"]
mod s3;
#[path = "../tests/support/server.rs"]
mod server;

use hipobj::ffi::{hipObjError_t, hipObjGet, hipObjOps_t};
use hipobj::runtime::{self, InitConfig, MemoryKind};
use hipobj_actors::stages::{self, Breakdown, Stage};
use std::ffi::{c_char, c_int, c_void};
use std::io::{BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const SIZE: usize = 4096;

/// One thread's S3 client: a keep-alive connection opened from the token's NIC address.
struct KeepAlive {
    server: SocketAddr,
    path: String,
    conn: Option<BufReader<TcpStream>>,
    reply: Option<String>,
    /// Time spent inside the two callbacks during the current call.
    in_callbacks: Duration,
}

impl KeepAlive {
    fn new(server: SocketAddr, path: String) -> KeepAlive {
        KeepAlive {
            server,
            path,
            conn: None,
            reply: None,
            in_callbacks: Duration::ZERO,
        }
    }

    fn get(&mut self, token: &str) -> std::io::Result<()> {
        let resp = self.exchange(s3::token_nic(token), Some(token))?;
        self.reply = resp.header("x-amz-rdma-reply").map(str::to_string);
        Ok(())
    }

    /// One signed GET of the object from `nic`, with the token header when given.
    fn exchange(
        &mut self,
        nic: Option<IpAddr>,
        token: Option<&str>,
    ) -> std::io::Result<s3::Response> {
        if self.conn.is_none() {
            let stream = s3::connect_from(nic, self.server, Duration::from_secs(5))?;
            stream.set_nodelay(true)?;
            stream.set_read_timeout(Some(Duration::from_secs(30)))?;
            self.conn = Some(BufReader::new(stream));
        }
        let conn = self.conn.as_mut().expect("connected above");
        let host = self.server.to_string();
        let headers: Vec<(&str, &str)> =
            token.map(|t| ("x-amz-rdma-token", t)).into_iter().collect();
        let signed = s3::sigv4::TEST_SIGNER.sign(
            s3::sigv4::Placement::Header,
            "GET",
            &host,
            &self.path,
            &headers,
            &[],
        );
        let mut head = format!(
            "GET {} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n",
            signed.target
        );
        for (k, v) in &headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        for (k, v) in &signed.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        conn.get_mut().write_all(head.as_bytes())?;
        let resp = s3::read_response(conn, false)?;
        if resp
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
        {
            self.conn = None;
        }
        Ok(resp)
    }
}

unsafe extern "C" fn send_request(ctx: *mut c_void, token: *const c_char, len: usize) -> c_int {
    let t = Instant::now();
    // SAFETY: ctx is the &mut KeepAlive passed to hipObjGet by `timed_get` below.
    let client = unsafe { &mut *ctx.cast::<KeepAlive>() };
    // SAFETY: hipObject passes `len` readable bytes of token text.
    let token = unsafe { std::slice::from_raw_parts(token.cast::<u8>(), len) };
    let rc = match std::str::from_utf8(token).map(|t| client.get(t)) {
        Ok(Ok(())) if client.reply.is_some() => 0,
        _ => -1,
    };
    client.in_callbacks += t.elapsed();
    rc
}

unsafe extern "C" fn recv_reply(ctx: *mut c_void, reply: *mut c_char, len: *mut usize) -> c_int {
    let t = Instant::now();
    // SAFETY: as in send_request.
    let client = unsafe { &mut *ctx.cast::<KeepAlive>() };
    let rc = match client.reply.take() {
        // SAFETY: `*len` is the capacity of `reply` (hipobj.h); we write at most that much.
        Some(r) if r.len() <= unsafe { *len } => {
            // SAFETY: as above.
            unsafe {
                std::ptr::copy_nonoverlapping(r.as_ptr(), reply.cast::<u8>(), r.len());
                *len = r.len();
            }
            0
        }
        _ => -1,
    };
    client.in_callbacks += t.elapsed();
    rc
}

/// One timed GET.
#[derive(Clone, Copy)]
struct Sample {
    /// The whole `hipObjGet` call.
    whole: Duration,
    /// Inside `hipObjGet`, outside the two callbacks.
    lib: Duration,
    /// Inside the two callbacks.
    callbacks: Duration,
    /// Per stage (the `stage-timing` build only).
    stages: Option<Breakdown>,
}

/// One GET through the C ABI.
fn timed_get(client: &mut KeepAlive, buf: &mut [u8]) -> Sample {
    let mut ops = hipObjOps_t {
        sendRequest: Some(send_request),
        recvReply: Some(recv_reply),
    };
    client.in_callbacks = Duration::ZERO;
    let t = Instant::now();
    // SAFETY: buf is registered and SIZE bytes long; ops and ctx outlive the call.
    let rc = unsafe {
        hipObjGet(
            std::ptr::null_mut(),
            buf.as_mut_ptr().cast(),
            SIZE,
            0,
            &mut ops,
            (client as *mut KeepAlive).cast(),
        )
    };
    let whole = t.elapsed();
    let stages = stages::take();
    assert_eq!(
        rc,
        hipObjError_t::SUCCESS,
        "hipObjGet failed (last reply {:?})",
        client.reply
    );
    Sample {
        whole,
        lib: whole.saturating_sub(client.in_callbacks),
        callbacks: client.in_callbacks,
        stages,
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Median of `f` over the samples, in microseconds.
fn median_us(samples: &[Sample], f: impl Fn(&Sample) -> Duration) -> f64 {
    let mut v: Vec<Duration> = samples.iter().map(f).collect();
    us(median(&mut v))
}

/// The median cost of one `Instant::now()` here (the stage marks read the clock once each).
fn clock_cost() -> Duration {
    let mut v: Vec<Duration> = (0..2000)
        .map(|_| {
            let t = Instant::now();
            let _ = std::hint::black_box(Instant::now());
            t.elapsed()
        })
        .collect();
    median(&mut v)
}

/// The per-stage medians of a run (the `stage-timing` build), one line per stage.
fn print_breakdown(threads: usize, samples: &[Sample]) {
    if samples.iter().any(|s| s.stages.is_none()) {
        return;
    }
    let ns = |s: &Sample, stage: Stage| {
        Duration::from_nanos(s.stages.map_or(0, |b| b.ns[stage as usize]))
    };
    let marked = |s: &Sample| Duration::from_nanos(s.stages.map_or(0, |b| b.ns.iter().sum()));
    println!("breakdown, {threads:>2} thread(s), median us per stage ({} GETs; each stage includes one clock read of {:.2} us):", samples.len(), us(clock_cost()));
    let mut lib_sum = 0.0;
    for (stage, name) in stages::ALL {
        let m = median_us(samples, |s| ns(s, stage));
        if stage == Stage::Callbacks {
            let adapter = median_us(samples, |s| ns(s, stage).saturating_sub(s.callbacks));
            lib_sum += adapter;
            println!(
                "  {name:<12} {m:>9.1}  (application {:.1}, library adapter {adapter:.1})",
                median_us(samples, |s| s.callbacks)
            );
        } else {
            lib_sum += m;
            println!("  {name:<12} {m:>9.1}");
        }
    }
    let outside = median_us(samples, |s| s.whole.saturating_sub(marked(s)));
    let polls = samples
        .iter()
        .map(|s| s.stages.map_or(0, |b| u64::from(b.empty_polls)))
        .sum::<u64>();
    let yields = samples
        .iter()
        .map(|s| s.stages.map_or(0, |b| u64::from(b.yields)))
        .sum::<u64>();
    println!(
        "  {:<12} {outside:>9.1}  (C boundary, argument checks, runtime load)\n  sum of library medians {:.1} us; measured library median {:.1} us; completion waits: {:.2} empty polls and {:.2} yields per GET",
        "outside",
        lib_sum + outside,
        median_us(samples, |s| s.lib),
        polls as f64 / samples.len() as f64,
        yields as f64 / samples.len() as f64,
    );
}

fn init(client_dev: &str, connections: usize, no_mw: bool) {
    let mut cfg = InitConfig {
        gpu_device: -1,
        nic_hint: Some(client_dev.to_string()),
        ..Default::default()
    };
    cfg.env.max_transfers = connections;
    cfg.env.perf_no_mw = no_mw;
    // HIPOBJ_REMOTE_INV=1: the server's SEND_WITH_INV ends each window (benches/run-transfer-overhead).
    cfg.env.remote_inv = hipobj::env::EnvConfig::from_env().remote_inv;
    runtime::init(cfg).unwrap_or_else(|e| panic!("hipObjInit: {e}"));
}

/// `threads` threads doing `gets` warm GETs each; all (whole, overhead) samples.
fn run_gets(server: SocketAddr, threads: usize, gets: usize, expect: &[u8]) -> Vec<Sample> {
    let rt = runtime::current().expect("initialised");
    std::thread::scope(|sc| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let rt = rt.clone();
                sc.spawn(move || {
                    let mut buf = vec![0u8; SIZE];
                    rt.register(buf.as_mut_ptr() as usize, SIZE, MemoryKind::Host)
                        .expect("register");
                    let mut client = KeepAlive::new(server, "/bench/obj".into());
                    // Warm: pair this thread's connection and open its HTTP connection.
                    for _ in 0..3 {
                        timed_get(&mut client, &mut buf);
                    }
                    assert_eq!(buf, expect, "GET bytes");
                    let samples: Vec<_> = (0..gets)
                        .map(|_| timed_get(&mut client, &mut buf))
                        .collect();
                    assert_eq!(buf, expect, "GET bytes");
                    rt.deregister(buf.as_mut_ptr() as usize)
                        .expect("deregister");
                    samples
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker"))
            .collect()
    })
}

/// The NIC address the pool's tokens carry (what `hipObjTokenClientNic` gives an application).
fn client_nic() -> Option<IpAddr> {
    let rt = runtime::current()?;
    hipobj::token::gid_ipv4(&rt.device().port().gid).map(IpAddr::V4)
}

/// Part 5: `threads` threads doing `gets` timed plain HTTP GETs each (keep-alive, from `nic`,
/// signed like the RDMA requests); every GET's time.
fn plain_http(
    server: SocketAddr,
    nic: Option<IpAddr>,
    threads: usize,
    gets: usize,
    expect: &[u8],
) -> Vec<Duration> {
    std::thread::scope(|sc| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                sc.spawn(move || {
                    let mut client = KeepAlive::new(server, "/bench/obj".into());
                    let mut one = || {
                        let t = Instant::now();
                        let resp = client.exchange(nic, None).expect("plain GET");
                        let took = t.elapsed();
                        assert_eq!((resp.status, &resp.body[..]), (200, expect), "plain GET");
                        took
                    };
                    for _ in 0..3 {
                        one();
                    }
                    (0..gets).map(|_| one()).collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker"))
            .collect()
    })
}

/// Part 5 at `threads` threads: plain HTTP blocks before and after one RDMA block (parts 1/3).
fn rdma_against_http(
    server: SocketAddr,
    client_dev: &str,
    threads: usize,
    gets: usize,
    obj: &[u8],
) -> Duration {
    init(client_dev, threads.max(1), false);
    let nic = client_nic();
    runtime::shutdown().expect("shutdown");
    let mut http = plain_http(server, nic, threads, gets / 2, obj);
    let mut whole = overhead(server, client_dev, threads, gets, obj);
    let rdma = median(&mut whole);
    http.extend(plain_http(server, nic, threads, gets / 2, obj));
    let h = median(&mut http);
    // Every GET of both samples; the spread is printed beside the ratio of the medians.
    println!(
        "rdma vs http, {threads:>2} thread(s): median 4 KiB GET {:.1} us by RDMA, {:.1} us by plain HTTP (keep-alive, from {}): RDMA/HTTP = {:.3} ({} HTTP GETs), RDMA p10-p90 {:.1}-{:.1} us, HTTP p10-p90 {:.1}-{:.1} us ({} RDMA GETs, none left out)",
        us(rdma),
        us(h),
        nic.map_or("any address".to_string(), |a| a.to_string()),
        rdma.as_secs_f64() / h.as_secs_f64(),
        http.len(),
        us(decile(&whole, 1)),
        us(decile(&whole, 9)),
        us(decile(&http, 1)),
        us(decile(&http, 9)),
        whole.len(),
    );
    rdma
}

/// The `tenth`-th decile of a sorted sample (1: p10, 9: p90).
fn decile(sorted: &[Duration], tenth: usize) -> Duration {
    sorted[(sorted.len() * tenth / 10).min(sorted.len() - 1)]
}

/// The overhead at `threads` threads; every whole transfer, sorted.
fn overhead(
    server: SocketAddr,
    client_dev: &str,
    threads: usize,
    gets: usize,
    obj: &[u8],
) -> Vec<Duration> {
    init(client_dev, threads.max(1), false);
    let samples = run_gets(server, threads, gets, obj);
    runtime::shutdown().expect("shutdown");
    let mut whole: Vec<_> = samples.iter().map(|s| s.whole).collect();
    let mut lib: Vec<_> = samples.iter().map(|s| s.lib).collect();
    let (w, l) = (median(&mut whole), median(&mut lib));
    let p99 = lib[lib.len() * 99 / 100];
    println!(
        "overhead, {threads:>2} thread(s): inside hipObjGet outside the callbacks median {:.1} us (p99 {:.1} us) = {:.2} % of the median transfer {:.1} us ({} GETs)",
        us(l),
        us(p99),
        100.0 * l.as_secs_f64() / w.as_secs_f64(),
        us(w),
        samples.len()
    );
    print_breakdown(threads, &samples);
    whole
}

/// A loopback TCP echo of one byte (stands in for the HTTP exchange between bind and invalidate).
struct Echo {
    stream: TcpStream,
}

impl Echo {
    fn start() -> Echo {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind echo");
        let addr = listener.local_addr().expect("echo address");
        std::thread::spawn(move || {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            let _ = s.set_nodelay(true);
            let mut b = [0u8; 1];
            while s.read_exact(&mut b).is_ok() && s.write_all(&b).is_ok() {}
        });
        let stream = TcpStream::connect(addr).expect("connect echo");
        stream.set_nodelay(true).expect("nodelay");
        Echo { stream }
    }

    fn round_trip(&mut self) {
        let mut b = [7u8; 1];
        self.stream.write_all(&b).expect("echo write");
        self.stream.read_exact(&mut b).expect("echo read");
    }
}

/// Part 4: median bind (post + wait) and invalidation (post + wait) on a paired QP of
/// `client_dev`, `n` times each way; printed against `transfer` (the 1-thread median GET).
fn verbs_floor(client_dev: &str, n: usize, transfer: Duration) {
    use hipobj::verbs::{self, Access, BindRange, Device, Lib, QpCaps};
    let lib = Lib::load().expect("libibverbs");
    let device = Device::open(&lib, client_dev).expect("open the client device");
    let caps = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 1,
        cq_depth: 8,
    };
    let access = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE;
    let mut a = device.create_rc_qp(caps).expect("QP a");
    let mut b = device.create_rc_qp(caps).expect("QP b");
    let port = device.port().clone();
    let (qpn_a, qpn_b) = (a.qp_num(), b.qp_num());
    // Paired through the project's one RC setup, with random starting PSNs, as production pairs.
    let (psn_a, psn_b) = (verbs::random_psn(), verbs::random_psn());
    for (qp, peer, rq_psn, sq_psn) in [(&mut a, qpn_b, psn_b, psn_a), (&mut b, qpn_a, psn_a, psn_b)]
    {
        qp.to_init(access).expect("INIT");
        let peer = verbs::RcPeer {
            qp_num: peer,
            gid: port.gid,
        };
        qp.connect(&peer, rq_psn, sq_psn, 1)
            .expect("INIT -> RTR -> RTS");
    }
    let buf = vec![0u8; SIZE];
    // SAFETY: `buf` outlives `mr` (dropped at the end of this function, after `mr`).
    let mr = unsafe {
        device.register(
            buf.as_ptr() as usize,
            buf.len(),
            Access::LOCAL_WRITE | Access::MW_BIND,
        )
    }
    .expect("register");
    let mut mw = device.alloc_mw().expect("alloc_mw");
    let range = BindRange {
        mr: &mr,
        addr: buf.as_ptr() as u64,
        len: SIZE as u64,
        access: Access::REMOTE_WRITE,
    };
    let limit = Duration::from_secs(2);
    let mut echo = Echo::start();
    for with_tcp in [false, true] {
        let (mut binds, mut invals) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for i in 0..n as u64 {
            let t0 = Instant::now();
            let rkey = a.post_bind_mw(2 * i, &mw, &range).expect("bind");
            let done = a.wait_completion(2 * i, limit).expect("bind completion");
            assert!(
                done.is_success(),
                "bind: {}",
                verbs::wc_status_name(done.status)
            );
            a.bound(&mut mw, rkey);
            let t1 = Instant::now();
            if with_tcp {
                echo.round_trip();
            }
            let t2 = Instant::now();
            a.post_local_inv(2 * i + 1, rkey).expect("invalidate");
            let done = a
                .wait_completion(2 * i + 1, limit)
                .expect("invalidation completion");
            assert!(
                done.is_success(),
                "invalidate: {}",
                verbs::wc_status_name(done.status)
            );
            binds.push(t1 - t0);
            invals.push(t2.elapsed());
        }
        let (bind, inval) = (median(&mut binds), median(&mut invals));
        println!(
            "verbs floor{}: window bind median {:.1} us + invalidation {:.1} us = {:.1} us = {:.2} % of the 1-thread median transfer {:.1} us ({n} each, {client_dev}, paired QP)",
            if with_tcp { " (TCP round trip between)" } else { "" },
            us(bind),
            us(inval),
            us(bind + inval),
            100.0 * (bind + inval).as_secs_f64() / transfer.as_secs_f64(),
            us(transfer),
        );
    }
    drop(mw);
    drop(mr);
    drop(buf);
}

fn main() {
    let args: Vec<String> = std::env::args().filter(|a| !a.starts_with("--")).collect();
    let gets: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(300);
    let blocks: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4);
    let Some((client_dev, server_dev)) = server::device_pair() else {
        eprintln!("transfer_overhead: no RDMA device (run it in the Soft-RoCE lane)");
        std::process::exit(2);
    };
    let srv = server::Server::start(Some(&server_dev), &[]);
    let s3 = s3::S3::new(srv.addr);
    assert!(s3.create_bucket("bench").expect("create bucket").status < 300);
    let obj = data::pattern(SIZE, 0x9e37_79b9);
    assert_eq!(s3.put("bench", "obj", &obj).expect("put").status, 200);
    println!("transfer_overhead: {client_dev} -> {server_dev}, 4 KiB GETs, {gets} per block");

    let transfer = rdma_against_http(srv.addr, &client_dev, 1, gets, &obj);
    rdma_against_http(srv.addr, &client_dev, 16, gets / 4, &obj);
    verbs_floor(&client_dev, gets, transfer);

    if blocks == 0 {
        return;
    }
    // Windows against no windows, alternating blocks in one process.
    let mut with = Vec::new();
    let mut without = Vec::new();
    let mut lib_with = Vec::new();
    let mut lib_without = Vec::new();
    for block in 0..blocks * 2 {
        let no_mw = block % 2 == 1;
        init(&client_dev, 1, no_mw);
        let samples = run_gets(srv.addr, 1, gets, &obj);
        runtime::shutdown().expect("shutdown");
        let (whole, lib) = if no_mw {
            (&mut without, &mut lib_without)
        } else {
            (&mut with, &mut lib_with)
        };
        whole.extend(samples.iter().map(|s| s.whole));
        lib.extend(samples.iter().map(|s| s.lib));
    }
    let (m_with, m_without) = (median(&mut with), median(&mut without));
    println!(
        "windows: time inside hipObjGet outside the callbacks, median {:.1} us with windows, {:.1} us without",
        us(median(&mut lib_with)),
        us(median(&mut lib_without)),
    );
    println!(
        "windows: median 4 KiB GET {:.1} us with bind + invalidate, {:.1} us without (HIPOBJ_PERF_NO_MW): {:+.1} % ({} GETs each, {blocks} alternating blocks each)",
        us(m_with),
        us(m_without),
        100.0 * (m_with.as_secs_f64() / m_without.as_secs_f64() - 1.0),
        with.len(),
    );
}
