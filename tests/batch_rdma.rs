//! The batch queue (`hipobj::batch`, docs/batch.md) over real verbs in the lane: one thread
//! submits a random mix of GETs and PUTs of 64 KiB to 1 MiB through one queue, cancels about 2 %
//! of them at random moments, and checks that every operation ends exactly once, every GET's bytes
//! are the object's, a canary written into a cancelled GET's buffer right after the cancel
//! returned is intact when the queue is destroyed, and a cancelled PUT left its object as it was
//! or whole. `#[ignore]`d outside the lane (tests/vm/e2e.d/20-rust-e2e runs it with
//! `--include-ignored`), where it fails without an RDMA device.

#[path = "support/data.rs"]
mod data;
#[path = "support/s3.rs"]
mod s3;
#[path = "support/server.rs"]
mod server;

use data::{pattern, Rng};
use hipobj::batch::{Config, Event, Op, OpKind, Queue, Status};
use hipobj::runtime::{self, InitConfig, MemoryKind};
use hipobj::transport::{Mode, Path};
use server::{required_device_pair, Server};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

const SLOT: usize = 1 << 20;
const SLOTS: usize = 48;
const KEYS: usize = 24;
const DEPTH: usize = 32;
const OPERATIONS: usize = 2000;
const CANARY: u8 = 0xa5;

/// What an object holds: the pattern of this seed and length.
#[derive(Clone, Debug, PartialEq)]
enum Content {
    Is(u64, usize),
}

struct InFlight {
    kind: OpKind,
    /// Cancel was called for it (it may have ended before).
    cancelled: bool,
    key: usize,
    slot: usize,
    seed: u64,
    len: usize,
}

#[test]
#[ignore = "needs an RDMA device: the lane (tests/vm/e2e.d/20-rust-e2e) runs it"]
fn one_thread_mixes_gets_and_puts_through_a_queue_and_cancels_some() {
    let (client, device) = required_device_pair();
    let server = Server::start(Some(&device), &[]);
    let s3 = s3::S3::new(server.addr);
    assert!(s3.create_bucket("batch").expect("bucket").status < 300);
    let env = hipobj::env::EnvConfig {
        max_transfers: 8,
        ..Default::default()
    };
    runtime::init_without_gpu(InitConfig::with_nics(Some(&client), None, env)).expect("init");
    let rt = runtime::current().expect("initialised");
    let mut memory = vec![0u8; SLOT * SLOTS];
    let base = memory.as_mut_ptr() as usize;
    rt.register(base, memory.len(), MemoryKind::Host)
        .expect("register");
    let queue = Queue::new(
        rt.clone(),
        Config {
            endpoint: format!("http://{}", server.addr),
            credentials: s3::sigv4::test_credential_sources(),
            depth: DEPTH,
            verify: true,
            transport: Mode::Rdma,
        },
    )
    .expect("queue");

    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64 | 1)
        .unwrap_or(7);
    println!("batch: schedule seed {seed:#x}");
    let mut rng = Rng(seed);
    let mut objects: HashMap<usize, Content> = HashMap::new();
    let mut in_flight: BTreeMap<u64, InFlight> = BTreeMap::new();
    let mut free_slots: BTreeSet<usize> = (0..SLOTS).collect();
    let mut busy_keys: BTreeSet<usize> = BTreeSet::new();
    let mut canaries: Vec<(usize, usize)> = Vec::new();
    let mut ended: BTreeSet<u64> = BTreeSet::new();
    let (mut submitted, mut next_cookie) = (0usize, 1u64);
    let mut tally: BTreeMap<&str, usize> = BTreeMap::new();
    let mut failures: Vec<String> = Vec::new();
    let mut eventfd_seen = false;
    let started = Instant::now();

    while submitted < OPERATIONS || !in_flight.is_empty() {
        // Submit while there is room, a free slot and a free key.
        while submitted < OPERATIONS && in_flight.len() < DEPTH {
            let Some(&slot) = free_slots
                .iter()
                .nth(rng.below(free_slots.len().max(1) as u64) as usize)
            else {
                break;
            };
            let key = rng.below(KEYS as u64) as usize;
            if busy_keys.contains(&key) {
                break;
            }
            let known = objects.get(&key).cloned();
            let kind = match (&known, rng.below(2)) {
                (Some(_), 0) => OpKind::Get,
                _ => OpKind::Put,
            };
            let (op_seed, len) = match (&known, kind) {
                (Some(Content::Is(s, l)), OpKind::Get) => (*s, *l),
                _ => (
                    rng.next() | 1,
                    (64 << 10) + rng.below((SLOT - (64 << 10)) as u64) as usize,
                ),
            };
            let at = slot * SLOT;
            match kind {
                OpKind::Put => memory[at..at + len].copy_from_slice(&pattern(len, op_seed)),
                OpKind::Get => memory[at..at + len].fill(0),
            }
            let cookie = next_cookie;
            next_cookie += 1;
            let op = Op {
                kind,
                bucket: "batch".into(),
                key: format!("k{key}"),
                object_offset: 0,
                len,
                buffer: base,
                buffer_offset: at,
                cookie,
            };
            queue.submit(vec![op]).expect("submit");
            submitted += 1;
            free_slots.remove(&slot);
            busy_keys.insert(key);
            in_flight.insert(
                cookie,
                InFlight {
                    kind,
                    cancelled: false,
                    key,
                    slot,
                    seed: op_seed,
                    len,
                },
            );
            // About 2 % are cancelled, at a random moment: right after their submit, or one
            // of those in flight.
            if rng.below(50) == 0 {
                let pick = match rng.below(2) {
                    0 => cookie,
                    _ => *in_flight
                        .keys()
                        .nth(rng.below(in_flight.len() as u64) as usize)
                        .expect("in flight"),
                };
                queue
                    .cancel(pick)
                    .expect("cancel of an operation not yet polled");
                let f = in_flight.get_mut(&pick).expect("in flight");
                f.cancelled = true;
                if f.kind == OpKind::Get {
                    // After cancel returned nothing may write this buffer for it: the canary
                    // must survive until the queue is destroyed.
                    memory[f.slot * SLOT..f.slot * SLOT + f.len].fill(CANARY);
                    canaries.push((f.slot, f.len));
                }
            }
        }
        if !eventfd_seen {
            let mut pfd = libc::pollfd {
                fd: queue.event_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, the queue's open eventfd.
            let n = unsafe { libc::poll(&mut pfd, 1, 60_000) };
            assert_eq!(n, 1, "the eventfd becomes readable when an event waits");
            eventfd_seen = true;
        }
        let events = queue.poll(1, DEPTH, Some(Duration::from_secs(120)));
        assert!(
            !events.is_empty(),
            "no event in 120 s with {} in flight",
            in_flight.len()
        );
        for e in events {
            check_event(
                &s3,
                &e,
                &mut in_flight,
                &mut objects,
                &memory,
                &mut failures,
                &mut tally,
            );
            assert!(ended.insert(e.cookie), "cookie {} ended twice", e.cookie);
        }
        // Slots and keys of ended operations are free again (a cancelled GET's slot keeps its
        // canary to the end).
        let live_slots: BTreeSet<usize> = in_flight.values().map(|f| f.slot).collect();
        let canary_slots: BTreeSet<usize> = canaries.iter().map(|c| c.0).collect();
        free_slots = (0..SLOTS)
            .filter(|s| !live_slots.contains(s) && !canary_slots.contains(s))
            .collect();
        busy_keys = in_flight.values().map(|f| f.key).collect();
    }
    let elapsed = started.elapsed();
    assert!(
        queue.poll(0, DEPTH, Some(Duration::ZERO)).is_empty(),
        "no event twice"
    );
    assert!(
        queue.cancel(1).is_err(),
        "a polled cookie is no longer known"
    );
    let fd = queue.event_fd();
    queue.destroy();
    for (slot, len) in &canaries {
        let bytes = &memory[slot * SLOT..slot * SLOT + len];
        assert!(
            bytes.iter().all(|&b| b == CANARY),
            "a cancelled GET's buffer (slot {slot}) was written after its cancel returned"
        );
    }
    // SAFETY: F_GETFD on a descriptor number only asks the kernel about it; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    assert!(flags < 0, "destroy closes the eventfd");
    rt.deregister(base)
        .expect("deregister once the queue is gone");
    runtime::shutdown().expect("shutdown");
    println!(
        "batch: {submitted} operations, {} events in {:.1} s; {tally:?}; {} canaries intact",
        ended.len(),
        elapsed.as_secs_f64(),
        canaries.len()
    );
    assert_eq!(ended.len(), submitted, "every operation ended exactly once");
    assert!(
        failures.is_empty(),
        "{} failed: {failures:#?}",
        failures.len()
    );
    assert!(
        tally.get("cancelled").copied().unwrap_or(0) > 0,
        "no cancel met an operation before its end: {tally:?}"
    );
}

fn check_event(
    s3: &s3::S3,
    e: &Event,
    in_flight: &mut BTreeMap<u64, InFlight>,
    objects: &mut HashMap<usize, Content>,
    memory: &[u8],
    failures: &mut Vec<String>,
    tally: &mut BTreeMap<&'static str, usize>,
) {
    let f = in_flight
        .remove(&e.cookie)
        .unwrap_or_else(|| panic!("an event for cookie {} that is not in flight", e.cookie));
    let before = objects.get(&f.key).cloned();
    match (e.status, f.kind) {
        (Status::Complete, OpKind::Put) => {
            *tally.entry("put").or_default() += 1;
            objects.insert(f.key, Content::Is(f.seed, f.len));
        }
        (Status::Complete, OpKind::Get) if f.cancelled => {
            // It ended before the cancel: its bytes were checked against the stored checksum
            // when they landed (if verified); the canary has overwritten them since.
            *tally.entry("get ended before its cancel").or_default() += 1;
        }
        (Status::Complete, OpKind::Get) => {
            *tally.entry("get").or_default() += 1;
            if e.verified {
                *tally.entry("get verified").or_default() += 1;
            }
            let got = &memory[f.slot * SLOT..f.slot * SLOT + f.len];
            if got != pattern(f.len, f.seed).as_slice() {
                failures.push(format!(
                    "GET k{}: the bytes are not the object's ({before:?})",
                    f.key
                ));
            }
        }
        (Status::Cancelled, OpKind::Put) => {
            *tally.entry("cancelled").or_default() += 1;
            // As it was, or whole: read it back over plain HTTP now (no operation on this key
            // is in flight).
            let stored = s3.get("batch", &format!("k{}", f.key)).expect("plain GET");
            let new = pattern(f.len, f.seed);
            match (stored.status, before) {
                (200, _) if stored.body == new => {
                    *tally.entry("cancelled put whole").or_default() += 1;
                    objects.insert(f.key, Content::Is(f.seed, f.len));
                }
                (200, Some(Content::Is(s, l))) if stored.body == pattern(l, s) => {
                    *tally.entry("cancelled put as it was").or_default() += 1;
                }
                (404, None) => {
                    *tally.entry("cancelled put as it was").or_default() += 1;
                }
                (status, before) => failures.push(format!(
                    "cancelled PUT k{}: HTTP {status}, {} bytes: neither as it was ({before:?}) nor whole",
                    f.key,
                    stored.body.len()
                )),
            }
        }
        (Status::Cancelled, OpKind::Get) => {
            *tally.entry("cancelled").or_default() += 1;
        }
        (Status::Failed, kind) => failures.push(format!(
            "{kind:?} k{}: {:?} (HTTP {}, {:?})",
            f.key, e.error, e.http_status, e.s3_code
        )),
    }
}

/// Bad input gets a clear error and changes nothing: no operation queued, no byte of the buffer
/// written, the queue still usable.
#[test]
#[ignore = "needs an RDMA device: the lane (tests/vm/e2e.d/20-rust-e2e) runs it"]
fn bad_input_is_refused_and_changes_nothing() {
    use hipobj::error::OpError;
    let (client, device) = required_device_pair();
    let server = Server::start(Some(&device), &[]);
    let s3 = s3::S3::new(server.addr);
    assert!(s3.create_bucket("bad").expect("bucket").status < 300);
    assert!(s3.put("bad", "obj", &pattern(4096, 3)).expect("PUT").status < 300);
    runtime::init_without_gpu(InitConfig::with_nics(
        Some(&client),
        None,
        Default::default(),
    ))
    .expect("init");
    let rt = runtime::current().expect("initialised");
    let mut memory = vec![0x11u8; 8192];
    let base = memory.as_mut_ptr() as usize;
    rt.register(base, memory.len(), MemoryKind::Host)
        .expect("register");
    let config = |depth| Config {
        endpoint: format!("http://{}", server.addr),
        credentials: s3::sigv4::test_credential_sources(),
        depth,
        verify: true,
        transport: Mode::Rdma,
    };
    for depth in [0, hipobj::batch::MAX_DEPTH + 1] {
        let e = Queue::new(rt.clone(), config(depth)).expect_err("a bad depth is refused");
        assert_eq!(e.code, OpError::InvalidValue, "{e}");
    }
    let mut bad_endpoint = config(2);
    bad_endpoint.endpoint = "ftp://x".into();
    assert!(Queue::new(rt.clone(), bad_endpoint).is_err());
    let queue = Queue::new(rt.clone(), config(2)).expect("queue");
    let get = |cookie, buffer, offset, len| Op {
        kind: OpKind::Get,
        bucket: "bad".into(),
        key: "obj".into(),
        object_offset: 0,
        len,
        buffer,
        buffer_offset: offset,
        cookie,
    };
    let refused = |ops: Vec<Op>, code: OpError| {
        let e = queue.submit(ops).expect_err("refused");
        assert_eq!(e.code, code, "{e}");
        assert_eq!(queue.in_flight(), 0, "a refused submit queued nothing");
    };
    refused(vec![], OpError::InvalidValue);
    refused(
        (1..=3).map(|c| get(c, base, 0, 4096)).collect(),
        OpError::InvalidValue,
    );
    refused(vec![get(1, base + 1, 0, 4096)], OpError::BufNotRegistered);
    refused(vec![get(1, base, 4096, 4097)], OpError::InvalidValue);
    refused(vec![get(1, base, 0, 0)], OpError::InvalidValue);
    let mut put = get(1, base, 0, 4096);
    put.kind = OpKind::Put;
    put.object_offset = 1;
    refused(vec![put], OpError::InvalidValue);
    let mut nameless = get(1, base, 0, 4096);
    nameless.key.clear();
    refused(vec![nameless], OpError::InvalidValue);
    // A good operation after a bad one in the same submit: neither is queued.
    refused(
        vec![get(1, base, 0, 4096), get(2, base + 1, 0, 1)],
        OpError::BufNotRegistered,
    );
    refused(
        vec![get(1, base, 0, 4096), get(1, base, 4096, 4096)],
        OpError::InvalidValue,
    );
    assert!(
        memory.iter().all(|&b| b == 0x11),
        "no refused operation wrote the buffer"
    );
    // Full: submitted and not yet polled counts, so the third is Busy whatever has finished.
    queue.submit(vec![get(1, base, 0, 4096)]).expect("first");
    queue
        .submit(vec![get(2, base, 4096, 4096)])
        .expect("second");
    let e = queue.submit(vec![get(3, base, 0, 4096)]).expect_err("Busy");
    assert_eq!(e.code, OpError::Busy, "{e}");
    let e = queue
        .submit(vec![get(1, base, 0, 4096)])
        .expect_err("the depth is reached");
    assert_eq!(e.code, OpError::Busy, "{e}");
    let mut events = Vec::new();
    while events.len() < 2 {
        events.extend(queue.poll(1, 2, Some(Duration::from_secs(60))));
    }
    assert!(
        events
            .iter()
            .all(|e| e.status == Status::Complete && e.path == Some(Path::Rdma) && e.verified),
        "{events:?}"
    );
    assert!(
        queue.poll(0, 2, Some(Duration::ZERO)).is_empty(),
        "an event is polled once"
    );
    let e = queue.cancel(1).expect_err("a polled cookie is unknown");
    assert_eq!(e.code, OpError::InvalidValue, "{e}");
    assert_eq!(memory[..4096], pattern(4096, 3)[..]);
    assert_eq!(memory[4096..], pattern(4096, 3)[..]);
    queue.destroy();

    // HEAD: an object's size, a bucket, and the refusals, each with the server's status.
    let queue = Queue::new(rt.clone(), config(2)).expect("queue");
    assert_eq!(head(&queue, "bad", Some("obj")), (200, Ok(4096)));
    assert_eq!(head(&queue, "bad", None), (200, Ok(0)));
    assert_eq!(
        head(&queue, "bad", Some("missing")),
        (404, Err(OpError::S3Error))
    );
    assert_eq!(
        head(&queue, "no-such-bucket", None),
        (404, Err(OpError::S3Error))
    );
    assert_eq!(head(&queue, "", None), (0, Err(OpError::InvalidValue)));
    assert_eq!(
        head(&queue, "bad", Some("")),
        (0, Err(OpError::InvalidValue))
    );
    queue.destroy();
    let mut wrong = config(2);
    wrong.credentials.secret_key = Some("not-the-secret".into());
    let queue = Queue::new(rt.clone(), wrong).expect("queue");
    let (status, refused) = queue.head("bad", None);
    let e = refused.expect_err("wrong keys");
    assert_eq!((status, e.code), (403, OpError::S3Error), "{e}");
    assert!(e.to_string().contains("access and secret key"), "{e}");
    queue.destroy();

    // Over plain HTTP: the same GET lands and the event names the path; it is not checked end to
    // end (S3 sends no checksum for a range, and the queue reads ranges).
    let mut http = config(2);
    http.transport = Mode::Http;
    let queue = Queue::new(rt.clone(), http).expect("queue");
    memory.fill(0);
    queue.submit(vec![get(9, base, 0, 4096)]).expect("submit");
    let events = queue.poll(1, 1, Some(Duration::from_secs(60)));
    assert!(
        matches!(events.as_slice(), [e] if e.status == Status::Complete
            && e.path == Some(Path::Http) && e.protocol.is_none() && !e.verified && e.bytes == 4096),
        "{events:?}"
    );
    assert_eq!(memory[..4096], pattern(4096, 3)[..]);
    assert_eq!(queue.counters().path(Path::Http).transfers, 1);
    queue.destroy();
    rt.deregister(base).expect("deregister");
    runtime::shutdown().expect("shutdown");
}

/// A queue's HEAD, its error reduced to the code.
fn head(
    queue: &Queue,
    bucket: &str,
    key: Option<&str>,
) -> (u16, Result<u64, hipobj::error::OpError>) {
    let (status, answer) = queue.head(bucket, key);
    (status, answer.map_err(|e| e.code))
}
