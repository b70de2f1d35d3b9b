//! Many transfers in flight from one thread (docs/batch.md, `include/hipobj_batch.h`): a queue
//! created with a depth and the transfer settings; operations submitted without blocking, run by
//! the queue's workers with the library's own S3 client, completed out of order as events that
//! the application polls (or waits for on the queue's eventfd); cancel; destroy.
//!
//! The bookkeeping (depth, exactly one event per operation, cancel waiting for a running
//! operation's worker, close) is `hipobj_actors::batch`, which the loom models drive. Here: the
//! operations' checks and their use of the registration ([`Queue::submit`]), the workers
//! ([`worker`]) and the eventfd ([`eventfd`]).

mod eventfd;
pub mod table;
mod worker;

use crate::client::credentials::{self, CredentialSources};
use crate::client::s3::S3;
use crate::error::{Error, OpError, Result};
use crate::rcv2::negotiate::Protocol;
use crate::runtime::{RegistrationUse, Runtime};
use crate::transport::{Counters, Mode, Path, Transport};
use crossbeam_channel::{unbounded, Sender};
use eventfd::EventFd;
use hipobj_actors::batch::{BatchState, CancelError, Cookie, SubmitError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The most operations a queue holds between submit and poll.
pub const MAX_DEPTH: usize = 4096;

/// What a queue is created with.
#[derive(Clone, Debug)]
pub struct Config {
    /// `http(s)://host:port`.
    pub endpoint: String,
    /// Keys, region, CA bundle; what is not given is resolved as the AWS SDKs do.
    pub credentials: CredentialSources,
    /// Operations submitted and not yet polled, 1 ..= [`MAX_DEPTH`].
    pub depth: usize,
    /// Check a whole-object GET's landed bytes against the stored checksum its reply names.
    pub verify: bool,
    /// RDMA or plain HTTP per operation: `Auto` decides by measurement.
    pub transport: Mode,
}

/// GET (object -> buffer) or PUT (buffer -> object).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Get,
    Put,
}

/// One operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    pub kind: OpKind,
    pub bucket: String,
    pub key: String,
    /// GET: the object's first byte to read; PUT: 0 (the whole object is written).
    pub object_offset: u64,
    pub len: usize,
    /// The base of a registration (`hipObjBufRegister*`).
    pub buffer: usize,
    /// Where in the registration the bytes land or come from.
    pub buffer_offset: usize,
    pub cookie: Cookie,
}

/// How an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Complete,
    Failed,
    Cancelled,
}

/// An operation's end, as poll hands it out.
#[derive(Clone, Debug)]
pub struct Event {
    pub cookie: Cookie,
    pub status: Status,
    /// Why it failed.
    pub error: Option<Error>,
    /// The server's status and S3 error code, when a failure came from its answer.
    pub http_status: u16,
    pub s3_code: Option<String>,
    /// Bytes moved.
    pub bytes: u64,
    /// The path the operation took (`None`: it never started).
    pub path: Option<Path>,
    /// Over RDMA: the protocol the endpoint speaks (v1 or hipobj-rc-v2), once known.
    pub protocol: Option<Protocol>,
    /// Whether the landed bytes were checked against the stored checksum (a whole-object GET
    /// whose reply named it); a PUT's bytes are checked by the server (its checksum header).
    pub verified: bool,
    /// Requests sent again after a retryable failure.
    pub retries: u64,
}

impl Event {
    /// An event of `status` that moved nothing (yet).
    fn new(cookie: Cookie, status: Status) -> Event {
        Event {
            cookie,
            status,
            error: None,
            http_status: 0,
            s3_code: None,
            bytes: 0,
            path: None,
            protocol: None,
            verified: false,
            retries: 0,
        }
    }

    fn cancelled(cookie: Cookie) -> Event {
        Event::new(cookie, Status::Cancelled)
    }
}

/// A checked operation waiting for a worker: it holds its use of the registration.
struct Queued {
    op: Op,
    _use: RegistrationUse,
}

/// What the workers share.
struct Shared {
    runtime: Arc<Runtime>,
    s3: S3,
    verify: bool,
    transport: Transport,
    state: BatchState<Queued, Event>,
}

/// A queue and its workers. [`Queue::destroy`] (or drop) cancels what is left and waits.
pub struct Queue {
    shared: Arc<Shared>,
    work: Option<Sender<u64>>,
    workers: Vec<JoinHandle<()>>,
    eventfd: i32,
}

impl Queue {
    /// A queue on `runtime` (the initialised library): its S3 client for `config.endpoint`, its
    /// eventfd and one worker per RDMA connection (`HIPOBJ_MAX_TRANSFERS`), at most `depth`.
    pub fn new(runtime: Arc<Runtime>, config: Config) -> Result<Queue> {
        if !(1..=MAX_DEPTH).contains(&config.depth) {
            return Err(Error::invalid(format!(
                "depth {} is not 1..={MAX_DEPTH}",
                config.depth
            )));
        }
        let given = &config.credentials;
        if given.access_key.is_some() != given.secret_key.is_some() {
            return Err(Error::invalid(
                "one of the access key and the secret key is given: give both or neither",
            ));
        }
        let credentials = credentials::resolve(given).map_err(|f| Error::invalid(f.to_string()))?;
        let s3 =
            S3::new(&config.endpoint, credentials).map_err(|f| Error::invalid(f.to_string()))?;
        let signal = EventFd::new()?;
        let eventfd = signal.fd();
        let shared = Arc::new(Shared {
            runtime: Arc::clone(&runtime),
            s3,
            verify: config.verify,
            transport: Transport::new(config.transport),
            state: BatchState::new(config.depth, Box::new(signal)),
        });
        let (tx, rx) = unbounded::<u64>();
        let count = runtime.env().max_transfers.clamp(1, config.depth);
        let mut workers = Vec::with_capacity(count);
        for i in 0..count {
            let (shared, rx) = (Arc::clone(&shared), rx.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("hipobj-batch-{i}"))
                .spawn(move || worker::run(&shared, &rx));
            match spawned {
                Ok(handle) => workers.push(handle),
                Err(e) => {
                    drop(tx);
                    for w in workers {
                        let _ = w.join();
                    }
                    return Err(Error::internal(format!("cannot start a batch worker: {e}")));
                }
            }
        }
        Ok(Queue {
            shared,
            work: Some(tx),
            workers,
            eventfd,
        })
    }

    /// Queue `ops`, all or none, without blocking: every operation is checked (a GET or PUT
    /// with a bucket, a key and bytes; a PUT from object offset 0; its bytes inside a
    /// registration, whose use it holds until its event), then the room (`hipObjBusy` past the
    /// depth) and the cookies (each names one operation until its event is polled).
    pub fn submit(&self, ops: Vec<Op>) -> Result<()> {
        if ops.is_empty() {
            return Err(Error::invalid("no operation to submit"));
        }
        if ops.len() > self.shared.state.depth() {
            return Err(Error::invalid(format!(
                "{} operations are more than the queue's depth {}",
                ops.len(),
                self.shared.state.depth()
            )));
        }
        let mut queued = Vec::with_capacity(ops.len());
        for (i, op) in ops.into_iter().enumerate() {
            let held = self.check(&op).map_err(|mut e| {
                e.detail = format!("operation {i}: {}", e.detail).into();
                e
            })?;
            queued.push((op.cookie, Queued { op, _use: held }));
        }
        let seqs = self.shared.state.submit(queued).map_err(|e| match e {
            SubmitError::Full { outstanding, depth } => Error::busy(format!(
                "{outstanding} operations wait to be polled; the depth is {depth}"
            )),
            SubmitError::Closed => closed(),
            SubmitError::CookieInUse(c) => {
                Error::invalid(format!("cookie {c:#x} names an operation not yet polled"))
            }
        })?;
        let work = self.work.as_ref().ok_or_else(closed)?;
        for seq in seqs {
            // The workers live as long as the queue's sender: a send fails only after close.
            if work.send(seq).is_err() {
                return Err(closed());
            }
        }
        Ok(())
    }

    /// One operation's checks, and its use of the registration.
    fn check(&self, op: &Op) -> Result<RegistrationUse> {
        if op.bucket.is_empty() || op.key.is_empty() {
            return Err(Error::invalid("an operation needs a bucket and a key"));
        }
        if op.len == 0 {
            return Err(Error::invalid("an operation moves at least one byte"));
        }
        if op.kind == OpKind::Put && op.object_offset != 0 {
            return Err(Error::invalid(
                "a PUT writes the whole object: its object offset is 0",
            ));
        }
        op.object_offset
            .checked_add(op.len as u64)
            .ok_or_else(|| Error::invalid("the object range overflows"))?;
        self.shared
            .runtime
            .use_registered(op.buffer, op.buffer_offset, op.len)
    }

    /// Up to `max` events, once `min` are ready (no more than can still come) or `timeout`
    /// passed (`None`: no limit). Each event is handed out once.
    pub fn poll(&self, min: usize, max: usize, timeout: Option<Duration>) -> Vec<Event> {
        self.shared
            .state
            .poll(min, max, timeout)
            .into_iter()
            .map(|(_, e)| e)
            .collect()
    }

    /// Cancel the operation `cookie` names: a queued one ends now; a running one is asked to
    /// stop and this returns once its worker let go of its buffer (its current transfer ended);
    /// one that already ended keeps its own event.
    pub fn cancel(&self, cookie: Cookie) -> Result<()> {
        self.shared
            .state
            .cancel(cookie, || Event::cancelled(cookie))
            .map_err(|CancelError::Unknown(c)| {
                Error::invalid(format!("no operation not yet polled has cookie {c:#x}"))
            })
    }

    /// Cancel every operation not yet ended.
    pub fn cancel_all(&self) {
        self.shared.state.cancel_all(Event::cancelled);
    }

    /// The eventfd, readable while events wait to be polled; closed by destroy.
    pub fn event_fd(&self) -> i32 {
        self.eventfd
    }

    /// HEAD of an object (`key`), or of a bucket (`None`), through the queue's endpoint and
    /// keys, on the calling thread (retried by the standard mode): the last status a reply
    /// carried (0: none came), and the object's length (0 for a bucket) or why not
    /// (`hipObjS3Error` naming the cause).
    pub fn head(&self, bucket: &str, key: Option<&str>) -> (u16, Result<u64>) {
        if bucket.is_empty() || key == Some("") {
            return (
                0,
                Err(Error::invalid(
                    "a HEAD needs a bucket (and a key, if any, not empty)",
                )),
            );
        }
        let (status, size) = self.shared.s3.head(bucket, key);
        (status, size.map_err(|f| Error::s3(f.to_string())))
    }

    /// What went over RDMA and over HTTP so far, and why (the queue's transport decision).
    pub fn counters(&self) -> Counters {
        self.shared.transport.counters()
    }

    /// Whether whole-object GETs are checked against the stored checksum.
    pub fn verifies(&self) -> bool {
        self.shared.verify
    }

    /// The most operations between submit and poll.
    pub fn depth(&self) -> usize {
        self.shared.state.depth()
    }

    /// Close without waiting for the workers to stop (they stop when the last reference to the
    /// queue goes): what is left is cancelled and this returns once no worker holds an
    /// operation's buffer. The C API's destroy and `hipObjShutdown`, whose queue may still be
    /// in use by a call on another thread.
    pub fn close_now(&self) {
        self.shared.state.close();
    }

    /// Operations queued or running.
    pub fn in_flight(&self) -> usize {
        self.shared.state.in_flight()
    }

    /// Cancel what is left, wait for every worker to let go, stop them.
    pub fn destroy(mut self) {
        self.close();
    }

    fn close(&mut self) {
        self.close_now();
        drop(self.work.take());
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("depth", &self.depth())
            .field("in_flight", &self.in_flight())
            .field("workers", &self.workers.len())
            .field("eventfd", &self.eventfd)
            .finish()
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.close();
    }
}

fn closed() -> Error {
    Error::new(OpError::NotInitialized, "the queue was destroyed")
}
