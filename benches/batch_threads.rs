//! One thread with a batch queue against 16 threads of the synchronous API (issue 50), in the
//! lane: the same GETs of the same objects, the same S3 client (`hipobj::client`), alternating
//! rounds in one boot. Each round moves every object once and reports its wall time and the
//! process's CPU time (user + system, getrusage) over the round; the summary is the ratio of the
//! medians (queue / threads) of ops/s (64 KiB) or MB/s (4 MiB) and of CPU time per operation,
//! with each side's range and the number of rounds. Every round's bytes are compared.
//!
//! Usage: batch_threads [ROUNDS]   (default 5 per side and size)

#[path = "../tests/support/data.rs"]
mod data;
#[path = "../tests/support/s3.rs"]
mod s3;
#[path = "../tests/support/server.rs"]
mod server;

use hipobj::batch::{Config, Op, OpKind, Queue, Status};
use hipobj::client::credentials;
use hipobj::client::rdma::{self, RdmaRequest};
use hipobj::client::s3::{ObjectPath, S3};
use hipobj::engine::Slice;
use hipobj::runtime::{self, InitConfig, MemoryKind, Runtime, TransferKind};
use std::sync::Arc;
use std::time::{Duration, Instant};

const THREADS: usize = 16;
const DEPTH: usize = 64;

fn cpu_time() -> Duration {
    let mut u: libc::rusage = unsafe_zeroed();
    // SAFETY: getrusage writes one rusage into the valid, writable `u`.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn unsafe_zeroed() -> libc::rusage {
    // SAFETY: rusage is plain integers and timevals, for which all-zero bytes are valid.
    unsafe { std::mem::zeroed() }
}

struct Round {
    wall: Duration,
    cpu: Duration,
}

/// Every object once through one queue, submitted and polled by this thread.
fn queue_round(queue: &Queue, base: usize, size: usize, count: usize) -> Round {
    let (wall0, cpu0) = (Instant::now(), cpu_time());
    let (mut next, mut ended) = (0usize, 0usize);
    while ended < count {
        while next < count && next - ended < DEPTH {
            let op = Op {
                kind: OpKind::Get,
                bucket: "batchbench".into(),
                key: format!("o{next}"),
                object_offset: 0,
                len: size,
                buffer: base,
                buffer_offset: next * size,
                cookie: next as u64 + 1,
            };
            queue.submit(vec![op]).expect("submit");
            next += 1;
        }
        for e in queue.poll(1, DEPTH, Some(Duration::from_secs(300))) {
            assert_eq!(e.status, Status::Complete, "{e:?}");
            ended += 1;
        }
    }
    Round {
        wall: wall0.elapsed(),
        cpu: cpu_time() - cpu0,
    }
}

/// Every object once by 16 threads of the synchronous API (`Runtime::transfer` through the
/// same client's callbacks), each taking the next object.
fn threads_round(rt: &Arc<Runtime>, s3: &S3, base: usize, size: usize, count: usize) -> Round {
    let (wall0, cpu0) = (Instant::now(), cpu_time());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= count {
                    break;
                }
                let obj = ObjectPath {
                    bucket: "batchbench".into(),
                    key: format!("o{i}"),
                };
                let mut req =
                    RdmaRequest::new(s3, TransferKind::Get, &obj, Some((0, size as u64 - 1)));
                let slice = Slice {
                    base,
                    offset: i * size,
                    len: size,
                };
                rdma::transfer(rt, slice, &mut req).expect("GET");
            });
        }
    });
    Round {
        wall: wall0.elapsed(),
        cpu: cpu_time() - cpu0,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{lo:.1}..{hi:.1}")
}

fn main() {
    let args: Vec<String> = std::env::args().filter(|a| !a.starts_with("--")).collect();
    let rounds: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    let Some((client, device)) = server::device_pair() else {
        eprintln!("batch_threads: no RDMA device (run it in the lane: benches/batch-threads)");
        std::process::exit(2);
    };
    let srv = server::Server::start(Some(&device), &[]);
    let env = hipobj::env::EnvConfig {
        max_transfers: THREADS,
        ..Default::default()
    };
    runtime::init_without_gpu(InitConfig::with_nics(Some(&client), None, env)).expect("init");
    let rt = runtime::current().expect("initialised");
    let endpoint = format!("http://{}", srv.addr);
    let s3 = S3::new(
        &endpoint,
        credentials::resolve(&s3::sigv4::test_credential_sources()).expect("keys"),
    )
    .expect("s3");
    let plain = s3::S3::new(srv.addr);
    assert!(plain.create_bucket("batchbench").expect("bucket").status < 300);
    let queue = Queue::new(
        rt.clone(),
        Config {
            endpoint: endpoint.clone(),
            credentials: s3::sigv4::test_credential_sources(),
            depth: DEPTH,
            // Like for like: the threads' GETs are not checked (HIPOBJ_BENCH_VERIFY=1 checks the
            // queue's, to measure what the check costs).
            verify: std::env::var("HIPOBJ_BENCH_VERIFY").is_ok_and(|v| v == "1"),
            transport: hipobj::transport::Mode::Rdma,
        },
    )
    .expect("queue");
    println!(
        "batch_threads: client {client}, server {device}, {rounds} rounds per side and size, alternating; queue GETs checked: {}",
        queue.verifies()
    );
    for (size, count) in [(64usize << 10, 320usize), (4 << 20, 24)] {
        let objects: Vec<Vec<u8>> = (0..count)
            .map(|i| data::pattern(size, i as u64 + 1))
            .collect();
        for (i, o) in objects.iter().enumerate() {
            assert!(
                plain
                    .put("batchbench", &format!("o{i}"), o)
                    .expect("PUT")
                    .status
                    < 300
            );
        }
        let mut memory = vec![0u8; size * count];
        let base = memory.as_mut_ptr() as usize;
        rt.register(base, memory.len(), MemoryKind::Host)
            .expect("register");
        let (mut q, mut t) = (Vec::new(), Vec::new());
        for r in 0..2 * rounds {
            memory.fill(0);
            let (mode, round) = match r % 2 {
                0 => ("queue", queue_round(&queue, base, size, count)),
                _ => ("threads", threads_round(&rt, &s3, base, size, count)),
            };
            for (i, o) in objects.iter().enumerate() {
                assert!(
                    memory[i * size..(i + 1) * size] == o[..],
                    "{mode} round {r}: object {i} differs"
                );
            }
            let secs = round.wall.as_secs_f64();
            let ops = count as f64 / secs;
            let mbs = (size * count) as f64 / secs / 1e6;
            let cpu_us = round.cpu.as_secs_f64() * 1e6 / count as f64;
            println!(
                "round {r} {mode} size {size} ops {count} wall_s {secs:.3} ops_per_s {ops:.1} mb_per_s {mbs:.1} cpu_us_per_op {cpu_us:.0}"
            );
            let rate = if size <= 64 << 10 { ops } else { mbs };
            match mode {
                "queue" => q.push((rate, cpu_us)),
                _ => t.push((rate, cpu_us)),
            }
        }
        rt.deregister(base).expect("deregister");
        let unit = if size <= 64 << 10 { "ops/s" } else { "MB/s" };
        let (qr, tr): (Vec<f64>, Vec<f64>) = (
            q.iter().map(|x| x.0).collect(),
            t.iter().map(|x| x.0).collect(),
        );
        let (qc, tc): (Vec<f64>, Vec<f64>) = (
            q.iter().map(|x| x.1).collect(),
            t.iter().map(|x| x.1).collect(),
        );
        println!(
            "summary size {size}: {unit} queue median {:.1} (range {}, n {}) / threads median {:.1} (range {}, n {}) = {:.2}; CPU us/op queue median {:.0} (range {}) / threads median {:.0} (range {}) = {:.2}",
            median(qr.clone()), range(&qr), qr.len(), median(tr.clone()), range(&tr), tr.len(),
            median(qr.clone()) / median(tr.clone()),
            median(qc.clone()), range(&qc), median(tc.clone()), range(&tc),
            median(qc.clone()) / median(tc.clone()),
        );
    }
    queue.destroy();
    runtime::shutdown().expect("shutdown");
}
