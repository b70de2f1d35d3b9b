//! Benchmarks of hipobj-server's data path (issue 11), run by `benches/server-datapath` in ONE
//! Soft-RoCE lane boot, alternating with perftest on the same devices. Each figure is a ratio to
//! a baseline measured in the same boot, never a timed assertion:
//!
//! - `single`: 8 MiB RDMA GET and PUT, one stream, keep-alive client (hipObject runtime + our
//!   keep-alive HTTP client), against the request/response limit = one measured HTTP round trip
//!   (keep-alive GET of an empty object) + 8 MiB at perftest's single-QP rate
//!   (`HIPOBJ_BASELINE_WRITE_MBS` for GET, `HIPOBJ_BASELINE_READ_MBS` for PUT).
//! - `streams4`: 4 threads at once, 8 MiB each, aggregate vs `ib_write_bw/ib_read_bw -q 4`
//!   (`HIPOBJ_BASELINE_WRITE4_MBS`, `HIPOBJ_BASELINE_READ4_MBS`).
//! - `threads16`: 16 client threads, server and client with default settings, PUT + GET + verify;
//!   counts errors (exit 1 if any).
//! - `small`: keep-alive 4 KiB plain-HTTP GETs, median and p99, with TCP_NODELAY (the server's
//!   default) and without (`HIPOBJ_BENCH_TCP_NODELAY=0`, the baseline).
//!
//! Usage: server_datapath MODE [ROUNDS]   (MODE: single | streams4 | threads16 | small)

#[path = "../tests/support/data.rs"]
mod data;
#[path = "../tests/support/s3.rs"]
mod s3;
#[path = "../tests/support/server.rs"]
mod server;

use std::time::{Duration, Instant};

use hipobj::runtime::{self, InitConfig, MemoryKind, Runtime, TransferKind};
use s3::{RdmaRequest, S3};

const MIB: usize = 1 << 20;
const OBJECT: usize = 8 * MIB;
const BUCKET: &str = "bench";

fn main() {
    // `cargo bench` passes --bench; skip flags.
    let args: Vec<String> = std::env::args().filter(|a| !a.starts_with("--")).collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("single");
    let rounds: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(8);
    let Some((client_dev, server_dev)) = server::device_pair() else {
        eprintln!("server_datapath: no RDMA device (run it through benches/server-datapath)");
        std::process::exit(2);
    };
    let ok = match mode {
        "single" => single(&client_dev, &server_dev, rounds),
        "streams4" => streams(&client_dev, &server_dev, 4, rounds),
        "threads16" => threads16(&client_dev, &server_dev, rounds),
        "small" => small(rounds.max(500)),
        other => {
            eprintln!("server_datapath: unknown mode {other:?}");
            std::process::exit(2);
        }
    };
    runtime::shutdown().expect("shutdown");
    if !ok {
        std::process::exit(1);
    }
}

/// A started server with the bench bucket, and an initialised client runtime.
struct Setup {
    srv: server::Server,
    s3: S3,
}

fn setup(client_dev: &str, server_dev: &str) -> Setup {
    let srv = server::Server::start(Some(server_dev), &[]);
    let s3 = S3::new(srv.addr);
    assert!(s3.create_bucket(BUCKET).expect("create bucket").status < 300);
    let cfg = InitConfig {
        gpu_device: -1,
        nic_hint: Some(client_dev.to_string()),
        ..Default::default()
    };
    runtime::init(cfg).unwrap_or_else(|e| panic!("hipObjInit: {e}"));
    Setup { srv, s3 }
}

fn rt() -> std::sync::Arc<Runtime> {
    runtime::current().expect("initialised")
}

/// A registered host buffer.
struct Buffer(Vec<u8>);

impl Buffer {
    fn new(bytes: Vec<u8>) -> Buffer {
        rt().register(bytes.as_ptr() as usize, bytes.len(), MemoryKind::Host)
            .expect("register");
        Buffer(bytes)
    }
    fn ptr(&self) -> usize {
        self.0.as_ptr() as usize
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let _ = rt().deregister(self.0.as_ptr() as usize);
    }
}

/// One RDMA transfer over `conn`; seconds it took and the requests it needed (2 = it paired).
fn timed(
    s3: &S3,
    conn: &mut s3::KeepAlive,
    kind: TransferKind,
    buf: &Buffer,
    key: &str,
) -> Result<(f64, usize), String> {
    let mut req = match kind {
        TransferKind::Get => RdmaRequest::get(s3, BUCKET, key),
        TransferKind::Put => RdmaRequest::put(s3, BUCKET, key),
    }
    .over(conn);
    let t = Instant::now();
    rt().transfer(kind, buf.ptr(), buf.0.len(), 0, &mut req)
        .map_err(|e| format!("{kind:?} {key}: {e} ({:?})", req.failure))?;
    Ok((t.elapsed().as_secs_f64(), req.requests))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

fn baseline(name: &str) -> Option<f64> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| *v > 0.0)
}

/// Median seconds of a keep-alive plain GET of an empty object: one HTTP round trip.
fn round_trip(s3: &S3, conn: &mut s3::KeepAlive) -> f64 {
    assert!(s3.put(BUCKET, "empty", b"").expect("put empty").status < 300);
    let mut v: Vec<f64> = (0..60)
        .map(|_| {
            let t = Instant::now();
            let r = conn.request("GET", &format!("/{BUCKET}/empty"), &[], &[]);
            assert_eq!(r.expect("GET empty").status, 200);
            t.elapsed().as_secs_f64()
        })
        .collect();
    median(&mut v[10..])
}

fn single(client_dev: &str, server_dev: &str, rounds: usize) -> bool {
    let Setup { srv, s3 } = setup(client_dev, server_dev);
    let mut conn = s3.keep_alive();
    let src = Buffer::new(data::pattern(OBJECT, 0x5eed_0001));
    let dst = Buffer::new(vec![0u8; OBJECT]);
    // Pair every client connection the runtime may pick (pairing is one extra round trip).
    for i in 0..20 {
        timed(&s3, &mut conn, TransferKind::Put, &src, &format!("o{i}")).expect("warm-up PUT");
    }
    let rtt = round_trip(&s3, &mut conn);
    let (mut put, mut get) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let key = format!("o{round}");
        let (t, n) = timed(&s3, &mut conn, TransferKind::Put, &src, &key).expect("PUT");
        if n == 1 {
            put.push(t);
        }
        let (t, n) = timed(&s3, &mut conn, TransferKind::Get, &dst, &key).expect("GET");
        if n == 1 {
            get.push(t);
        }
        assert!(dst.0 == src.0, "GET returned other bytes");
    }
    println!(
        "single: {} PUT and {} GET rounds without pairing, HTTP round trip {:.2} ms",
        put.len(),
        get.len(),
        rtt * 1e3
    );
    let mut ok = true;
    for (name, times, base_var) in [
        ("GET", &mut get, "HIPOBJ_BASELINE_WRITE_MBS"),
        ("PUT", &mut put, "HIPOBJ_BASELINE_READ_MBS"),
    ] {
        if times.is_empty() {
            println!("single {name}: every round paired again; no figure");
            ok = false;
            continue;
        }
        let t = median(times);
        let mbs = OBJECT as f64 / t / 1e6;
        print!(
            "RESULT single 8MiB {name}: {:.2} ms, {mbs:.1} MB/s",
            t * 1e3
        );
        match baseline(base_var) {
            Some(perf) => {
                let limit = rtt + OBJECT as f64 / (perf * 1e6);
                println!(
                    "; limit {:.2} ms (RTT {:.2} ms + 8 MiB at {perf:.1} MB/s); EFFICIENCY {:.2}",
                    limit * 1e3,
                    rtt * 1e3,
                    limit / t
                );
            }
            None => println!("; no {base_var}"),
        }
    }
    println!("server stats: {}", srv.stats().trim());
    ok
}

fn streams(client_dev: &str, server_dev: &str, streams: usize, rounds: usize) -> bool {
    let Setup { srv, s3 } = setup(client_dev, server_dev);
    let src = Buffer::new(data::pattern(OBJECT, 0x5eed_0002));
    let dsts: Vec<Buffer> = (0..streams)
        .map(|_| Buffer::new(vec![0u8; OBJECT]))
        .collect();
    let s3 = &s3;
    let mut ok = true;
    for kind in [TransferKind::Put, TransferKind::Get] {
        // Warm-up: pair the connections, create the objects.
        run_streams(s3, kind, &src, &dsts, 1);
        let t = Instant::now();
        let errors = run_streams(s3, kind, &src, &dsts, rounds);
        let secs = t.elapsed().as_secs_f64();
        let mbs = (streams * rounds * OBJECT) as f64 / secs / 1e6;
        let base_var = match kind {
            TransferKind::Get => "HIPOBJ_BASELINE_WRITE4_MBS",
            TransferKind::Put => "HIPOBJ_BASELINE_READ4_MBS",
        };
        print!("RESULT {streams} streams 8MiB {kind:?}: {mbs:.1} MB/s aggregate, {errors} errors");
        match baseline(base_var) {
            Some(perf) => println!(
                " ; perftest -q {streams} {perf:.1} MB/s; RATIO {:.2}",
                mbs / perf
            ),
            None => println!(" ; no {base_var}"),
        }
        ok &= errors == 0;
    }
    for d in &dsts {
        ok &= d.0 == src.0;
    }
    println!("server stats: {}", srv.stats().trim());
    ok
}

/// `streams` threads, each `rounds` transfers of `kind` of 8 MiB; returns the errors.
fn run_streams(s3: &S3, kind: TransferKind, src: &Buffer, dsts: &[Buffer], rounds: usize) -> usize {
    std::thread::scope(|sc| {
        let handles: Vec<_> = dsts
            .iter()
            .enumerate()
            .map(|(i, dst)| {
                sc.spawn(move || {
                    let mut conn = s3.keep_alive();
                    let buf = if kind == TransferKind::Put { src } else { dst };
                    (0..rounds)
                        .filter(|_| timed(s3, &mut conn, kind, buf, &format!("s{i}")).is_err())
                        .count()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(rounds))
            .sum()
    })
}

fn threads16(client_dev: &str, server_dev: &str, rounds: usize) -> bool {
    let Setup { srv, s3 } = setup(client_dev, server_dev);
    const THREADS: usize = 16;
    const SIZE: usize = MIB;
    let s3 = &s3;
    let errors: usize = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                sc.spawn(move || {
                    let src = Buffer::new(data::pattern(SIZE, 0x1600 + i as u64));
                    let dst = Buffer::new(vec![0u8; SIZE]);
                    let mut conn = s3.keep_alive();
                    let mut errors = 0;
                    for round in 0..rounds {
                        let key = format!("t{i}-{round}");
                        let put = timed(s3, &mut conn, TransferKind::Put, &src, &key);
                        let get = timed(s3, &mut conn, TransferKind::Get, &dst, &key);
                        for r in [put.map(|_| ()), get.map(|_| ())] {
                            if let Err(e) = r {
                                eprintln!("threads16: {e}");
                                errors += 1;
                            }
                        }
                        if dst.0 != src.0 {
                            eprintln!("threads16: thread {i} round {round}: bytes differ");
                            errors += 1;
                        }
                    }
                    errors
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(1)).sum()
    });
    let stats = srv.stats();
    println!(
        "RESULT 16 threads x {rounds} rounds (1 MiB PUT + GET + verify), defaults: ERRORS {errors}"
    );
    println!("server stats: {}", stats.trim());
    errors == 0
}

fn small(requests: usize) -> bool {
    let mut ok = true;
    for (label, nodelay) in [
        ("TCP_NODELAY off (before)", "0"),
        ("TCP_NODELAY on (after)", "1"),
    ] {
        let srv =
            server::Server::start_with_env(None, &[], &[("HIPOBJ_BENCH_TCP_NODELAY", nodelay)]);
        let s3 = S3::new(srv.addr);
        assert!(s3.create_bucket(BUCKET).expect("bucket").status < 300);
        let body = data::pattern(4096, 0x4096);
        assert!(s3.put(BUCKET, "small", &body).expect("put").status < 300);
        let mut conn = s3.keep_alive();
        let mut times = Vec::with_capacity(requests);
        for i in 0..requests + 20 {
            let t = Instant::now();
            let r = conn
                .request("GET", &format!("/{BUCKET}/small"), &[], &[])
                .expect("GET");
            let dt = t.elapsed();
            ok &= r.status == 200 && r.body == body;
            if i >= 20 {
                times.push(dt.as_secs_f64());
            }
        }
        let p50 = median(&mut times);
        let p99 = percentile(&mut times, 0.99);
        println!(
            "RESULT 4KiB keep-alive GET, {label}: median {:.2} ms, p99 {:.2} ms, p99/median {:.2} ({requests} requests)",
            p50 * 1e3,
            p99 * 1e3,
            p99 / p50
        );
        drop(srv);
        std::thread::sleep(Duration::from_millis(100));
    }
    ok
}
