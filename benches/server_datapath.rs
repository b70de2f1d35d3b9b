//! Benchmarks of hipobj-server's data path (issue 11), run by `benches/server-datapath` in ONE
//! Soft-RoCE lane boot. Each figure is a ratio to a baseline measured in the same boot, never a
//! timed assertion; the RDMA figures alternate with their perftest baseline round by round
//! (perftest, ours, perftest, ours, ...: `benches/server-datapath-perftest.sh`, named by
//! `HIPOBJ_BENCH_PERFTEST`), so a change of the machine's load during the run hits both sides
//! alike. This bench prints every round (every transfer's time for `single`); the figures, ratios
//! of medians over all of them with their spread and count, are computed from that output by
//! `benches/bench_summary.py` (`benches/server-datapath` prints them after the lane):
//!
//! - `single`: 8 MiB RDMA GET and PUT, one stream, keep-alive client (hipObject runtime + our
//!   keep-alive HTTP client), against a reference time = one measured HTTP round trip
//!   (keep-alive GET of an empty object) + 8 MiB at the median rate of the `ib_write_bw` (GET) or
//!   `ib_read_bw` (PUT) runs between the rounds, one QP, 8 MiB messages. A reference, not a
//!   bound: in this lane some GETs beat it.
//! - `streams4`: 4 threads at once, 8 MiB each, aggregate vs `ib_write_bw -q 4` (GET) and
//!   `ib_read_bw -q 4` (PUT) run just before.
//!   `HIPOBJ_BENCH_SERVER_ARGS` runs it against a server with extra flags (a variant beside the
//!   defaults in the same boot).
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

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use hipobj::runtime::{self, InitConfig, MemoryKind, Runtime, TransferKind};
use s3::{RdmaRequest, S3};

const MIB: usize = 1 << 20;
const OBJECT: usize = 8 * MIB;
const BUCKET: &str = "bench";
/// perftest messages: the object size, as one transfer of ours moves it.
const PERF_SIZE: usize = OBJECT;
/// Iterations per perftest run (perftest wants at least 5): 64 MiB with one QP, 40 MiB per QP
/// with four.
const PERF_ITERS_1: usize = 8;
const PERF_ITERS_4: usize = 5;
/// Transfers of ours per round (the round's figure is their median, or their aggregate).
const OURS_PER_ROUND: usize = 3;

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
    // `HIPOBJ_BENCH_SERVER_ARGS`: extra server flags of a variant measured beside the defaults.
    let extra = std::env::var("HIPOBJ_BENCH_SERVER_ARGS").unwrap_or_default();
    let extra: Vec<&str> = extra.split_whitespace().collect();
    if !extra.is_empty() {
        println!("server flags: {}", extra.join(" "));
    }
    let srv = server::Server::start(Some(server_dev), &extra);
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
    timed_split(s3, conn, kind, buf, key).map(|t| (t.secs, t.requests))
}

/// One timed transfer, with the part of it spent in the HTTP exchanges.
struct Timed {
    secs: f64,
    requests: usize,
    /// Seconds from writing the request to reading the response (the server's whole work).
    http: f64,
}

fn timed_split(
    s3: &S3,
    conn: &mut s3::KeepAlive,
    kind: TransferKind,
    buf: &Buffer,
    key: &str,
) -> Result<Timed, String> {
    let mut req = match kind {
        TransferKind::Get => RdmaRequest::get(s3, BUCKET, key),
        TransferKind::Put => RdmaRequest::put(s3, BUCKET, key),
    }
    .over(conn);
    let t = Instant::now();
    rt().transfer(kind, buf.ptr(), buf.0.len(), 0, &mut req)
        .map_err(|e| format!("{kind:?} {key}: {e} ({:?})", req.failure))?;
    Ok(Timed {
        secs: t.elapsed().as_secs_f64(),
        requests: req.requests,
        http: req.http.as_secs_f64(),
    })
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

/// The perftest runs between our rounds (`HIPOBJ_BENCH_PERFTEST`: the runner script).
struct Perftest {
    script: PathBuf,
}

impl Perftest {
    fn from_env() -> Option<Perftest> {
        let script = std::env::var_os("HIPOBJ_BENCH_PERFTEST")?;
        Some(Perftest {
            script: PathBuf::from(script),
        })
    }

    /// perftest's "BW average" (MB/s) of `tool` with `qps` QPs of 8 MiB messages; `None` when it
    /// failed twice (the script says why on stderr).
    fn mbs(&self, tool: &str, qps: usize) -> Option<f64> {
        let iters = if qps == 1 { PERF_ITERS_1 } else { PERF_ITERS_4 };
        let mut cmd = Command::new(&self.script);
        cmd.args([
            tool,
            &qps.to_string(),
            &PERF_SIZE.to_string(),
            &iters.to_string(),
        ]);
        if tool == "ib_read_bw" && qps > 1 {
            cmd.args(READ_MULTI_QP_ARGS);
        }
        let out = cmd.output().ok()?;
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            return None;
        }
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| *v > 0.0)
    }
}

/// `ib_read_bw -q N` with 8 MiB messages hangs on rxe under TCG at perftest's default local ACK
/// timeout (`-u 14`, 67 ms): the responder device serves one QP's 8 MiB READ response (2048
/// packets) at a time, the other QPs' requesters hear nothing for longer than 67 ms, retry
/// (`completer_retry_err` on the client device, `duplicate_request` on the server device), and
/// each retry restarts a response that again outlasts the timer. Measured in the lane: `-q 4 -s
/// 8M` timed out at 100 s three times (also with `-o 16`, `-t 16 -o 4`); `-q 4 -s 1M` passed with
/// 134 retries; `-q 4 -s 8M -u 20` (4.3 s) passes. The baseline therefore runs with `-u 20`.
/// (The server's own QPs keep timeout 14, docs/protocol.md rule 4.3; its READs are `--chunk-bytes`
/// long, 1 MiB by default, short enough for the timer.)
const READ_MULTI_QP_ARGS: &[&str] = &["-u", "20"];

/// The transfers of one figure, for the summary printed under each round's line. The figures
/// themselves (ratios of medians over every transfer, their spread and count) are computed from
/// the printed rounds by `benches/bench_summary.py`, the code `benches/figures --check` runs on
/// the published logs; this bench prints the raw rounds only.
#[derive(Default)]
struct Split {
    /// Per transfer: seconds outside the HTTP exchange (the client library's own work) and in it.
    library: Vec<f64>,
    http: Vec<f64>,
}

impl Split {
    fn add(&mut self, t: &Timed) {
        self.library.push(t.secs - t.http);
        self.http.push(t.http);
    }
}

/// `ms 62.8 64.1 70.2*`: every transfer of a round in milliseconds, `*` where it paired again.
fn transfers_ms(times: &[Timed]) -> String {
    let shown: Vec<String> = times
        .iter()
        .map(|t| {
            let mark = if t.requests == 1 { "" } else { "*" };
            format!("{:.1}{mark}", t.secs * 1e3)
        })
        .collect();
    format!("ms {}", shown.join(" "))
}

/// `OURS_PER_ROUND` timed transfers of `kind` over `conn`, every one kept.
fn round_of(
    s3: &S3,
    conn: &mut s3::KeepAlive,
    kind: TransferKind,
    buf: &Buffer,
    split: &mut Split,
) -> Vec<Timed> {
    (0..OURS_PER_ROUND)
        .map(|i| {
            let t = timed_split(s3, conn, kind, buf, &format!("o{i}"))
                .unwrap_or_else(|e| panic!("{kind:?}: {e}"));
            split.add(&t);
            t
        })
        .collect()
}

fn single(client_dev: &str, server_dev: &str, rounds: usize) -> bool {
    let perf = Perftest::from_env();
    let Setup { srv, s3 } = setup(client_dev, server_dev);
    let mut conn = s3.keep_alive();
    let src = Buffer::new(data::pattern(OBJECT, 0x5eed_0001));
    let dst = Buffer::new(vec![0u8; OBJECT]);
    let tiny = Buffer::new(vec![7u8; 4096]);
    // Pair every client connection the runtime may pick (pairing is one extra round trip), with
    // a small buffer (pairing does not depend on it); then the objects the GETs read.
    for i in 0..20 {
        timed(&s3, &mut conn, TransferKind::Put, &tiny, "pairing").expect("warm-up PUT");
        if i < OURS_PER_ROUND {
            timed(&s3, &mut conn, TransferKind::Put, &src, &format!("o{i}")).expect("object");
        }
    }
    let rtt = round_trip(&s3, &mut conn);
    println!("single: HTTP round trip {:.2} ms (median of 50)", rtt * 1e3);
    let (mut get, mut put) = (Split::default(), Split::default());
    let mut baselines = 0;
    for round in 0..rounds {
        let base_w = perf.as_ref().and_then(|p| p.mbs("ib_write_bw", 1));
        let gets = round_of(&s3, &mut conn, TransferKind::Get, &dst, &mut get);
        assert!(dst.0 == src.0, "GET returned other bytes");
        let base_r = perf.as_ref().and_then(|p| p.mbs("ib_read_bw", 1));
        let puts = round_of(&s3, &mut conn, TransferKind::Put, &src, &mut put);
        let show = |b: Option<f64>| b.map_or("failed".into(), |b| format!("{b:.1} MB/s"));
        println!(
            "round {round}: ib_write_bw {}, GET {}; ib_read_bw {}, PUT {}",
            show(base_w),
            transfers_ms(&gets),
            show(base_r),
            transfers_ms(&puts)
        );
        baselines += usize::from(base_w.is_some() && base_r.is_some());
    }
    println!("single: every transfer above, * where it paired again (none left out)");
    for (name, split) in [("GET", &mut get), ("PUT", &mut put)] {
        println!(
            "  {name} split: HTTP exchange median {:.2} ms (RTT {:.2} ms of it), client library outside it median {:.2} ms ({} transfers)",
            median(&mut split.http) * 1e3,
            rtt * 1e3,
            median(&mut split.library) * 1e3,
            split.http.len()
        );
    }
    println!("server stats: {}", srv.stats().trim());
    baselines > 0
}

fn streams(client_dev: &str, server_dev: &str, streams: usize, rounds: usize) -> bool {
    let perf = Perftest::from_env();
    let Setup { srv, s3 } = setup(client_dev, server_dev);
    let src = Buffer::new(data::pattern(OBJECT, 0x5eed_0002));
    let dsts: Vec<Buffer> = (0..streams)
        .map(|_| Buffer::new(vec![0u8; OBJECT]))
        .collect();
    let s3 = &s3;
    let mut ok = true;
    // Warm-up: pair the connections, create the objects.
    ok &= run_streams(s3, TransferKind::Put, &src, &dsts, 1) == 0;
    ok &= run_streams(s3, TransferKind::Get, &src, &dsts, 1) == 0;
    let mut errors = 0;
    let mut baselines = 0;
    for round in 0..rounds {
        let mut line = format!("round {round}:");
        for (kind, tool) in [
            (TransferKind::Get, "ib_write_bw"),
            (TransferKind::Put, "ib_read_bw"),
        ] {
            let base = perf.as_ref().and_then(|p| p.mbs(tool, streams));
            let t = Instant::now();
            errors += run_streams(s3, kind, &src, &dsts, OURS_PER_ROUND);
            let secs = t.elapsed().as_secs_f64();
            let mbs = (streams * OURS_PER_ROUND * OBJECT) as f64 / secs / 1e6;
            baselines += usize::from(base.is_some());
            let shown = base.map_or("failed".into(), |b| format!("{b:.1} MB/s"));
            line.push_str(&format!(
                " {tool} -q {streams} {shown}, {kind:?} {mbs:.1} MB/s;"
            ));
        }
        println!("{line}");
    }
    println!("RESULT {streams} streams: {errors} errors");
    ok &= errors == 0 && baselines > 0;
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
