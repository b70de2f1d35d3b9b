//! hipobj-rc-v2 sessions ([`SessionTransfers`], docs/protocol.md sections 10, 13.4-13.5 and 14):
//! what PREPARE, READY and CANCEL do on an RDMA worker, over the [`RdmaPort`] seam and the
//! session table (`session`); the port and staging pool are the engine's shared ones (`shared`).
//!
//! - PREPARE checks what would move (GET: the object and the offset; PUT: a writer made with the
//!   same options as a token PUT, so the same metadata, digests and conditions), then creates the
//!   session's own RC QP in INIT. A PUT takes a staging buffer, posts its one receive, connects
//!   the QP and binds a type-2 window over exactly `size` staging bytes (remote write only) before
//!   the answer: a window can only be bound on a QP in RTS, and the client may write as soon as it
//!   has sent READY (rule 10.5).
//! - READY (the session's owner, its cookie, the client QP named at PREPARE): GET connects the QP
//!   and RDMA WRITEs the selected bytes in chunks of at most max_msg_sz, several in flight, the
//!   last one WRITE_WITH_IMM carrying the cookie, and answers after every completion. PUT waits
//!   (T_exec) for the receive completion of the client's WRITE_WITH_IMM, checks its opcode,
//!   immediate (the cookie) and length (`size`), invalidates the window, then stores the bytes
//!   through the writer and commits it like any PUT.
//! - A session ends after its one transfer, on CANCEL, or at T_prep; its QP is destroyed, its
//!   window invalidated (or deallocated with the QP), its staging returned, its writer aborted.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hipobj::checksum::StoredChecksum;
use hipobj::token::Token;
use tracing::{debug, warn};

use super::port::{
    Peer, RdmaPort, RdmaQp, StagingBuffer, Window, WorkCompletion, WC_RECV_RDMA_WITH_IMM,
};
use super::session::{ClaimError, NewSession, SessionId, SessionLimits, SessionTable};
use super::shared::Shared;
use super::staging::Staged;
use super::transfer::{Direction, Plan, Remote, Transfer, TransferError};
use crate::backend::checksum::moved_checksum;
use crate::backend::{ObjectInfo, ObjectReader, ObjectWriter, WriteOptions};
use crate::config::V2Settings;
use crate::error::Fault;
use crate::identity::Requester;
use crate::stats::Stats;

/// Longest wait for a window bind or invalidation to complete (local operations).
const WINDOW_WAIT: Duration = Duration::from_secs(1);
/// Work request id of a PUT session's receive.
const RECV_WR: u64 = 0x5256;

/// A PREPARE, decoded and checked by the HTTP side (signature, GID = peer, bucket owner).
#[derive(Debug)]
pub struct PrepareJob {
    pub requester: Requester,
    /// The client QP of the token.
    pub client: Peer,
    pub client_psn: u32,
    pub cookie: u32,
    /// 1..=2^31-1 (the codec refuses anything else).
    pub size: u32,
    pub bucket: String,
    pub key: String,
    pub kind: V2Kind,
}

#[derive(Debug)]
pub enum V2Kind {
    /// WRITE `size` bytes from object offset `offset` (fewer at the object's end).
    Get { offset: u64 },
    /// Receive `size` bytes and store them as the object, with these options (built from the
    /// PREPARE's headers exactly as for a PutObject).
    Put { options: Box<WriteOptions> },
    /// Receive `size` bytes and store them as part `part_number` of upload `upload_id`.
    Part {
        upload_id: String,
        part_number: u32,
        options: Box<WriteOptions>,
    },
}

#[derive(Debug)]
pub struct ReadyJob {
    pub requester: Requester,
    pub session: SessionId,
    pub cookie: u32,
    pub client_qpn: u32,
    /// GET: the client's window (address, rkey).
    pub remote: Remote,
}

#[derive(Debug)]
pub enum V2Job {
    Prepare(PrepareJob),
    Ready(ReadyJob),
}

/// How a PREPARE or READY ended.
#[derive(Debug, PartialEq, Eq)]
pub enum V2Outcome {
    Prepared {
        session: SessionId,
        /// Server QPN, GID and port (the `200:<token>` reply).
        server: Token,
        server_psn: u32,
        /// PUT: the window over the staging bytes.
        staging: Option<Window>,
    },
    /// FINAL 200: `bytes` moved; a PUT's stored object; a GET's stored checksum for FINAL's
    /// `x-amz-rdma-checksum` ([`moved_checksum`]).
    Moved {
        bytes: u64,
        stored: Option<Box<ObjectInfo>>,
        etag: String,
        checksum: Option<StoredChecksum>,
    },
    Rejected(Fault),
}

/// hipobj-rc-v2's own refusals, in the one error model ([`Fault`]).
pub mod reject {
    use std::borrow::Cow::Borrowed;

    use crate::error::Fault;

    pub const BUSY: Fault =
        Fault::Busy(Borrowed("too many hipobj-rc-v2 sessions or staging bytes"));
    pub const FAILED: Fault = Fault::Failed(Borrowed("the RDMA side of the session failed"));
    pub const UNKNOWN_SESSION: Fault = Fault::NoSuchSession;
    pub const COOKIE: Fault = Fault::Forbidden(Borrowed("the cookie is not the session's"));
    pub const OTHER_QP: Fault = Fault::BadRequest(Borrowed(
        "x-amz-rdma-qpn is not the QP of the PREPARE token",
    ));
    pub const WRONG_STATE: Fault = Fault::Conflict(Borrowed(
        "the session has moved its transfer or is moving it",
    ));
    pub const DATA_TIMEOUT: Fault =
        Fault::Timeout(Borrowed("the data phase did not finish in time"));
    pub const BAD_DATA: Fault = Fault::BadRequest(Borrowed(
        "the client's WRITE_WITH_IMM did not match the session (opcode, cookie or size)",
    ));
    pub const NOT_SATISFIABLE: Fault =
        Fault::RangeNotSatisfiable(Borrowed("the offset is at or past the object's end"));
}

/// What a waiting session holds.
pub struct Prepared<Q, B: StagingBuffer> {
    client: Peer,
    client_psn: u32,
    server_psn: u32,
    // Declared before `work`: the QP (and its window) goes before the staging it covers.
    qp: Q,
    work: Work<B>,
}

enum Work<B: StagingBuffer> {
    Get {
        object: Box<ObjectReader>,
    },
    Put {
        size: u32,
        writer: ObjectWriter,
        /// The staging buffer the session's window covers, on loan from the pool (back there
        /// when dropped, after the QP and its window).
        staging: Staged<B>,
    },
}

impl<Q, B: StagingBuffer> std::fmt::Debug for Prepared<Q, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// Ends a claimed session whatever happens to its READY (a panic included).
struct Claimed<'e, P: RdmaPort> {
    sessions: &'e SessionTransfers<P>,
    id: SessionId,
}

impl<P: RdmaPort> Drop for Claimed<'_, P> {
    fn drop(&mut self) {
        self.sessions.table.finish(&self.id, Instant::now());
        Stats::sub(&self.sessions.shared.stats.v2_sessions_live, 1);
    }
}

/// hipobj-rc-v2 sessions: the session table over the shared port and staging pool.
pub struct SessionTransfers<P: RdmaPort> {
    shared: Arc<Shared<P>>,
    pub(super) table: SessionTable<Prepared<P::Qp, P::Buffer>>,
    /// T_exec.
    data_timeout: Duration,
}

impl<P: RdmaPort> SessionTransfers<P> {
    pub fn new(shared: Arc<Shared<P>>, settings: &V2Settings) -> Self {
        SessionTransfers {
            shared,
            table: SessionTable::new(SessionLimits {
                max_sessions: settings.max_sessions,
                staging_bytes: settings.staging_bytes,
                prepare_timeout: settings.prepare_timeout,
            }),
            data_timeout: settings.data_timeout,
        }
    }

    /// Run one PREPARE or READY.
    pub fn run(&self, job: V2Job) -> V2Outcome {
        match job {
            V2Job::Prepare(p) => self.prepare(p),
            V2Job::Ready(r) => self.ready(r),
        }
    }

    fn prepare(&self, job: PrepareJob) -> V2Outcome {
        let PrepareJob {
            requester,
            client,
            client_psn,
            cookie,
            size: size32,
            bucket,
            key,
            kind,
        } = job;
        let conn = Conn {
            client,
            client_psn,
            size: size32,
        };
        let put = !matches!(kind, V2Kind::Get { .. });
        let room = match self.table.reserve(if put { u64::from(size32) } else { 0 }) {
            Ok(room) => room,
            Err(_) => return V2Outcome::Rejected(reject::BUSY),
        };
        let size = u64::from(size32);
        let source = match self.open_source(&requester, &bucket, &key, kind, size) {
            Ok(source) => source,
            Err(fault) => return V2Outcome::Rejected(fault),
        };
        let server_psn = hipobj::verbs::rc::random_psn();
        let (prepared, staging) = match self.session_qp(&conn, server_psn, source) {
            Ok(p) => p,
            Err(e) => {
                warn!(error = %e, client_qpn = client.qp_num, "preparing a v2 session failed");
                Stats::bump(&self.shared.stats.v2_failed);
                return V2Outcome::Rejected(reject::FAILED);
            }
        };
        // A session's server token: no starting PSN (the PSN travels apart) and no pairing id.
        let server = self.shared.server_token(prepared.qp.qp_num(), 0, 0);
        let session = self.table.insert(
            room,
            NewSession {
                owner: requester,
                cookie,
                client_qpn: client.qp_num,
                prepared,
            },
            Instant::now(),
        );
        Stats::bump(&self.shared.stats.v2_prepared);
        Stats::add(&self.shared.stats.v2_sessions_live, 1);
        debug!(
            server_qpn = server.qp_num,
            client_qpn = client.qp_num,
            put,
            size,
            "v2 session prepared"
        );
        V2Outcome::Prepared {
            session,
            server,
            server_psn,
            staging,
        }
    }

    /// What the session will move, checked now: a GET's object narrowed to `size` bytes from its
    /// offset (416 at or past its end); a PUT's or a part's writer of `size` bytes.
    fn open_source(
        &self,
        requester: &Requester,
        bucket: &str,
        key: &str,
        kind: V2Kind,
        size: u64,
    ) -> Result<Source, Fault> {
        let storage = self.shared.storage_for(requester);
        match kind {
            V2Kind::Get { offset } => {
                let mut object = storage.open_read(bucket, key, None)?;
                if offset >= object.info.size {
                    return Err(reject::NOT_SATISFIABLE);
                }
                object.narrow(offset..offset.saturating_add(size));
                Ok(Source::Get(Box::new(object)))
            }
            V2Kind::Put { mut options } => {
                options.size = Some(size);
                Ok(Source::Put(storage.create_write(bucket, key, *options)?))
            }
            V2Kind::Part {
                upload_id,
                part_number,
                mut options,
            } => {
                options.size = Some(size);
                let writer =
                    storage.create_part_write(bucket, key, &upload_id, part_number, *options)?;
                Ok(Source::Put(writer))
            }
        }
    }

    /// The session's QP: INIT for a GET; for a PUT also staging, its receive, RTS and the window.
    fn session_qp(
        &self,
        job: &Conn,
        server_psn: u32,
        source: Source,
    ) -> Result<WithWindow<P::Qp, P::Buffer>, String> {
        let depth = self.shared.write_shape.depth as u32;
        let mut qp = match self.shared.port.create_qp(depth + 2) {
            Ok(qp) => qp,
            Err(e) => {
                source.abort();
                return Err(e.to_string());
            }
        };
        let writer = match source {
            Source::Get(object) => {
                let work = Work::Get { object };
                return Ok((self.prepared(job, server_psn, qp, work), None));
            }
            Source::Put(w) => w,
        };
        let staging = match self
            .shared
            .staging
            .take(&self.shared.port, job.size as usize)
        {
            Ok(b) => b,
            Err(e) => {
                writer.abort();
                return Err(e.to_string());
            }
        };
        let window = qp
            .post_recv(RECV_WR)
            .and_then(|()| qp.connect(&job.client, job.client_psn, server_psn))
            .and_then(|()| qp.bind_window(&staging, job.size, WINDOW_WAIT));
        match window {
            Ok(window) => {
                let work = Work::Put {
                    size: job.size,
                    writer,
                    staging,
                };
                Ok((self.prepared(job, server_psn, qp, work), Some(window)))
            }
            Err(e) => {
                // The QP (and whatever window it has) goes before the staging it may cover.
                drop(qp);
                drop(staging);
                writer.abort();
                Err(e.to_string())
            }
        }
    }

    fn prepared(
        &self,
        job: &Conn,
        server_psn: u32,
        qp: P::Qp,
        work: Work<P::Buffer>,
    ) -> Prepared<P::Qp, P::Buffer> {
        Prepared {
            client: job.client,
            client_psn: job.client_psn,
            server_psn,
            qp,
            work,
        }
    }

    fn ready(&self, job: ReadyJob) -> V2Outcome {
        let now = Instant::now();
        let prepared = match self.table.claim(
            &job.session,
            &job.requester,
            job.cookie,
            job.client_qpn,
            now,
        ) {
            Ok(p) => p,
            Err(ClaimError::Unknown) => return V2Outcome::Rejected(reject::UNKNOWN_SESSION),
            Err(ClaimError::Expired(p)) => {
                // Past T_prep: reclaimed now (as the janitor would have), and answered as the
                // unknown session it is from now on (docs/protocol.md section 14).
                self.end_unmoved(*p, &self.shared.stats.v2_expired);
                return V2Outcome::Rejected(reject::UNKNOWN_SESSION);
            }
            Err(ClaimError::Cookie) => return V2Outcome::Rejected(reject::COOKIE),
            Err(ClaimError::OtherQp) => return V2Outcome::Rejected(reject::OTHER_QP),
            Err(ClaimError::WrongState) => return V2Outcome::Rejected(reject::WRONG_STATE),
        };
        let _claimed = Claimed {
            sessions: self,
            id: job.session,
        };
        let outcome = if matches!(prepared.work, Work::Get { .. }) {
            self.get(*prepared, job.cookie, job.remote)
        } else {
            self.put(*prepared, job.cookie)
        };
        match &outcome {
            V2Outcome::Moved { .. } => Stats::bump(&self.shared.stats.v2_ready),
            _ => Stats::bump(&self.shared.stats.v2_failed),
        }
        outcome
    }

    fn get(&self, p: Prepared<P::Qp, P::Buffer>, cookie: u32, remote: Remote) -> V2Outcome {
        let Prepared {
            client,
            client_psn,
            server_psn,
            mut qp,
            work: Work::Get { mut object },
        } = p
        else {
            return V2Outcome::Rejected(reject::FAILED);
        };
        if let Err(e) = qp.connect(&client, client_psn, server_psn) {
            warn!(error = %e, client_qpn = client.qp_num, "connecting a v2 QP failed");
            return V2Outcome::Rejected(reject::FAILED);
        }
        let Ok(staging) = self.shared.staging_buffer() else {
            return V2Outcome::Rejected(reject::FAILED);
        };
        let len = object.len();
        let plan = Plan {
            shape: self.shared.write_shape,
            total: len,
            remote,
            last_imm: Some(cookie),
            send_inv: None,
        };
        #[cfg(feature = "fault-injection")]
        let plan = self.shared.injections.write_plan(plan);
        let result = Transfer::new(
            &mut qp,
            &staging,
            plan,
            self.shared.deadlines,
            &self.shared.stats,
        )
        .and_then(|t| t.run(Direction::Write(&mut *object)));
        // Destroyed while the staging buffer is still held: nothing of it is posted afterwards.
        drop(qp);
        drop(staging);
        match result {
            Ok(()) => {
                Stats::add(&self.shared.stats.v2_bytes_written, len);
                V2Outcome::Moved {
                    bytes: len,
                    stored: None,
                    checksum: moved_checksum(&object.info, &object.range),
                    etag: object.info.etag,
                }
            }
            Err(e) => {
                warn!(error = %e, client_qpn = client.qp_num, len, "v2 GET failed");
                V2Outcome::Rejected(match e {
                    TransferError::Watchdog | TransferError::Deadline(_) => reject::DATA_TIMEOUT,
                    _ => reject::FAILED,
                })
            }
        }
    }

    fn put(&self, p: Prepared<P::Qp, P::Buffer>, cookie: u32) -> V2Outcome {
        let Prepared {
            client,
            mut qp,
            work:
                Work::Put {
                    size,
                    writer,
                    mut staging,
                },
            ..
        } = p
        else {
            return V2Outcome::Rejected(reject::FAILED);
        };
        let checked = wait_receive(&mut qp, self.data_timeout)
            .and_then(|wc| check_client_write(&wc, cookie, size, client.qp_num));
        // No more client writes from here on: the window goes (with the QP when the invalidation
        // cannot be confirmed), before the staging bytes are read or reused.
        if let Err(e) = qp.invalidate_window(WINDOW_WAIT) {
            debug!(error = %e, "window invalidation not confirmed; the QP goes with it");
        }
        drop(qp);
        let outcome = match checked {
            Ok(()) => self.store(&mut staging, size, writer),
            Err(reject) => {
                writer.abort();
                V2Outcome::Rejected(reject)
            }
        };
        // Back to the pool.
        drop(staging);
        outcome
    }

    /// Store the received bytes through the writer (the same commit as any PUT). The caller
    /// owns `buf` and has ended its window and its QP: nothing writes the bytes any more.
    fn store(&self, buf: &mut Staged<P::Buffer>, size: u32, mut writer: ObjectWriter) -> V2Outcome {
        let Some(bytes) = buf.bytes_mut().and_then(|b| b.get(..size as usize)) else {
            writer.abort();
            return V2Outcome::Rejected(reject::FAILED);
        };
        if let Err(e) = writer.append(bytes) {
            warn!(error = %e, "v2 PUT: writing the object failed");
            writer.abort();
            return V2Outcome::Rejected(reject::FAILED);
        }
        match writer.commit() {
            Ok(info) => {
                Stats::add(&self.shared.stats.v2_bytes_read, info.size);
                V2Outcome::Moved {
                    bytes: info.size,
                    etag: info.etag.clone(),
                    stored: Some(Box::new(info)),
                    checksum: None,
                }
            }
            Err(e) => V2Outcome::Rejected(e.into()),
        }
    }

    /// CANCEL: the requester's waiting session ends now. Anything else changes nothing.
    pub fn cancel(&self, requester: &Requester, session: &SessionId) {
        if let Some(p) = self.table.cancel(session, requester, Instant::now()) {
            self.end_unmoved(*p, &self.shared.stats.v2_cancelled);
        }
    }

    /// Reclaim sessions past T_prep; returns how many.
    pub fn expire(&self, now: Instant) -> usize {
        let due = self.table.expire(now);
        let n = due.len();
        for p in due {
            self.end_unmoved(*p, &self.shared.stats.v2_expired);
        }
        n
    }

    /// End a waiting session (reclaimed as below), counted in `why` and no longer live.
    fn end_unmoved(&self, p: Prepared<P::Qp, P::Buffer>, why: &AtomicU64) {
        self.reclaim(p);
        Stats::bump(why);
        Stats::sub(&self.shared.stats.v2_sessions_live, 1);
    }

    /// End a session that moved nothing: window invalidated, QP destroyed, staging returned,
    /// writer aborted.
    fn reclaim(&self, p: Prepared<P::Qp, P::Buffer>) {
        let Prepared { mut qp, work, .. } = p;
        match work {
            Work::Get { .. } => drop(qp),
            Work::Put {
                writer, staging, ..
            } => {
                if let Err(e) = qp.invalidate_window(WINDOW_WAIT) {
                    debug!(error = %e, "window invalidation not confirmed; the QP goes with it");
                }
                drop(qp);
                // Back to the pool, after the QP and its window.
                drop(staging);
                writer.abort();
            }
        }
    }

    /// Sessions prepared or moving now.
    pub fn live(&self) -> usize {
        self.table.live()
    }

    /// Whether session `id` was prepared here (and is not yet forgotten).
    pub fn holds(&self, id: &SessionId) -> bool {
        self.table.holds(id)
    }
}

/// A prepared session and the window a PUT advertises.
type WithWindow<Q, B> = (Prepared<Q, B>, Option<Window>);

/// The client QP a session connects to, and its size.
#[derive(Clone, Copy)]
struct Conn {
    client: Peer,
    client_psn: u32,
    size: u32,
}

/// What a PREPARE opened before its QP exists.
enum Source {
    Get(Box<ObjectReader>),
    Put(ObjectWriter),
}

impl Source {
    fn abort(self) {
        if let Source::Put(w) = self {
            w.abort();
        }
    }
}

/// The PUT session's receive completion checked: the client's WRITE_WITH_IMM of exactly `size`
/// bytes with the session's cookie (400 otherwise), completed without error (500 otherwise).
fn check_client_write(
    wc: &WorkCompletion,
    cookie: u32,
    size: u32,
    client_qpn: u32,
) -> Result<(), Fault> {
    if wc.status != 0 {
        warn!(status = wc.status, client_qpn, "v2 PUT receive failed");
        return Err(reject::FAILED);
    }
    if wc.opcode == WC_RECV_RDMA_WITH_IMM && wc.imm == Some(cookie) && wc.byte_len == size {
        return Ok(());
    }
    debug!(
        ?wc,
        cookie, size, "v2 PUT: the client's write does not match"
    );
    Err(reject::BAD_DATA)
}

/// Wait up to `limit` for the PUT session's receive completion.
fn wait_receive<Q: RdmaQp>(qp: &mut Q, limit: Duration) -> Result<WorkCompletion, Fault> {
    let started = Instant::now();
    let mut polled = Vec::new();
    let mut empty = 0u32;
    loop {
        polled.clear();
        if let Err(e) = qp.poll(&mut polled) {
            warn!(error = %e, "polling a v2 QP failed");
            return Err(reject::FAILED);
        }
        if let Some(wc) = polled.iter().find(|wc| wc.wr_id == RECV_WR) {
            return Ok(*wc);
        }
        if started.elapsed() >= limit {
            return Err(reject::DATA_TIMEOUT);
        }
        empty = empty.saturating_add(1);
        if empty < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

#[cfg(test)]
mod tests {
    //! Every session rule of docs/protocol.md 10.3 / 10.5 on the engine, with the in-memory port.
    use super::*;
    use crate::backend::StorageError;
    use crate::config::V2Settings;
    use crate::identity::Identity;
    use crate::rdma::engine::EngineSettings;
    use crate::rdma::port::PortInfo;
    use crate::rdma::test_double::{DoublePort, QpLog};
    use crate::rdma::test_fixture::{self, object, pattern, tester, Fixture, BASE, CLIENT_GID};
    use hipobj::checksum::{Algorithm, CrcAlgo};
    use md5::{Digest, Md5};
    use std::sync::atomic::Ordering;

    const CLIENT_QPN: u32 = 0x4242;
    const CLIENT_PSN: u32 = 0x00ab_cdef;
    const COOKIE: u32 = 0xc00c_1e55;
    const RKEY: u32 = 0x77;

    fn v2_settings() -> V2Settings {
        V2Settings {
            max_sessions: 4,
            prepare_timeout: Duration::from_secs(10),
            data_timeout: Duration::from_millis(100),
            staging_bytes: 1 << 20,
        }
    }

    /// The shared fixture with these `v2` settings and a watchdog long enough for session data.
    fn fixture_with(port: DoublePort, v2: V2Settings) -> Fixture {
        let settings = EngineSettings {
            watchdog: Duration::from_millis(200),
            flush_wait: Duration::from_secs(1),
            v2,
            ..test_fixture::settings()
        };
        test_fixture::fixture_with(port, &settings)
    }

    fn fixture() -> Fixture {
        fixture_with(DoublePort::new(), v2_settings())
    }

    fn prepare_as(f: &Fixture, who: Requester, key: &str, size: u32, kind: V2Kind) -> V2Outcome {
        f.engine.run_v2(V2Job::Prepare(PrepareJob {
            requester: who,
            client: Peer {
                gid: CLIENT_GID,
                qp_num: CLIENT_QPN,
            },
            client_psn: CLIENT_PSN,
            cookie: COOKIE,
            size,
            bucket: "b".into(),
            key: key.into(),
            kind,
        }))
    }

    fn put_kind() -> V2Kind {
        V2Kind::Put {
            options: Box::default(),
        }
    }

    /// A prepared session: (id, server qpn, server psn, staging window).
    fn prepared(outcome: V2Outcome) -> (SessionId, u32, u32, Option<Window>) {
        match outcome {
            V2Outcome::Prepared {
                session,
                server,
                server_psn,
                staging,
            } => (session, server.qp_num, server_psn, staging),
            other => panic!("expected a prepared session, got {other:?}"),
        }
    }

    fn ready_as(f: &Fixture, who: Requester, session: SessionId, cookie: u32) -> V2Outcome {
        ready_qpn(f, who, session, cookie, CLIENT_QPN)
    }

    fn ready_qpn(
        f: &Fixture,
        who: Requester,
        session: SessionId,
        cookie: u32,
        qpn: u32,
    ) -> V2Outcome {
        f.engine.run_v2(V2Job::Ready(ReadyJob {
            requester: who,
            session,
            cookie,
            client_qpn: qpn,
            remote: Remote {
                addr: BASE,
                rkey: RKEY,
            },
        }))
    }

    fn rejected(o: V2Outcome) -> u16 {
        match o {
            V2Outcome::Rejected(r) => r.status(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    fn stored(f: &Fixture, key: &str) -> Option<Vec<u8>> {
        let mut r = f.storage.open_read("b", key, None).ok()?;
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut r, &mut out).expect("read");
        Some(out)
    }

    #[test]
    fn get_writes_the_selected_bytes_last_write_with_the_cookie_and_answers_after() {
        let f = fixture_with(
            DoublePort::with_info(PortInfo {
                device: "small0".into(),
                port: 1,
                gid: [0xd0; 16],
                max_msg_sz: 256,
                max_rd_atomic: 16,
            }),
            v2_settings(),
        );
        f.port.set_poll_batch(1);
        let data = pattern(3000);
        object(&f, "k", &data);
        f.port.add_region(RKEY, BASE, vec![0; 2000]);
        let (id, qpn, psn, staging) = prepared(prepare_as(
            &f,
            tester(),
            "k",
            2000,
            V2Kind::Get { offset: 100 },
        ));
        assert_eq!(staging, None, "a GET exposes no staging");
        assert!((1..=0xff_ffff).contains(&psn));
        // PREPARE leaves the QP in INIT: nothing connected, nothing posted.
        let log = f.port.log();
        assert!(log.contains(&QpLog::CreatedInit(qpn)), "{log:?}");
        assert!(!log.iter().any(|e| matches!(e, QpLog::Connected(..))));
        assert_eq!(f.stats.v2_sessions_live.load(Ordering::Relaxed), 1);
        match ready_as(&f, tester(), id, COOKIE) {
            V2Outcome::Moved {
                bytes,
                etag,
                checksum,
                ..
            } => {
                assert_eq!(bytes, 2000);
                assert_eq!(etag, hex::encode(Md5::digest(&data)));
                assert_eq!(checksum, None, "part of the object: FINAL names no CRC");
            }
            other => panic!("expected FINAL 200, got {other:?}"),
        }
        assert_eq!(f.port.region(RKEY), data[100..2100]);
        let peer = Peer {
            gid: CLIENT_GID,
            qp_num: CLIENT_QPN,
        };
        assert!(f
            .port
            .log()
            .contains(&QpLog::Connected(qpn, peer, CLIENT_PSN, psn)));
        let posted = f.port.posted();
        assert_eq!(posted.len(), 8, "2000 bytes in 256-byte writes");
        assert!(posted.iter().all(|wr| wr.len <= 256));
        let (last, rest) = posted.split_last().expect("writes");
        assert_eq!(last.imm, Some(COOKIE));
        assert!(rest.iter().all(|wr| wr.imm.is_none()));
        assert!(f.port.max_outstanding() > 1, "several writes in flight");
        assert!(f.port.log().contains(&QpLog::Destroyed(qpn)));
        assert_eq!(f.stats.v2_ready.load(Ordering::Relaxed), 1);
        assert_eq!(f.stats.v2_sessions_live.load(Ordering::Relaxed), 0);
        // One session moves one transfer.
        assert_eq!(rejected(ready_as(&f, tester(), id, COOKIE)), 409);
        assert_eq!(f.port.posted().len(), 8);
    }

    /// The `x-amz-rdma-checksum` of a full CRC64NVME of `bytes`.
    fn crc64nvme_of(bytes: &[u8]) -> Option<StoredChecksum> {
        let crc = CrcAlgo::Crc64Nvme;
        StoredChecksum::stored(crc.into(), &crc.encode(crc.of(bytes)), false)
    }

    /// A GET of the whole object: FINAL names the stored full-object CRC64NVME, which is the
    /// CRC of the bytes written. Part of the object, or an object stored without a checksum:
    /// none; a COMPOSITE value is named as one; of several algorithms, the CRCs come first.
    #[test]
    fn a_whole_object_get_names_the_stored_crc64nvme() {
        let f = fixture();
        let data = pattern(3000);
        object(&f, "k", &data);
        f.port.add_region(RKEY, BASE, vec![0; 3000]);
        let (id, ..) = prepared(prepare_as(
            &f,
            tester(),
            "k",
            3000,
            V2Kind::Get { offset: 0 },
        ));
        match ready_as(&f, tester(), id, COOKIE) {
            V2Outcome::Moved { checksum, .. } => {
                assert_eq!(checksum, crc64nvme_of(&f.port.region(RKEY)));
                assert_eq!(checksum, crc64nvme_of(&data));
            }
            other => panic!("expected FINAL 200, got {other:?}"),
        }
        let mut info = f.storage.head_object("b", "k").expect("head");
        assert_eq!(moved_checksum(&info, &(0..2999)), None, "a range");
        assert_eq!(moved_checksum(&info, &(1..3000)), None, "a range");
        let stored = info
            .checksums
            .crc64nvme
            .clone()
            .expect("the default CRC64NVME");
        info.checksums.crc64nvme = Some(format!("{stored}-2"));
        info.checksums.composite = true;
        let composite = moved_checksum(&info, &(0..3000)).expect("COMPOSITE");
        assert_eq!(
            composite.header_value(),
            format!("CRC64NVME {stored}-2 COMPOSITE")
        );
        info.checksums = Default::default();
        assert_eq!(moved_checksum(&info, &(0..3000)), None, "none stored");
        info.checksums.crc32 = Some("y/Q5Jg==".into());
        info.checksums.sha256 = Some(Algorithm::Sha256.encoded_of(b"x"));
        let text = moved_checksum(&info, &(0..3000)).map(|c| c.header_value());
        assert_eq!(text.as_deref(), Some("CRC32 y/Q5Jg=="), "CRCs before SHAs");
    }

    /// A GET of exactly one part of a multipart object: FINAL names that part's own stored
    /// CRC64NVME. A range across parts, or part of one, gets none.
    #[test]
    fn a_get_of_one_whole_part_names_that_parts_crc64nvme() {
        use crate::backend::{ChecksumAlgo, CompletedPart, UploadOptions};
        let f = fixture();
        let options = UploadOptions {
            checksum: Some(ChecksumAlgo::Crc64Nvme),
            full_object: true,
            ..Default::default()
        };
        let id = f.storage.create_upload("b", "mp", options).expect("upload");
        let first = 5 << 20;
        let data = pattern(first + 1000);
        let mut done = Vec::new();
        for (n, bytes) in [(1u32, &data[..first]), (2, &data[first..])] {
            let compute = WriteOptions {
                compute: Some(ChecksumAlgo::Crc64Nvme),
                ..Default::default()
            };
            let mut w = f
                .storage
                .create_part_write("b", "mp", &id, n, compute)
                .expect("part");
            w.append(bytes).expect("write");
            let info = w.commit().expect("commit");
            done.push(CompletedPart {
                part_number: n,
                etag: info.etag,
                checksums: Default::default(),
            });
        }
        f.storage
            .complete_upload("b", "mp", &id, &done, &Default::default())
            .expect("complete");
        f.port.add_region(RKEY, BASE, vec![0; 1000]);
        let get = V2Kind::Get {
            offset: first as u64,
        };
        let (session, ..) = prepared(prepare_as(&f, tester(), "mp", 1000, get));
        match ready_as(&f, tester(), session, COOKIE) {
            V2Outcome::Moved { checksum, .. } => {
                assert_eq!(checksum, crc64nvme_of(&data[first..]));
                assert_eq!(checksum, crc64nvme_of(&f.port.region(RKEY)));
            }
            other => panic!("expected FINAL 200, got {other:?}"),
        }
        let info = f.storage.head_object("b", "mp").expect("head");
        let (first, all) = (first as u64, data.len() as u64);
        let crc = |r: std::ops::Range<usize>| crc64nvme_of(&data[r]);
        assert_eq!(moved_checksum(&info, &(0..first)), crc(0..first as usize));
        assert_eq!(moved_checksum(&info, &(0..all)), crc(0..all as usize));
        assert_eq!(moved_checksum(&info, &(1..first)), None, "part of a part");
        assert_eq!(
            moved_checksum(&info, &(first - 1..all)),
            None,
            "across parts"
        );
    }

    /// `--inject-write-offset`: a v2 GET's bytes land one offset off and FINAL is still 200.
    #[cfg(feature = "fault-injection")]
    #[test]
    fn injected_write_offset_shifts_a_v2_get_and_answers_final_200() {
        let settings = EngineSettings {
            watchdog: Duration::from_millis(200),
            v2: v2_settings(),
            inject_write_offset: 64,
            ..test_fixture::settings()
        };
        let f = test_fixture::fixture_with(DoublePort::new(), &settings);
        let data = pattern(3000);
        object(&f, "k", &data);
        f.port.add_region(RKEY, BASE, vec![0; 2000]);
        let (id, ..) = prepared(prepare_as(
            &f,
            tester(),
            "k",
            2000,
            V2Kind::Get { offset: 0 },
        ));
        assert!(matches!(
            ready_as(&f, tester(), id, COOKIE),
            V2Outcome::Moved { bytes: 2000, .. }
        ));
        let landed = f.port.region(RKEY);
        assert_eq!(landed[..64], [0; 64]);
        assert_eq!(landed[64..], data[..1936]);
    }

    #[test]
    fn get_at_the_objects_end_sends_what_is_there_and_past_it_is_416() {
        let f = fixture();
        object(&f, "k", &pattern(1500));
        f.port.add_region(RKEY, BASE, vec![0; 4000]);
        let (id, ..) = prepared(prepare_as(
            &f,
            tester(),
            "k",
            4000,
            V2Kind::Get { offset: 1000 },
        ));
        assert!(matches!(
            ready_as(&f, tester(), id, COOKIE),
            V2Outcome::Moved { bytes: 500, .. }
        ));
        assert_eq!(
            rejected(prepare_as(
                &f,
                tester(),
                "k",
                1,
                V2Kind::Get { offset: 1500 }
            )),
            416
        );
        assert_eq!(
            rejected(prepare_as(
                &f,
                tester(),
                "nope",
                1,
                V2Kind::Get { offset: 0 }
            )),
            404
        );
        // Refused PREPAREs made no QP and hold no room.
        assert_eq!(f.engine.v2_live(), 0);
        let created = f
            .port
            .log()
            .iter()
            .filter(|e| matches!(e, QpLog::CreatedInit(_)))
            .count();
        assert_eq!(created, 1);
    }

    #[test]
    fn put_receives_into_a_window_of_exactly_size_bytes_and_stores_like_any_put() {
        let f = fixture();
        let data = pattern(3000);
        let (id, qpn, psn, staging) = prepared(prepare_as(&f, tester(), "p", 3000, put_kind()));
        let window = staging.expect("a PUT advertises its staging window");
        // The receive is posted and the window bound (on the connected QP) before the answer.
        let log = f.port.log();
        let recv = log.iter().position(|e| *e == QpLog::RecvPosted(qpn));
        let peer = Peer {
            gid: CLIENT_GID,
            qp_num: CLIENT_QPN,
        };
        let conn = log
            .iter()
            .position(|e| *e == QpLog::Connected(qpn, peer, CLIENT_PSN, psn));
        let bound = log
            .iter()
            .position(|e| *e == QpLog::Bound(qpn, window.rkey, 3000));
        assert!(
            recv.is_some() && conn.is_some() && bound.is_some(),
            "{log:?}"
        );
        assert!(conn < bound, "{log:?}");
        // The window is exactly `size` bytes and only on the session's QP.
        assert!(f
            .port
            .client_write_with_imm(qpn, window.rkey, 1, &data, COOKIE)
            .is_err());
        assert!(f
            .port
            .client_write_with_imm(qpn + 1, window.rkey, 0, &data, COOKIE)
            .is_err());
        f.port
            .client_write_with_imm(qpn, window.rkey, 0, &data, COOKIE)
            .expect("client write");
        match ready_as(&f, tester(), id, COOKIE) {
            V2Outcome::Moved { bytes, etag, .. } => {
                assert_eq!(bytes, 3000);
                assert_eq!(etag, hex::encode(Md5::digest(&data)));
            }
            other => panic!("expected FINAL 200, got {other:?}"),
        }
        assert_eq!(stored(&f, "p").as_deref(), Some(&data[..]));
        let log = f.port.log();
        let inval = log
            .iter()
            .position(|e| *e == QpLog::Invalidated(qpn, window.rkey));
        let gone = log.iter().position(|e| *e == QpLog::Destroyed(qpn));
        assert!(inval.is_some() && inval < gone, "{log:?}");
        assert_eq!(f.port.windows(), 0);
        assert_eq!(f.engine.sessions.table.staged(), 0);
        assert_eq!(f.stats.v2_bytes_read.load(Ordering::Relaxed), 3000);
    }

    #[test]
    fn a_put_whose_write_does_not_match_the_session_stores_nothing() {
        // (cookie in the immediate, bytes written)
        for (imm, len) in [(COOKIE ^ 1, 3000), (COOKIE, 2999)] {
            let f = fixture();
            let (id, qpn, _, staging) = prepared(prepare_as(&f, tester(), "p", 3000, put_kind()));
            let w = staging.expect("window");
            f.port
                .client_write_with_imm(qpn, w.rkey, 0, &pattern(len), imm)
                .expect("client write");
            assert_eq!(rejected(ready_as(&f, tester(), id, COOKIE)), 400);
            assert!(matches!(
                f.storage.head_object("b", "p"),
                Err(StorageError::NoSuchKey)
            ));
            assert_eq!(f.port.windows(), 0);
            assert_eq!(rejected(ready_as(&f, tester(), id, COOKIE)), 409);
            assert_eq!(f.stats.v2_failed.load(Ordering::Relaxed), 1);
        }
    }

    #[test]
    fn a_put_without_the_clients_write_times_out_408_and_stores_nothing() {
        let f = fixture();
        let (id, ..) = prepared(prepare_as(&f, tester(), "p", 100, put_kind()));
        assert_eq!(rejected(ready_as(&f, tester(), id, COOKIE)), 408);
        assert!(stored(&f, "p").is_none());
        assert_eq!(f.port.windows(), 0);
        assert_eq!(f.engine.v2_live(), 0);
    }

    #[test]
    fn ready_from_another_address_or_identity_is_an_unknown_session_and_moves_nothing() {
        let f = fixture();
        let data = pattern(1000);
        object(&f, "k", &data);
        f.port.add_region(RKEY, BASE, vec![0; 1000]);
        let (id, qpn, ..) = prepared(prepare_as(
            &f,
            tester(),
            "k",
            1000,
            V2Kind::Get { offset: 0 },
        ));
        let others = [
            Requester::new(
                std::net::IpAddr::from([10, 0, 0, 99]),
                Identity::new("tester"),
            ),
            Requester::new(
                std::net::IpAddr::from([10, 0, 0, 2]),
                Identity::new("mallory"),
            ),
        ];
        for other in others {
            assert_eq!(rejected(ready_as(&f, other.clone(), id, COOKIE)), 404);
            // A foreign CANCEL changes nothing either.
            f.engine.v2_cancel(&other, &id);
        }
        assert!(f.port.posted().is_empty());
        assert!(!f.port.log().contains(&QpLog::Destroyed(qpn)));
        assert!(f.port.region(RKEY).iter().all(|&b| b == 0));
        // The owner's session is intact.
        assert!(matches!(
            ready_as(&f, tester(), id, COOKIE),
            V2Outcome::Moved { bytes: 1000, .. }
        ));
        assert_eq!(f.port.region(RKEY), data);
    }

    #[test]
    fn a_wrong_cookie_or_qp_is_refused_and_the_session_kept() {
        let f = fixture();
        object(&f, "k", &pattern(10));
        f.port.add_region(RKEY, BASE, vec![0; 10]);
        let (id, ..) = prepared(prepare_as(&f, tester(), "k", 10, V2Kind::Get { offset: 0 }));
        assert_eq!(rejected(ready_as(&f, tester(), id, COOKIE ^ 0x10)), 403);
        assert_eq!(
            rejected(ready_qpn(&f, tester(), id, COOKIE, CLIENT_QPN + 1)),
            400
        );
        assert!(f.port.posted().is_empty());
        assert!(matches!(
            ready_as(&f, tester(), id, COOKIE),
            V2Outcome::Moved { bytes: 10, .. }
        ));
    }

    #[test]
    fn ready_after_t_prep_is_404_and_the_session_is_reclaimed() {
        let mut v2 = v2_settings();
        v2.prepare_timeout = Duration::from_millis(30);
        let f = fixture_with(DoublePort::new(), v2);
        let data = pattern(500);
        let (id, qpn, _, staging) = prepared(prepare_as(&f, tester(), "p", 500, put_kind()));
        let w = staging.expect("window");
        std::thread::sleep(Duration::from_millis(40));
        // The client writes late, then sends READY: nothing is stored.
        f.port
            .client_write_with_imm(qpn, w.rkey, 0, &data, COOKIE)
            .expect("write lands in the still-bound window");
        assert_eq!(rejected(ready_as(&f, tester(), id, COOKIE)), 404);
        assert!(stored(&f, "p").is_none());
        assert!(f.port.log().contains(&QpLog::Invalidated(qpn, w.rkey)));
        assert!(f.port.log().contains(&QpLog::Destroyed(qpn)));
        assert_eq!(f.stats.v2_expired.load(Ordering::Relaxed), 1);
        assert_eq!(f.engine.v2_live(), 0);
        assert_eq!(f.engine.sessions.table.staged(), 0);
        // And again: still unknown.
        assert_eq!(rejected(ready_as(&f, tester(), id, COOKIE)), 404);
    }

    #[test]
    fn the_janitor_reclaims_sessions_past_t_prep() {
        let f = fixture();
        let (_, qpn, _, staging) = prepared(prepare_as(&f, tester(), "p", 500, put_kind()));
        let w = staging.expect("window");
        assert_eq!(f.engine.expire(Instant::now()), 0);
        assert_eq!(f.engine.expire(Instant::now() + Duration::from_secs(11)), 1);
        assert!(f.port.log().contains(&QpLog::Invalidated(qpn, w.rkey)));
        assert!(f.port.log().contains(&QpLog::Destroyed(qpn)));
        assert!(f
            .port
            .client_write_with_imm(qpn, w.rkey, 0, &[1], COOKIE)
            .is_err());
        assert_eq!(f.engine.v2_live(), 0);
        assert_eq!(f.stats.v2_sessions_live.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn cancel_reclaims_the_owners_session_only() {
        let f = fixture();
        let (id, qpn, _, staging) = prepared(prepare_as(&f, tester(), "p", 500, put_kind()));
        let w = staging.expect("window");
        f.engine.v2_cancel(&tester(), &id);
        assert!(f.port.log().contains(&QpLog::Invalidated(qpn, w.rkey)));
        assert!(f.port.log().contains(&QpLog::Destroyed(qpn)));
        assert_eq!(f.stats.v2_cancelled.load(Ordering::Relaxed), 1);
        // Idempotent; a later READY finds an ended session.
        f.engine.v2_cancel(&tester(), &id);
        assert_eq!(f.stats.v2_cancelled.load(Ordering::Relaxed), 1);
        assert_eq!(rejected(ready_as(&f, tester(), id, COOKIE)), 409);
        assert!(stored(&f, "p").is_none());
    }

    #[test]
    fn sessions_and_staging_bytes_are_limited_503() {
        let mut v2 = v2_settings();
        v2.max_sessions = 2;
        v2.staging_bytes = 1000;
        let f = fixture_with(DoublePort::new(), v2);
        object(&f, "k", &pattern(10));
        prepared(prepare_as(&f, tester(), "p", 800, put_kind()));
        assert_eq!(
            rejected(prepare_as(&f, tester(), "q", 201, put_kind())),
            503
        );
        prepared(prepare_as(&f, tester(), "k", 10, V2Kind::Get { offset: 0 }));
        assert_eq!(
            rejected(prepare_as(&f, tester(), "k", 10, V2Kind::Get { offset: 0 })),
            503
        );
        assert_eq!(f.engine.v2_live(), 2);
    }

    #[test]
    fn a_part_is_stored_like_an_rdma_upload_part() {
        let f = fixture();
        let id = f
            .storage
            .create_upload("b", "mp", Default::default())
            .expect("upload");
        let data = pattern(2048);
        let part = |upload_id: &str| V2Kind::Part {
            upload_id: upload_id.into(),
            part_number: 3,
            options: Box::default(),
        };
        assert_eq!(
            rejected(prepare_as(&f, tester(), "mp", 2048, part("00ff"))),
            404
        );
        let (session, qpn, _, staging) = prepared(prepare_as(&f, tester(), "mp", 2048, part(&id)));
        let w = staging.expect("window");
        f.port
            .client_write_with_imm(qpn, w.rkey, 0, &data, COOKIE)
            .expect("write");
        assert!(matches!(
            ready_as(&f, tester(), session, COOKIE),
            V2Outcome::Moved { bytes: 2048, .. }
        ));
        let parts = f.storage.list_parts("b", "mp", &id).expect("parts");
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].part_number, 3);
        assert_eq!(parts[0].etag, hex::encode(Md5::digest(&data)));
    }

    #[test]
    fn a_failed_qp_setup_is_500_and_holds_nothing() {
        let f = fixture();
        f.port.set_fail_connect(true);
        assert_eq!(
            rejected(prepare_as(&f, tester(), "p", 100, put_kind())),
            500
        );
        assert_eq!(f.engine.v2_live(), 0);
        assert_eq!(f.engine.sessions.table.staged(), 0);
        assert!(stored(&f, "p").is_none());
    }
}
