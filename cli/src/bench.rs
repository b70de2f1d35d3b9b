//! `hipobj bench`: for each operation x size x concurrency, `--iterations` timed transfers per
//! thread over RDMA, the same requests over plain HTTP (the body carries the data) against the
//! same server, and (under `--transport auto`, the default) as the decision of
//! `hipobj::transport` chooses per transfer, which has measured the two forced columns too.
//! The columns alternate within the cell: its iterations run in up to three slices, each slice
//! running every column in turn, the first column rotating from slice to slice, so that a drift of
//! the machine during the cell falls on all of them alike; each slice of every column starts with
//! one untimed warm-up operation (auto's over the path its cell holds, not recorded). MB/s (a
//! column's bytes over the sum of its slices' wall times), ops/s, p50/p99 latency of each, the
//! RDMA/HTTP ratios, auto over the faster of the two, and the decision's counters.

use crate::args::{BenchArgs, Op};
use crate::credentials;
use crate::failure::{Failure, Retryable};
use crate::rdma::RdmaRequest;
use crate::s3::{ObjectPath, S3};
use crate::session::Session;
use crate::units::{mb_per_s, size_text};
use hipobj::engine::{Retrier, RetryPolicy};
use hipobj::runtime::TransferKind;
use hipobj::transport::{Destination, Mode, Path, SizeClass, Transport};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// One path's figures in one cell.
#[derive(Debug, Serialize)]
pub struct Stats {
    /// Timed operations that succeeded (the figures are theirs).
    pub operations: usize,
    /// Timed operations that failed (the first failure is printed on stderr), after retries.
    pub errors: usize,
    /// Retries after a transient failure (AWS standard mode, `RetryPolicy::standard`), the untimed warm-ups' included;
    /// a retried operation's latency includes its retries.
    pub retried: usize,
    pub mb_per_s: f64,
    pub ops_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct Cell {
    pub op: Op,
    pub size: u64,
    pub concurrency: usize,
    pub rdma: Stats,
    pub http: Stats,
    /// As `--transport auto` chooses (absent under `--transport rdma` or `http`).
    pub auto: Option<Stats>,
    /// Auto MB/s over the faster of RDMA and HTTP MB/s.
    pub ratio_auto: Option<f64>,
    /// RDMA MB/s over HTTP MB/s.
    pub ratio_mb_per_s: f64,
    /// HTTP p50 over RDMA p50 (above 1: RDMA is faster).
    pub ratio_p50: f64,
    /// RDMA MB/s over the perftest figure given for this direction, if one was given.
    pub ratio_perftest: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub endpoint: String,
    /// Where the HTTP column went (the same endpoint unless --http-endpoint).
    pub http_endpoint: String,
    pub nic: String,
    pub iterations: usize,
    pub perftest_write_mb_per_s: Option<f64>,
    pub perftest_read_mb_per_s: Option<f64>,
    pub cells: Vec<Cell>,
    /// Retries in the whole run, pairing included: transient failures a retry fixed.
    pub retried: usize,
    /// Operations that failed for good (every cell's errors).
    pub failed: usize,
    /// RDMA transfers that completed, the pairing GETs and the warm-ups included: each one is a
    /// request the server served over RDMA (a failed try is not counted). A lane check compares
    /// it with the server's own count.
    pub rdma_transfers: usize,
    /// The decision's counters over the whole run (forced columns included).
    pub transport: TransportCounters,
}

/// What went each way (`hipobj::transport::Counters`), for the JSON.
#[derive(Debug, Serialize)]
pub struct TransportCounters {
    pub rdma_transfers: u64,
    pub rdma_bytes: u64,
    pub http_transfers: u64,
    pub http_bytes: u64,
    /// Per path, transfers by reason ("forced", "default start", "measured", "probe", ...).
    pub rdma_by_reason: std::collections::BTreeMap<&'static str, u64>,
    pub http_by_reason: std::collections::BTreeMap<&'static str, u64>,
    /// Times a cell changed the path it holds.
    pub switches: u64,
    /// The same, in words.
    pub text: String,
}

impl TransportCounters {
    fn of(t: &Transport) -> TransportCounters {
        let c = t.counters();
        let by = |p: Path| {
            hipobj::transport::Reason::ALL
                .iter()
                .map(|r| (r.as_str(), c.path(p).because(*r)))
                .filter(|(_, n)| *n > 0)
                .collect()
        };
        TransportCounters {
            rdma_transfers: c.rdma.transfers,
            rdma_bytes: c.rdma.bytes,
            http_transfers: c.http.transfers,
            http_bytes: c.http.bytes,
            rdma_by_reason: by(Path::Rdma),
            http_by_reason: by(Path::Http),
            switches: c.switches,
            text: c.to_string(),
        }
    }
}

/// The nearest-rank percentile `p` (0..100] of sorted durations, in ms.
fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3
}

fn stats(
    mut latencies: Vec<Duration>,
    errors: usize,
    retried: usize,
    wall: Duration,
    size: u64,
) -> Stats {
    latencies.sort();
    let n = latencies.len();
    let secs = wall.as_secs_f64();
    Stats {
        operations: n,
        errors,
        retried,
        mb_per_s: mb_per_s(size * n as u64, secs),
        ops_per_s: if secs > 0.0 { n as f64 / secs } else { 0.0 },
        p50_ms: percentile_ms(&latencies, 50.0),
        p99_ms: percentile_ms(&latencies, 99.0),
    }
}

/// One column's timed operations in a cell, gathered over its slices.
#[derive(Default)]
struct Sample {
    latencies: Vec<Duration>,
    errors: usize,
    retried: usize,
    wall: Duration,
}

impl Sample {
    /// Adds one slice: `run_threads`' result and the retries during it.
    fn add(&mut self, (latencies, errors, wall): Timed, retried: usize) {
        self.latencies.extend(latencies);
        self.errors += errors;
        self.retried += retried;
        self.wall += wall;
    }

    fn stats(self, size: u64) -> Stats {
        stats(self.latencies, self.errors, self.retried, self.wall, size)
    }
}

/// What `run_threads` measured: the latencies of the operations that succeeded, the number that
/// failed, and the wall time.
type Timed = (Vec<Duration>, usize, Duration);

/// The bytes of a benchmark object (checked on the first GET of every thread).
fn pattern(size: u64) -> Vec<u8> {
    (0..size)
        .map(|i| (i.wrapping_mul(131).wrapping_add(size) % 251) as u8)
        .collect()
}

/// Runs `threads` workers; each gets ready (`setup`, untimed: registration, warm-up, pairing),
/// then all start together and each does `iterations` timed operations. Latencies of those that
/// succeeded, the number that failed, and the wall time: from the start to the last worker's
/// last operation (what `setup` made is released after it, untimed).
fn run_threads<W>(
    threads: usize,
    iterations: usize,
    setup: impl Fn(usize) -> Result<W, Failure> + Sync,
    op: impl Fn(&mut W) -> Result<(), Failure> + Sync,
) -> Result<Timed, Failure> {
    let start = Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (start, setup, op) = (&start, &setup, &op);
                scope.spawn(move || {
                    let worker = setup(t);
                    start.wait();
                    let mut worker = worker?;
                    let mut lat = Vec::with_capacity(iterations);
                    let mut errors = 0;
                    for _ in 0..iterations {
                        let t0 = Instant::now();
                        match op(&mut worker) {
                            Ok(()) => lat.push(t0.elapsed()),
                            Err(f) => {
                                if errors == 0 {
                                    eprintln!("hipobj bench: {f}");
                                }
                                errors += 1;
                            }
                        }
                    }
                    // Taken before `worker` drops: releasing what `setup` made (a registered
                    // buffer's deregistration) is not part of the timed operations.
                    Ok::<_, Failure>((lat, errors, Instant::now()))
                })
            })
            .collect();
        start.wait();
        let t0 = Instant::now();
        let mut all = Vec::new();
        let mut errors = 0;
        let mut first_err = None;
        let mut last_done = t0;
        for w in workers {
            match w.join() {
                Ok(Ok((lat, e, done))) => {
                    all.extend(lat);
                    errors += e;
                    last_done = last_done.max(done);
                }
                Ok(Err(f)) => first_err = first_err.or(Some(f)),
                Err(_) => {
                    first_err = first_err.or(Some(Failure::Transfer(
                        "a benchmark thread panicked".into(),
                    )))
                }
            }
        }
        let wall = last_done.saturating_duration_since(t0);
        match first_err {
            Some(f) => Err(f),
            None => Ok((all, errors, wall)),
        }
    })
}

fn object(bucket: &str, op: Op, size: u64, thread: usize) -> ObjectPath {
    let key = match op {
        Op::Get => format!("bench/get-{size}"),
        Op::Put => format!("bench/put-{size}-{thread}"),
    };
    ObjectPath {
        bucket: bucket.to_owned(),
        key,
    }
}

/// What every RDMA transfer of the bench goes through: the endpoint, the retry rule, and the count
/// of the transfers that completed.
struct RdmaPath<'a> {
    s3: &'a S3,
    retry: &'a Retrier<'a>,
    transfers: AtomicUsize,
    /// The decision every timed transfer is recorded in.
    transport: &'a Transport,
    destination: Destination,
}

impl RdmaPath<'_> {
    /// The path the decision's cell of `op` and `size` on this endpoint holds now (its default
    /// before any transfer).
    fn held(&self, op: Op, size: u64) -> Path {
        self.transport
            .held(self.s3.endpoint(), size, op.direction(), self.destination)
            .map_or_else(|| SizeClass::of(size).default_path(), |(p, _)| p)
    }

    /// `op` timed and recorded as one transfer of `size` bytes taken under `mode`.
    fn recorded(
        &self,
        mode: Mode,
        endpoint: &str,
        op: Op,
        size: u64,
        run: impl FnOnce(Path) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        let ticket = self
            .transport
            .pick_as(mode, endpoint, size, op.direction(), self.destination);
        run(ticket.path())?;
        self.transport.record(&ticket, size);
        Ok(())
    }
}

/// One RDMA transfer of the whole buffer, retried by the engine's standard-mode rule; counted
/// in `path.transfers` when it completes.
fn rdma_transfer(
    path: &RdmaPath<'_>,
    buf: &crate::session::Registered,
    kind: TransferKind,
    obj: &ObjectPath,
) -> Result<(), Failure> {
    let what = || {
        let verb = if kind == TransferKind::Get {
            "GET"
        } else {
            "PUT"
        };
        format!("{verb} {obj}")
    };
    path.retry
        .run(&what, || {
            let mut req = RdmaRequest::new(path.s3, kind, obj, None);
            buf.transfer(0, buf.len(), &mut req).map_err(|e| Retryable {
                class: req.class(&e),
                retry_after: req.retry_after(),
                server: req.server_error().map(Box::new),
                failure: req.failure(&e),
            })
        })
        .map_err(|r| r.failure)?;
    path.transfers.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

fn rdma_cell(
    path: &RdmaPath<'_>,
    session: &Session,
    args: &BenchArgs,
    cell: (Op, u64, usize),
    iterations: usize,
    into: &mut Sample,
) -> Result<(), Failure> {
    let (op, size, threads) = cell;
    let data = pattern(size);
    let kind = op.kind();
    let retried_before = path.retry.retries() as usize;
    let timed = run_threads(
        threads,
        iterations,
        |t| {
            let mut buf = session.buffer(size as usize)?;
            let obj = object(&args.bucket, op, size, t);
            if op == Op::Put {
                buf.fill(&data)?;
            }
            rdma_transfer(path, &buf, kind, &obj)?; // warm-up: pairs this thread's connection
            if op == Op::Get && buf.read(size as usize)? != data {
                return Err(Failure::Transfer(format!(
                    "GET {obj} over RDMA returned other bytes"
                )));
            }
            Ok((buf, obj))
        },
        |(buf, obj)| {
            path.recorded(Mode::Rdma, path.s3.endpoint(), op, size, |_| {
                rdma_transfer(path, buf, kind, obj)
            })
        },
    )?;
    into.add(timed, path.retry.retries() as usize - retried_before);
    Ok(())
}

/// One plain-HTTP GET (its length checked) or PUT of the benchmark object.
fn http_op(s3: &S3, op: Op, obj: &ObjectPath, data: &[u8]) -> Result<(), Failure> {
    match op {
        Op::Get => {
            let body = s3.get_plain(obj, None)?;
            if body.len() != data.len() {
                return Err(Failure::Transfer(format!(
                    "GET {obj}: {} bytes, expected {}",
                    body.len(),
                    data.len()
                )));
            }
            Ok(())
        }
        Op::Put => s3.put_plain(obj, data.to_vec()),
    }
}

/// The cell as `--transport auto` runs it: each timed operation over the path the decision
/// gives it (RDMA on this thread's registered buffer, or plain HTTP to the same endpoint).
fn auto_cell(
    path: &RdmaPath<'_>,
    session: &Session,
    args: &BenchArgs,
    cell: (Op, u64, usize),
    iterations: usize,
    into: &mut Sample,
) -> Result<(), Failure> {
    let (op, size, threads) = cell;
    let data = pattern(size);
    let kind = op.kind();
    let retried_before = path.retry.retries() as usize;
    let timed = run_threads(
        threads,
        iterations,
        |t| {
            let mut buf = session.buffer(size as usize)?;
            if op == Op::Put {
                buf.fill(&data)?;
            }
            let obj = object(&args.bucket, op, size, t);
            // Warm-up, as each slice of the forced columns has: one operation over the path the
            // cell holds, neither timed nor recorded (so it is never a probe the figures miss).
            match path.held(op, size) {
                Path::Rdma => rdma_transfer(path, &buf, kind, &obj)?,
                Path::Http => http_op(path.s3, op, &obj, &data)?,
            }
            Ok((buf, obj))
        },
        |(buf, obj)| {
            path.recorded(Mode::Auto, path.s3.endpoint(), op, size, |way| match way {
                Path::Rdma => rdma_transfer(path, buf, kind, obj),
                Path::Http => http_op(path.s3, op, obj, &data),
            })
        },
    )?;
    into.add(timed, path.retry.retries() as usize - retried_before);
    Ok(())
}

fn http_cell(
    path: &RdmaPath<'_>,
    s3: &S3,
    args: &BenchArgs,
    cell: (Op, u64, usize),
    iterations: usize,
    into: &mut Sample,
) -> Result<(), Failure> {
    let (op, size, threads) = cell;
    let data = pattern(size);
    let timed = run_threads(
        threads,
        iterations,
        |t| {
            let obj = object(&args.bucket, op, size, t);
            match op {
                Op::Get if s3.get_plain(&obj, None)? != data => {
                    return Err(Failure::Transfer(format!(
                        "GET {obj} over HTTP returned other bytes"
                    )))
                }
                Op::Get => {}
                Op::Put => s3.put_plain(&obj, data.clone())?,
            }
            Ok(obj)
        },
        |obj| {
            path.recorded(Mode::Http, s3.endpoint(), op, size, |_| {
                http_op(s3, op, obj, &data)
            })
        },
    )?;
    into.add(timed, 0);
    Ok(())
}

/// One GET of the smallest object on every connection at once, so that no timed transfer pays
/// for pairing (docs/protocol.md section 7).
fn pair_connections(
    path: &RdmaPath<'_>,
    session: &Session,
    args: &BenchArgs,
    connections: usize,
) -> Result<(), Failure> {
    let size = args.sizes.iter().copied().min().unwrap_or(4096);
    let obj = object(&args.bucket, Op::Get, size, 0);
    run_threads(
        connections,
        1,
        |_| session.buffer(size as usize),
        |buf| rdma_transfer(path, buf, TransferKind::Get, &obj),
    )
    .map(drop)
}

/// The cell's three columns (RDMA, HTTP, auto; auto only `with_auto`), alternating: the
/// iterations in up to three slices, each running every column, the first column rotating.
fn interleaved(
    path: &RdmaPath<'_>,
    session: &Session,
    http: &S3,
    args: &BenchArgs,
    cell: (Op, u64, usize),
    with_auto: bool,
) -> Result<[Sample; 3], Failure> {
    let slices = args.iterations.min(3);
    let mut columns: [Sample; 3] = Default::default();
    for slice in 0..slices {
        // 12 iterations in 3 slices: 4 + 4 + 4; 8: 3 + 3 + 2.
        let iterations = args.iterations / slices + usize::from(slice < args.iterations % slices);
        for column in (0..3).map(|k| (slice + k) % 3) {
            let into = &mut columns[column];
            match column {
                0 => rdma_cell(path, session, args, cell, iterations, into)?,
                1 => http_cell(path, http, args, cell, iterations, into)?,
                _ if with_auto => auto_cell(path, session, args, cell, iterations, into)?,
                _ => {}
            }
        }
    }
    Ok(columns)
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

pub fn run(args: &BenchArgs) -> Result<(), Failure> {
    if args.iterations == 0 || args.concurrency.iter().any(|&c| c == 0 || c > 64) {
        return Err(Failure::Usage(
            "--iterations must be >= 1 and --concurrency 1..64".into(),
        ));
    }
    // The bench measures RDMA against plain HTTP: without a device it says which is missing
    // (not the library's "no usable GPU").
    if let Some(detail) = crate::transport::rdma_missing() {
        return Err(Failure::NoNic(format!(
            "{detail} (hipobj bench measures RDMA against plain HTTP)"
        )));
    }
    let creds = credentials::resolve(&args.endpoint.credentials.sources())?;
    let http_s3 = match &args.http_endpoint {
        Some(url) => Some(S3::new(url, creds.clone())?),
        None => None,
    };
    let s3 = S3::new(&args.endpoint.endpoint, creds)?
        .with_protocol(args.endpoint.protocol.rdma_protocol);
    let http = http_s3.as_ref().unwrap_or(&s3);
    for store in [&s3, http] {
        store.ensure_bucket(&args.bucket)?;
        for &size in &args.sizes {
            store.put_plain(&object(&args.bucket, Op::Get, size, 0), pattern(size))?;
        }
    }
    // As many connections as the largest concurrency, all paired before anything is timed.
    let connections = args.concurrency.iter().copied().max().unwrap_or(1);
    let session = Session::open_with(
        args.endpoint.nic.as_deref(),
        args.endpoint.gpu,
        Some(connections),
    )?;
    let policy = RetryPolicy::standard();
    let never_cancelled = AtomicBool::new(false);
    let retry = Retrier::with_policy(&policy, &never_cancelled);
    let transport = Transport::new(Mode::Auto);
    let path = RdmaPath {
        s3: &s3,
        retry: &retry,
        transfers: AtomicUsize::new(0),
        transport: &transport,
        destination: crate::transport::Paths::destination(&args.endpoint),
    };
    let with_auto = args.endpoint.transport == Mode::Auto;
    pair_connections(&path, &session, args, connections)?;
    let cells_total = args.ops.len() * args.sizes.len() * args.concurrency.len();
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(cells_total as u64)
    };
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {pos}/{len} cells {msg}")
    {
        bar.set_style(style);
    }
    let mut cells = Vec::new();
    for &op in &args.ops {
        for &size in &args.sizes {
            for &threads in &args.concurrency {
                bar.set_message(format!("{} {} x{threads}", op.name(), size_text(size)));
                let [rdma, http, auto] =
                    interleaved(&path, &session, http, args, (op, size, threads), with_auto)?;
                let (rdma, http) = (rdma.stats(size), http.stats(size));
                let auto = with_auto.then(|| auto.stats(size));
                let perftest = match op {
                    Op::Get => args.perftest_write,
                    Op::Put => args.perftest_read,
                };
                cells.push(Cell {
                    ratio_perftest: perftest.map(|p| ratio(rdma.mb_per_s, p)),
                    op,
                    size,
                    concurrency: threads,
                    ratio_mb_per_s: ratio(rdma.mb_per_s, http.mb_per_s),
                    ratio_p50: ratio(http.p50_ms, rdma.p50_ms),
                    ratio_auto: auto
                        .as_ref()
                        .map(|a| ratio(a.mb_per_s, rdma.mb_per_s.max(http.mb_per_s))),
                    rdma,
                    http,
                    auto,
                });
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    let failed = cells.iter().map(Cell::errors).sum();
    let report = Report {
        endpoint: s3.endpoint().to_owned(),
        http_endpoint: http.endpoint().to_owned(),
        nic: session.nic_text(),
        iterations: args.iterations,
        perftest_write_mb_per_s: args.perftest_write,
        perftest_read_mb_per_s: args.perftest_read,
        cells,
        retried: retry.retries() as usize,
        failed,
        rdma_transfers: path.transfers.load(Ordering::Relaxed),
        transport: TransportCounters::of(&transport),
    };
    if args.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| Failure::Transfer(format!("JSON: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", table(&report));
    }
    if failed > 0 {
        return Err(Failure::Transfer(format!(
            "{failed} timed operations failed (see above)"
        )));
    }
    Ok(())
}

impl Cell {
    /// Timed operations that failed, every column's.
    fn errors(&self) -> usize {
        self.rdma.errors + self.http.errors + self.auto.as_ref().map_or(0, |a| a.errors)
    }

    /// Timed operations, every column's.
    fn timed(&self) -> usize {
        let auto = self.auto.as_ref().map_or(0, |a| a.operations + a.errors);
        self.rdma.operations + self.rdma.errors + self.http.operations + self.http.errors + auto
    }
}

fn table(r: &Report) -> String {
    let mut out = format!(
        "hipobj bench: {} via {}, {} timed operations per thread, column and cell (the columns alternating in up to 3 slices, each after one warm-up)\n",
        r.endpoint, r.nic, r.iterations
    );
    if r.http_endpoint != r.endpoint {
        out.push_str(&format!("HTTP column: {}\n", r.http_endpoint));
    }
    let perftest = r.perftest_write_mb_per_s.is_some() || r.perftest_read_mb_per_s.is_some();
    if perftest {
        let mbs = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1} MB/s"));
        out.push_str(&format!(
            "perftest on this device pair: ib_write_bw {}, ib_read_bw {}\n",
            mbs(r.perftest_write_mb_per_s),
            mbs(r.perftest_read_mb_per_s)
        ));
    }
    let heads = [
        "RDMA MB/s",
        "ops/s",
        "p50 ms",
        "p99 ms",
        "HTTP MB/s",
        "ops/s",
        "p50 ms",
        "p99 ms",
    ];
    out.push_str(&format!(
        "{:<4} {:>7} {:>4} | {:>9} {:>8} {:>8} {:>8} | {:>9} {:>8} {:>8} {:>8} | {:>9} {:>9} | {:>9} {:>8} {:>8}{}\n",
        "op",
        "size",
        "conc",
        heads[0],
        heads[1],
        heads[2],
        heads[3],
        heads[4],
        heads[5],
        heads[6],
        heads[7],
        "MB/s x",
        "p50 x",
        "auto MB/s",
        "p50 ms",
        "auto x",
        if perftest { " | vs perftest" } else { "" }
    ));
    for c in &r.cells {
        let mut vs = c
            .ratio_perftest
            .map_or(String::new(), |x| format!(" | {x:>10.2}x"));
        if c.rdma.retried > 0 {
            vs.push_str(&format!("  ({} RDMA retries)", c.rdma.retried));
        }
        if c.errors() > 0 {
            vs.push_str(&format!(
                "  ({} RDMA / {} HTTP / {} auto operations failed)",
                c.rdma.errors,
                c.http.errors,
                c.auto.as_ref().map_or(0, |a| a.errors)
            ));
        }
        let auto = match (&c.auto, c.ratio_auto) {
            (Some(a), Some(x)) => format!("{:>9.1} {:>8.2} {:>7.2}x", a.mb_per_s, a.p50_ms, x),
            _ => format!("{:>9} {:>8} {:>8}", "-", "-", "-"),
        };
        out.push_str(&format!(
            "{:<4} {:>7} {:>4} | {:>9.1} {:>8.1} {:>8.2} {:>8.2} | {:>9.1} {:>8.1} {:>8.2} {:>8.2} | {:>8.2}x {:>8.2}x | {auto}{vs}\n",
            c.op.name(),
            size_text(c.size),
            c.concurrency,
            c.rdma.mb_per_s,
            c.rdma.ops_per_s,
            c.rdma.p50_ms,
            c.rdma.p99_ms,
            c.http.mb_per_s,
            c.http.ops_per_s,
            c.http.p50_ms,
            c.http.p99_ms,
            c.ratio_mb_per_s,
            c.ratio_p50
        ));
    }
    out.push_str(
        "MB/s x = RDMA MB/s / HTTP MB/s; p50 x = HTTP p50 / RDMA p50 (above 1: RDMA is faster); auto x = auto MB/s / the faster of RDMA and HTTP MB/s\n",
    );
    out.push_str(&format!("transport decision: {}\n", r.transport.text));
    if perftest {
        out.push_str(
            "vs perftest = RDMA MB/s / ib_write_bw (GET) or ib_read_bw (PUT) of the same boot\n",
        );
    }
    let timed: usize = r.cells.iter().map(Cell::timed).sum();
    out.push_str(&format!(
        "hipobj bench: {timed} timed operations, retried {}, failed {} (a transient failure is tried up to {} times); {} RDMA transfers completed, pairing and warm-ups included\n",
        r.retried,
        r.failed,
        RetryPolicy::standard().max_attempts,
        r.rdma_transfers
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile_ms(&d, 50.0), 50.0);
        assert_eq!(percentile_ms(&d, 99.0), 99.0);
        let one = [Duration::from_millis(7)];
        assert_eq!(percentile_ms(&one, 99.0), 7.0);
        assert_eq!(percentile_ms(&[], 50.0), 0.0);
    }

    #[test]
    fn stats_from_latencies() {
        let s = stats(
            vec![Duration::from_millis(10); 4],
            1,
            0,
            Duration::from_secs(1),
            1_000_000,
        );
        assert_eq!((s.operations, s.errors), (4, 1));
        assert!((s.mb_per_s - 4.0).abs() < 1e-9);
        assert!((s.ops_per_s - 4.0).abs() < 1e-9);
    }
}
