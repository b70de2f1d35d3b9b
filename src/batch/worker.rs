//! A queue's worker: takes the number of a submitted operation, claims it, runs it with the
//! library's own S3 client as the transfer engine runs a part, and finishes it with its event.
//! The queue's transport decides each operation's path ([`crate::transport`]): RDMA (v1 or
//! hipobj-rc-v2 as the endpoint speaks it; the worker leases one RDMA connection per transfer and
//! owns it while the transfer runs) or plain HTTP (the bodies copied to and from the
//! registration). Either way: the AWS standard retry mode, a PUT's checksum sent for the server
//! to check, a whole-object GET's landed bytes checked against the stored checksum its reply
//! names; RDMA also fails over across rails. Under `auto`, an endpoint that declines RDMA (501)
//! gets the operation again over HTTP, and every later one.

use super::{Event, OpKind, Queued, Shared, Status};
use crate::client::failure::{Failure, Retryable};
use crate::client::plain::HttpStore;
use crate::client::s3::ObjectPath;
use crate::client::store::S3ObjectStore;
use crate::engine::{
    self, EngineError, HostBuffers, Job, ObjectStore, Retrier, RetryPolicy, Segment, Settings,
    Slice, DEFAULT_PART_SIZE,
};
use crate::error::Error;
use crate::transport::{Destination, Direction, Mode, Path};
use crossbeam_channel::Receiver;
use hipobj_actors::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The worker's loop: until the queue closes its channel.
pub(super) fn run(shared: &Shared, work: &Receiver<u64>) {
    while let Ok(seq) = work.recv() {
        let Some((queued, cancel)) = shared.state.claim(seq) else {
            continue;
        };
        let ended = run_one(shared, &queued, &cancel);
        // The registration's use ends with the operation, before its event is out.
        let cookie = queued.op.cookie;
        drop(queued);
        shared
            .state
            .finish(seq, |asked| ended.into_event(cookie, asked));
    }
}

/// What running an operation came to.
struct Ended {
    result: Result<Moved, Failed>,
    path: Path,
    protocol: Option<crate::rcv2::negotiate::Protocol>,
}

struct Moved {
    bytes: u64,
    verified: bool,
    retries: u64,
}

struct Failed {
    error: Error,
    http_status: u16,
    s3_code: Option<String>,
    cancelled: bool,
    /// The endpoint declined RDMA (501).
    declined: bool,
}

impl Ended {
    fn into_event(self, cookie: u64, asked: bool) -> Event {
        let mut event = match self.result {
            Ok(moved) => Event {
                bytes: moved.bytes,
                verified: moved.verified,
                retries: moved.retries,
                ..Event::new(cookie, Status::Complete)
            },
            Err(f) if f.cancelled || asked => Event::new(cookie, Status::Cancelled),
            Err(f) => Event {
                error: Some(f.error),
                http_status: f.http_status,
                s3_code: f.s3_code,
                ..Event::new(cookie, Status::Failed)
            },
        };
        event.path = Some(self.path);
        event.protocol = self.protocol.filter(|_| self.path == Path::Rdma);
        event
    }
}

fn run_one(shared: &Shared, queued: &Queued, cancel: &Arc<AtomicBool>) -> Ended {
    let op = &queued.op;
    let object = ObjectPath {
        bucket: op.bucket.clone(),
        key: op.key.clone(),
    };
    let slice = Slice {
        base: op.buffer,
        offset: op.buffer_offset,
        len: op.len,
    };
    let transport = &shared.transport;
    let endpoint = shared.s3.endpoint();
    let (direction, destination) = (
        direction(op.kind),
        Destination::of_buffer(shared.runtime.buffer_kind(op.buffer)),
    );
    let mut ticket = transport.pick(endpoint, op.len as u64, direction, destination);
    let mut result = run_on(shared, &object, op, slice, ticket.path(), cancel);
    if let Err(f) = &result {
        if f.declined && ticket.path() == Path::Rdma && transport.mode() != Mode::Rdma {
            if transport.declined(endpoint) {
                tracing::info!(
                    endpoint,
                    "the endpoint declined RDMA: queued operations go over plain HTTP"
                );
            }
            ticket = transport.pick(endpoint, op.len as u64, direction, destination);
            result = run_on(shared, &object, op, slice, ticket.path(), cancel);
        }
    }
    if let Ok(moved) = &result {
        transport.record(&ticket, moved.bytes);
    }
    Ended {
        result,
        path: ticket.path(),
        protocol: shared.s3.negotiation().spoken(endpoint),
    }
}

/// `op` over `path`.
fn run_on(
    shared: &Shared,
    object: &ObjectPath,
    op: &super::Op,
    slice: Slice,
    path: Path,
    cancel: &AtomicBool,
) -> Result<Moved, Failed> {
    match path {
        Path::Rdma => {
            let store = S3ObjectStore {
                s3: &shared.s3,
                runtime: &shared.runtime,
                object,
            };
            run_with(shared, &store, op, slice, cancel)
        }
        Path::Http => {
            let store = HttpStore {
                s3: &shared.s3,
                object,
                memory: shared.runtime.as_ref(),
            };
            run_with(shared, &store, op, slice, cancel)
        }
    }
}

fn run_with<S: ObjectStore<Error = Retryable>>(
    shared: &Shared,
    store: &S,
    op: &super::Op,
    slice: Slice,
    cancel: &AtomicBool,
) -> Result<Moved, Failed> {
    match op.kind {
        OpKind::Get => get(shared, store, slice, op.object_offset, cancel),
        OpKind::Put => put(shared, store, slice, cancel),
    }
}

fn direction(kind: OpKind) -> Direction {
    match kind {
        OpKind::Get => Direction::Get,
        OpKind::Put => Direction::Put,
    }
}

/// The GET of `slice.len` object bytes from `first`: parts of at most the engine's part size,
/// one transfer each (retried by the standard mode), stopping between parts when cancelled; a
/// single transfer whose reply named the stored checksum (the whole object moved) is checked.
fn get<S: ObjectStore<Error = Retryable>>(
    shared: &Shared,
    store: &S,
    slice: Slice,
    first: u64,
    cancel: &AtomicBool,
) -> Result<Moved, Failed> {
    let policy = RetryPolicy::standard();
    let retrier = Retrier::with_policy(&policy, cancel);
    let part = DEFAULT_PART_SIZE as usize;
    let mut done = 0usize;
    let mut named_whole = None;
    while done < slice.len {
        if cancel.load(Ordering::Acquire) {
            return Err(cancelled());
        }
        let n = part.min(slice.len - done);
        let piece = Slice {
            base: slice.base,
            offset: slice.offset + done,
            len: n,
        };
        let at = first + done as u64;
        let (got, named) = retrier
            .run(&|| format!("GET bytes {at}-{}", at + n as u64 - 1), || {
                store.get_named(piece, at)
            })
            .map_err(store_failure)?;
        if got != n as u64 {
            return Err(failure(Error::s3(format!(
                "the server wrote {got} bytes for the {n} at {at} (is the object shorter?)"
            ))));
        }
        if n == slice.len {
            named_whole = named;
        }
        done += n;
    }
    let verified = match (shared.verify, named_whole) {
        (true, Some(named)) => check_landed(shared, slice, &named)?,
        _ => false,
    };
    Ok(Moved {
        bytes: slice.len as u64,
        verified,
        retries: retrier.retries(),
    })
}

/// The landed bytes against the stored checksum a reply named for them: `true` when checked
/// (a CRC), `false` when the value cannot be checked here (a SHA or a COMPOSITE value).
fn check_landed(
    shared: &Shared,
    slice: Slice,
    named: &crate::checksum::StoredChecksum,
) -> Result<bool, Failed> {
    let Ok(stored) = named.object_checksum() else {
        return Ok(false);
    };
    let landed = shared
        .runtime
        .crc_of_registered(slice.base, slice.offset, slice.len, stored.algo)
        .map_err(failure)?;
    if landed != stored.value {
        return Err(failure(Error::s3(format!(
            "the landed bytes' {} is not the stored {} the reply named",
            stored.algo,
            named.header_value()
        ))));
    }
    Ok(true)
}

/// The PUT of `slice` as the whole object: the engine's upload from registered memory (one PUT
/// up to the multipart threshold, else a multipart upload, aborted when it fails or is
/// cancelled), its CRC64NVME sent for the server to check.
fn put<S: ObjectStore<Error = Retryable>>(
    shared: &Shared,
    store: &S,
    slice: Slice,
    cancel: &AtomicBool,
) -> Result<Moved, Failed> {
    let job = Job {
        settings: Settings::with_concurrency(1),
        progress: &|_| {},
        cancel,
    };
    let buffers = HostBuffers(Arc::clone(&shared.runtime));
    let report = engine::upload_from(
        store,
        &[Segment::Registered(slice)],
        shared.runtime.as_ref(),
        &buffers,
        &job,
    )
    .map_err(|e| match e {
        EngineError::Cancelled { .. } => cancelled(),
        EngineError::Store { error, .. } => store_failure(error),
        EngineError::Library(e) => failure(e),
        other => failure(Error::s3(other.to_string())),
    })?;
    Ok(Moved {
        bytes: report.bytes,
        verified: false,
        retries: report.retries,
    })
}

fn failure(error: Error) -> Failed {
    Failed {
        error,
        http_status: 0,
        s3_code: None,
        cancelled: false,
        declined: false,
    }
}

fn cancelled() -> Failed {
    Failed {
        cancelled: true,
        ..failure(Error::invalid("cancelled"))
    }
}

/// A failure of the S3 client: the library error it stands for, with the server's answer.
fn store_failure(r: Retryable) -> Failed {
    let (http_status, s3_code) = match &r.server {
        Some(reply) => (reply.status, reply.code.clone()),
        None => (0, None),
    };
    let declined = matches!(r.failure, Failure::RdmaDeclined(_));
    let mut error = Error::s3(r.failure.to_string());
    if let Some(reply) = r.server {
        error = error.with_server(*reply);
    }
    Failed {
        http_status,
        s3_code,
        declined,
        ..failure(error)
    }
}
