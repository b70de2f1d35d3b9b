//! The hipobj-rc-v2 client: the state machine of docs/protocol.md 13.6 with the checks, error mapping
//! and deadlines of 5.7 and the rules of docs/protocol.md section 10.
//!
//! The caller owns HTTP: [`S3OpsV2`] sends PREPARE, writes READY, reads its answer (FINAL) and
//! sends CANCEL (the C callbacks of `hipobj_v2.h`, or the command line's and the Python package's
//! own clients). The verbs side of one transfer is a [`DataPath`] (the real one, a per-transfer RC
//! QP over a registered buffer, is `runtime::v2`; unit tests use a double). [`run`] drives both:
//!
//! ```text
//! Idle -> PREPARE (token of the transfer's QP, PSN, cookie)      -> Negotiating
//!      -> RTR/RTS aimed at the server QP (connect deadline)      -> Connecting
//!      -> GET: window bound, one receive posted                  -> Ready
//!      -> READY written; GET: RECV_RDMA_WITH_IMM, imm == cookie;
//!         PUT: WRITE_WITH_IMM of [buf, size) to the staging
//!         window, its completion                                 -> Transferring
//!      -> FINAL read and checked (status, cookie, bytes)         -> Draining
//!      -> window invalidated, QP gone; CANCEL after a failure
//!         once a session was published                           -> Idle
//!      -> GET: FINAL's CRC64NVME, when it names one, compared with
//!         the bytes that landed (docs/protocol.md 15.5)
//! ```
//!
//! Nothing is retried and nothing falls back after READY: the buffer's state is then unknown.

use super::grace;
use super::{
    CancelRequest, Cookie, FinalAnswer, Op, PrepareAnswer, PrepareRequest, Psn, ReadyRequest,
    Session, Target, WireError, MAX_TRANSFER,
};
use crate::checksum::{StoredChecksum, Unchecked, Verdict};
use crate::error::{Error, OpError, Result};
use crate::token::{Token, Transport};
use hipobj_actors::callback::CallbackGuard;
use std::time::{Duration, Instant};

/// `hipError` of a transfer that failed `hipObjBusy` because a deadline expired ("TIME",
/// `HIPOBJ_DIAG_DEADLINE_EXPIRED`).
pub const DIAG_DEADLINE_EXPIRED: i32 = 0x5449_4D45;
/// Longest bucket name and key a target may have (docs/protocol.md 13.2).
pub const MAX_BUCKET_LEN: usize = 255;
pub const MAX_KEY_LEN: usize = 1024;

/// The budgets of one transfer (docs/protocol.md 13.7 defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadlines {
    /// From entry to return: lease wait, every callback, the data phase.
    pub transfer: Duration,
    /// The QP's RTR/RTS after PREPARE (capped by what is left of `transfer`).
    pub connect: Duration,
    /// The one CANCEL after a failure (its own budget).
    pub cancel: Duration,
}

impl Default for Deadlines {
    fn default() -> Deadlines {
        Deadlines {
            transfer: Duration::from_secs(60),
            connect: Duration::from_secs(10),
            cancel: Duration::from_secs(1),
        }
    }
}

/// What a v2 transfer moves: `size` bytes of object `bucket`/`key` (with `query`, e.g.
/// `versionId`, `partNumber`/`uploadId`) starting at object byte `offset`, to or from the start
/// of the caller's buffer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct V2Target {
    pub bucket: String,
    pub key: String,
    /// Query parameters, unencoded; the wire form is canonical (sorted, percent-encoded).
    pub query: Vec<(String, String)>,
    pub offset: u64,
    pub deadlines: Deadlines,
}

impl V2Target {
    /// `bucket`/`key` from offset 0, no query, default deadlines.
    pub fn new(bucket: impl Into<String>, key: impl Into<String>) -> V2Target {
        V2Target {
            bucket: bucket.into(),
            key: key.into(),
            ..V2Target::default()
        }
    }

    /// The `x-amz-rdma-target` value's parts.
    pub fn target(&self) -> Target {
        Target {
            bucket: self.bucket.clone(),
            key: self.key.clone(),
            query: self.query.clone(),
        }
    }

    /// The checks a target must pass before anything is sent (`hipObjInvalidValue`).
    pub fn check(&self) -> Result<()> {
        if self.bucket.is_empty() || self.bucket.len() > MAX_BUCKET_LEN {
            return Err(Error::invalid(format!(
                "a bucket name has 1 to {MAX_BUCKET_LEN} bytes, not {}",
                self.bucket.len()
            )));
        }
        if self.key.is_empty() || self.key.len() > MAX_KEY_LEN {
            return Err(Error::invalid(format!(
                "a key has 1 to {MAX_KEY_LEN} bytes, not {}",
                self.key.len()
            )));
        }
        if self.query.iter().any(|(k, _)| k.is_empty()) {
            return Err(Error::invalid("a query parameter has an empty name"));
        }
        Ok(())
    }
}

/// What a completed transfer reports (FINAL).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct V2Outcome {
    /// Bytes moved, as the server counted them (equal to the transfer's size).
    pub bytes: u64,
    pub etag: Option<String>,
    pub version_id: Option<String>,
    /// `CRC64NVME <base64>` when the server sent one.
    pub checksum: Option<String>,
    /// What the check of a GET's bytes against FINAL's checksum found: `Verified(CRC64NVME)`
    /// (a mismatch fails the transfer), or why there was none (the server named no checksum,
    /// the bytes are in device memory). `NotAsked` for a PUT.
    pub verdict: Verdict,
}

/// The answer to PREPARE as the caller's HTTP client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareReplyV2 {
    /// HTTP status.
    pub status: u16,
    /// `x-amz-rdma-protocol-status: unsupported` was present.
    pub unsupported: bool,
    /// For a 200: the parsed answer, or why it is malformed. `None` for other statuses.
    pub answer: Option<std::result::Result<PrepareAnswer, WireError>>,
}

impl PrepareReplyV2 {
    /// From the status and a header lookup (`get` takes a lowercase name).
    pub fn from_headers<'a>(status: u16, get: impl Fn(&str) -> Option<&'a str>) -> PrepareReplyV2 {
        PrepareReplyV2 {
            status,
            unsupported: super::is_unsupported(status, &get),
            answer: (status == 200).then(|| PrepareAnswer::from_headers(&get)),
        }
    }
}

/// The answer to READY (FINAL) as the caller's HTTP client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinalReplyV2 {
    /// HTTP status.
    pub status: u16,
    /// For a 200 or 204: the parsed answer, or why it is malformed. `None` for other statuses.
    pub answer: Option<std::result::Result<FinalAnswer, WireError>>,
}

impl FinalReplyV2 {
    /// From the status and a header lookup (`get` takes a lowercase name).
    pub fn from_headers<'a>(status: u16, get: impl Fn(&str) -> Option<&'a str>) -> FinalReplyV2 {
        FinalReplyV2 {
            status,
            answer: matches!(status, 200 | 204).then(|| FinalAnswer::from_headers(&get)),
        }
    }
}

/// The caller's HTTP side of hipobj-rc-v2: one implementation per client (the C callbacks of
/// `hipObjOpsV2_t`, the command line, the Python package). Each method is one step of
/// docs/protocol.md 13.6; the requests' `headers()` are what to send (every one of them signed).
/// A non-zero `i32` is the caller's own failure (no answer was seen).
pub trait S3OpsV2 {
    /// POST `PREPARE_PATH` with `req.headers()`; the answer's status and headers.
    fn send_prepare(&mut self, req: &PrepareRequest) -> std::result::Result<PrepareReplyV2, i32>;
    /// POST `READY_PATH` with `req.headers()`: write the request and return without reading the
    /// answer (the data phase runs meanwhile). 0 when the whole request was handed over.
    fn send_ready(&mut self, req: &ReadyRequest) -> i32;
    /// Read the answer to READY (FINAL). Called at most once, and only after `send_ready`
    /// returned 0 and the data phase succeeded; otherwise the exchange is abandoned (close that
    /// connection: never reuse it).
    fn finish_ready(&mut self) -> std::result::Result<FinalReplyV2, i32>;
    /// POST `CANCEL_PATH` with `req.headers()`, best effort (any answer will do).
    fn send_cancel(&mut self, req: &CancelRequest);
    /// Called before each of the methods above: what is left of the transfer's budget, and the
    /// budget of this call (the cancel budget for `send_cancel`). Bound the HTTP exchange by it.
    fn budget(&mut self, _transfer_left: Duration, _this_call: Duration) {}
}

/// The verbs side of one transfer, as [`run`] drives it. `close` is called exactly once, last.
pub trait DataPath {
    /// The token naming the transfer's QP (transport RC, QP number, GID, port; no rkey or range).
    fn token(&self) -> Token;
    /// Move the QP to RTR/RTS aimed at the server QP: `rq_psn` = the server's PSN, `sq_psn` =
    /// ours.
    fn connect(&mut self, server: &Token, server_psn: Psn, client_psn: Psn) -> Result<()>;
    /// Before READY: the (address, rkey) READY names. GET: a window bound on this QP over exactly
    /// the transfer's bytes, remote write only, and one receive posted for the server's
    /// WRITE_WITH_IMM. PUT: the buffer's address and the registration's rkey (bookkeeping only:
    /// the registration grants nothing remotely).
    fn arm(&mut self) -> Result<(u64, u32)>;
    /// PUT, after READY is written: post the WRITE_WITH_IMM of `[buf, size)` to the staging window
    /// with `imm` = the cookie.
    fn push(&mut self, staging_addr: u64, staging_rkey: u32, cookie: Cookie) -> Result<()>;
    /// Wait until `deadline` for the data phase to end: GET, the receive completing as
    /// RECV_RDMA_WITH_IMM with `imm == cookie`; PUT, the write's successful completion.
    fn await_data(&mut self, cookie: Cookie, deadline: Instant) -> Result<()>;
    /// The end, success or not: invalidate the window (docs/protocol.md 10.4; if that cannot be
    /// confirmed, or `failed`, the QP goes to ERR) so nothing reaches the buffer any more.
    fn close(&mut self, failed: bool);
    /// A GET's bytes after `close`, where the NIC wrote host memory the library may read (the
    /// caller's host buffer, or the staging buffer of a staged device buffer, before it is
    /// copied to the device); `None` for device memory the NIC wrote directly.
    fn landed(&self) -> Option<&[u8]>;
}

/// The error of an expired deadline (`hipObjBusy`, `hipError` "TIME").
pub fn deadline_expired(what: &str) -> Error {
    Error::with_hip(
        OpError::Busy,
        DIAG_DEADLINE_EXPIRED,
        format!("hipobj-rc-v2: the deadline expired {what}"),
    )
}

/// The transfer's deadlines as instants.
struct Clock {
    deadlines: Deadlines,
    end: Instant,
}

impl Clock {
    fn new(started: Instant, deadlines: Deadlines) -> Clock {
        Clock {
            deadlines,
            end: started + deadlines.transfer,
        }
    }

    fn left(&self) -> Duration {
        self.end.saturating_duration_since(Instant::now())
    }

    /// `hipObjBusy`/TIME once the transfer's deadline has passed.
    fn check(&self, what: &str) -> Result<()> {
        if Instant::now() >= self.end {
            return Err(deadline_expired(what));
        }
        Ok(())
    }

    /// The end of the connect phase that starts now.
    fn connect_end(&self) -> Instant {
        (Instant::now() + self.deadlines.connect).min(self.end)
    }
}

/// One whole v2 transfer of `size` bytes over `path` and `ops` (the buffer is in use and the
/// concurrency slot held by the caller). `started`: when the call began (its deadline counts
/// from there).
pub fn run(
    op: Op,
    size: u64,
    target: &V2Target,
    path: &mut dyn DataPath,
    ops: &mut dyn S3OpsV2,
    started: Instant,
) -> Result<V2Outcome> {
    let clock = Clock::new(started, target.deadlines);
    let result = negotiate_and_move(op, size, target, path, ops, &clock);
    path.close(result.is_err());
    // After close: nothing reaches the buffer any more. The session has ended on the server.
    let result =
        result.and_then(|outcome| check_landed(op, outcome, &*path).map_err(|e| (None, e)));
    match result {
        Ok(outcome) => Ok(outcome),
        Err((session, e)) => {
            if let Some(session) = session {
                cancel(ops, session, &clock);
            }
            tracing::debug!(op = ?op, bucket = %target.bucket, key = %target.key, "hipobj-rc-v2 transfer failed: {e}");
            Err(e)
        }
    }
}

/// The error of a failed transfer, with the session to cancel when one was published.
type Failed = (Option<Session>, Error);

fn negotiate_and_move(
    op: Op,
    size: u64,
    target: &V2Target,
    path: &mut dyn DataPath,
    ops: &mut dyn S3OpsV2,
    clock: &Clock,
) -> std::result::Result<V2Outcome, Failed> {
    let cookie = Cookie::random();
    let client_psn = Psn::random();
    let prepare = PrepareRequest {
        token: path.token(),
        psn: client_psn,
        cookie,
        op,
        target: target.target(),
        size,
        offset: target.offset,
    };
    clock.check("before PREPARE").map_err(|e| (None, e))?;
    ops.budget(clock.left(), clock.left());
    let asked = Instant::now();
    let reply = {
        let _cb = CallbackGuard::enter();
        ops.send_prepare(&prepare)
    }
    .map_err(|status| (None, Error::s3(format!("sendPrepare failed ({status})"))))?;
    let round_trip = asked.elapsed();
    let answer = check_prepare(op, reply).map_err(|e| (None, e))?;
    let session = answer.session;
    let exchange = Exchange {
        op,
        size,
        cookie,
        client_psn,
        round_trip,
    };
    let moved = move_data(&exchange, &answer, path, ops, clock);
    moved.map_err(|e| (Some(session), e))
}

/// docs/protocol.md 13.3 and 13.7: what a PREPARE answer means.
fn check_prepare(op: Op, reply: PrepareReplyV2) -> Result<PrepareAnswer> {
    let answer = match (reply.status, reply.answer) {
        (200, Some(Ok(answer))) => answer,
        (200, Some(Err(e))) => {
            return Err(Error::rdma(format!(
                "malformed PREPARE answer: {}",
                e.message
            )))
        }
        (501, _) if reply.unsupported => {
            return Err(Error::new(
                OpError::NotSupported,
                "the server does not speak hipobj-rc-v2 (501, unsupported)",
            ))
        }
        (503, _) => return Err(Error::busy("the server is busy (PREPARE answered 503)")),
        (status @ (400 | 403), _) => {
            return Err(Error::invalid(format!("PREPARE answered {status}")))
        }
        (status, _) => return Err(Error::s3(format!("PREPARE answered {status}"))),
    };
    let server = &answer.server;
    if server.transport != Transport::Rc || server.gid == [0; 16] || server.qp_num == 0 {
        return Err(Error::rdma(
            "the PREPARE answer names no RC server QP (transport, GID or QP number)",
        ));
    }
    if op == Op::Put && !matches!(answer.staging, Some((addr, rkey)) if addr != 0 && rkey != 0) {
        return Err(Error::invalid(
            "the PREPARE answer of a PUT advertises no staging buffer",
        ));
    }
    Ok(answer)
}

/// What one transfer negotiated before the session was published.
struct Exchange {
    op: Op,
    size: u64,
    cookie: Cookie,
    client_psn: Psn,
    /// How long PREPARE took: what this server needs now to act on a control request.
    round_trip: Duration,
}

/// Longest pause between writing READY and posting a PUT's write (see [`put_grace`]).
pub const MAX_PUT_GRACE: Duration = Duration::from_millis(250);

/// How long a PUT to a peer that needs a wait (`grace`: one that posts its receive only after
/// READY) waits after READY is written before its WRITE_WITH_IMM: the PREPARE round trip, at
/// most [`MAX_PUT_GRACE`]. A server that connects its QP and posts its receive only when
/// READY arrives (elbencho's s3rdma-server) drops packets that come before; RC retransmits them
/// (7 tries 67 ms apart), and a busy server that needs longer than that would fail the transfer.
/// Waiting about as long as the server took to answer PREPARE covers it without a fixed sleep:
/// a few microseconds against a fast server, which needs none (docs/protocol.md 10.5).
pub fn put_grace(prepare_round_trip: Duration) -> Duration {
    prepare_round_trip.min(MAX_PUT_GRACE)
}

/// From a published session to a checked FINAL.
fn move_data(
    x: &Exchange,
    answer: &PrepareAnswer,
    path: &mut dyn DataPath,
    ops: &mut dyn S3OpsV2,
    clock: &Clock,
) -> Result<V2Outcome> {
    let connect_end = clock.connect_end();
    path.connect(&answer.server, answer.psn, x.client_psn)?;
    if Instant::now() >= connect_end {
        return Err(deadline_expired("while connecting the QP"));
    }
    let (mr_addr, mr_rkey) = path.arm()?;
    let ready = ReadyRequest {
        session: answer.session,
        cookie: x.cookie,
        qpn: path.token().qp_num,
        mr_addr,
        mr_rkey,
    };
    clock.check("before READY")?;
    ops.budget(clock.left(), clock.left());
    let status = {
        let _cb = CallbackGuard::enter();
        ops.send_ready(&ready)
    };
    if status != 0 {
        return Err(Error::s3(format!("sendReadyRequest failed ({status})")));
    }
    let put = match (x.op, answer.staging) {
        (Op::Put, Some((addr, rkey))) => {
            // The wait is the peer's, as learned (`grace`): none for a peer whose receive is
            // posted before it answers PREPARE.
            let peer = &answer.server.gid;
            let plan = grace::PEERS.plan(peer, x.size, put_grace(x.round_trip));
            std::thread::sleep(plan.wait.min(clock.left()));
            let posted = Instant::now();
            path.push(addr, rkey, x.cookie)?;
            Some((plan, posted))
        }
        _ => None,
    };
    let data = path.await_data(x.cookie, clock.end);
    if let Some((plan, posted)) = put {
        let write = data.as_ref().ok().map(|()| posted.elapsed());
        grace::PEERS.learn(&answer.server.gid, plan, write);
    }
    data?;
    clock.check("before reading FINAL")?;
    ops.budget(clock.left(), clock.left());
    let fin = {
        let _cb = CallbackGuard::enter();
        ops.finish_ready()
    }
    .map_err(|status| Error::s3(format!("finishReady failed ({status})")))?;
    check_final(x.op, x.size, x.cookie, fin)
}

/// docs/protocol.md 13.5 and 13.7: what a FINAL means.
fn check_final(op: Op, size: u64, cookie: Cookie, fin: FinalReplyV2) -> Result<V2Outcome> {
    let ok_status = fin.status == 200 || (op == Op::Put && fin.status == 204);
    if !ok_status {
        return Err(Error::s3(format!("READY answered {}", fin.status)));
    }
    let answer = match fin.answer {
        Some(Ok(answer)) => answer,
        Some(Err(e)) => return Err(Error::rdma(format!("malformed FINAL: {}", e.message))),
        None => return Err(Error::rdma("FINAL without its hipobj-rc-v2 headers")),
    };
    if answer.cookie != cookie {
        return Err(Error::rdma("FINAL echoes another cookie"));
    }
    if answer.bytes != size {
        return Err(Error::rdma(format!(
            "FINAL reports {} bytes transferred, {size} were asked",
            answer.bytes
        )));
    }
    Ok(V2Outcome {
        bytes: answer.bytes,
        etag: answer.etag,
        version_id: answer.version_id,
        checksum: answer.checksum,
        verdict: Verdict::NotAsked,
    })
}

/// A GET's FINAL checksum (`x-amz-rdma-checksum`: the stored checksum of the bytes the server
/// wrote) against the bytes that landed (docs/protocol.md 15.5 and 16); a mismatch is an S3 error
/// that names the algorithm and both values; a COMPOSITE value is reported unchecked.
fn check_landed(op: Op, mut outcome: V2Outcome, path: &dyn DataPath) -> Result<V2Outcome> {
    if op != Op::Get {
        return Ok(outcome);
    }
    outcome.verdict = match (&outcome.checksum, path.landed()) {
        (None, _) => Verdict::Unchecked(Unchecked::NoneStored),
        (Some(_), None) => Verdict::Unchecked(Unchecked::DeviceMemory),
        (Some(text), Some(landed)) => final_checksum_verdict(text, landed)?,
    };
    Ok(outcome)
}

/// What FINAL's `x-amz-rdma-checksum` says of `landed`.
fn final_checksum_verdict(text: &str, landed: &[u8]) -> Result<Verdict> {
    let stored =
        StoredChecksum::parse(text).map_err(|e| Error::rdma(format!("FINAL's checksum: {e}")))?;
    match stored.check_bytes(landed) {
        Ok(Ok(algo)) => Ok(Verdict::Verified(algo)),
        Ok(Err(m)) => Err(Error::s3(format!("hipobj-rc-v2 GET: {m}"))),
        Err(why) => Ok(Verdict::Unchecked(why)),
    }
}

/// The one CANCEL of a failed transfer whose session was published (best effort, own budget).
fn cancel(ops: &mut dyn S3OpsV2, session: Session, clock: &Clock) {
    ops.budget(clock.left(), clock.deadlines.cancel);
    let _cb = CallbackGuard::enter();
    ops.send_cancel(&CancelRequest { session });
}

/// The size checks of a v2 transfer: 1 ..= 2^31 - 1 bytes (docs/protocol.md 10.6).
pub fn check_size(size: usize) -> Result<u64> {
    let size = size as u64;
    if size == 0 {
        return Err(Error::invalid("a transfer moves at least one byte"));
    }
    if size > MAX_TRANSFER {
        return Err(Error::new(
            OpError::SizeTooLarge,
            format!("a hipobj-rc-v2 transfer moves at most {MAX_TRANSFER} bytes, not {size}"),
        ));
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::CrcAlgo;
    use crate::rcv2::wire;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// What the doubles saw, in order.
    type Log = Rc<RefCell<Vec<String>>>;

    fn server_token() -> Token {
        Token {
            transport: Transport::Rc,
            qp_num: 0x77,
            gid: [9; 16],
            rkey: 0,
            remote_addr: 0,
            length: 0,
            port: 1,
            lid: 0,
        }
    }

    fn client_token() -> Token {
        Token {
            qp_num: 0x55,
            gid: [3; 16],
            ..server_token()
        }
    }

    /// A data path that records the calls and fails where told.
    struct FakePath {
        log: Log,
        fail_connect: bool,
        /// The cookie the "server" writes with (None: the request's).
        imm: Option<Cookie>,
        data_never_arrives: bool,
        /// What a GET's bytes are after the data phase (None: device memory).
        landed: Option<Vec<u8>>,
    }

    impl DataPath for FakePath {
        fn token(&self) -> Token {
            client_token()
        }
        fn connect(&mut self, server: &Token, server_psn: Psn, client_psn: Psn) -> Result<()> {
            self.log.borrow_mut().push(format!(
                "connect {:x} rq_psn={server_psn} sq_psn={client_psn}",
                server.qp_num
            ));
            if self.fail_connect {
                return Err(Error::rdma("modify_qp failed"));
            }
            Ok(())
        }
        fn arm(&mut self) -> Result<(u64, u32)> {
            self.log.borrow_mut().push("arm".into());
            Ok((0x1000, 0xabc))
        }
        fn push(&mut self, addr: u64, rkey: u32, _cookie: Cookie) -> Result<()> {
            self.log
                .borrow_mut()
                .push(format!("push {addr:x} {rkey:x}"));
            Ok(())
        }
        fn await_data(&mut self, cookie: Cookie, deadline: Instant) -> Result<()> {
            self.log.borrow_mut().push("await".into());
            if self.data_never_arrives {
                std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
                return Err(deadline_expired("in the data phase"));
            }
            match self.imm {
                Some(other) if other != cookie => Err(Error::rdma("imm is not the cookie")),
                _ => Ok(()),
            }
        }
        fn close(&mut self, failed: bool) {
            self.log.borrow_mut().push(format!("close failed={failed}"));
        }
        fn landed(&self) -> Option<&[u8]> {
            self.landed.as_deref()
        }
    }

    /// The server side as the callbacks would see it.
    struct FakeOps {
        log: Log,
        prepare_status: u16,
        unsupported: bool,
        staging: Option<(u64, u32)>,
        final_status: u16,
        /// FINAL's cookie: None = echo the request's.
        final_cookie: Option<Cookie>,
        final_bytes: Option<u64>,
        ready_status: i32,
        cookie: Option<Cookie>,
        size: u64,
        /// FINAL's `x-amz-rdma-checksum`.
        final_checksum: Option<String>,
    }

    fn ops(log: &Log) -> FakeOps {
        FakeOps {
            log: log.clone(),
            prepare_status: 200,
            unsupported: false,
            staging: Some((0x9000, 0x42)),
            final_status: 200,
            final_cookie: None,
            final_bytes: None,
            ready_status: 0,
            cookie: None,
            size: 0,
            final_checksum: None,
        }
    }

    fn path(log: &Log) -> FakePath {
        FakePath {
            log: log.clone(),
            fail_connect: false,
            imm: None,
            data_never_arrives: false,
            landed: Some(vec![7; 4096]),
        }
    }

    impl S3OpsV2 for FakeOps {
        fn send_prepare(
            &mut self,
            req: &PrepareRequest,
        ) -> std::result::Result<PrepareReplyV2, i32> {
            self.log
                .borrow_mut()
                .push(format!("PREPARE {:?} {}", req.op, req.target.encode()));
            assert_eq!(req.token.qp_num, 0x55, "the token names the transfer's QP");
            self.cookie = Some(req.cookie);
            self.size = req.size;
            let answer = PrepareAnswer {
                server: server_token(),
                session: Session::random(),
                psn: Psn::random(),
                staging: self.staging,
            };
            Ok(PrepareReplyV2 {
                status: self.prepare_status,
                unsupported: self.unsupported,
                answer: (self.prepare_status == 200).then_some(Ok(answer)),
            })
        }
        fn send_ready(&mut self, req: &ReadyRequest) -> i32 {
            self.log.borrow_mut().push(format!(
                "READY qpn={:x} addr={:x} rkey={:x}",
                req.qpn, req.mr_addr, req.mr_rkey
            ));
            assert_eq!(Some(req.cookie), self.cookie);
            self.ready_status
        }
        fn finish_ready(&mut self) -> std::result::Result<FinalReplyV2, i32> {
            self.log.borrow_mut().push("FINAL".into());
            let cookie = self.final_cookie.or(self.cookie).ok_or(-9)?;
            Ok(FinalReplyV2 {
                status: self.final_status,
                answer: Some(Ok(FinalAnswer {
                    cookie,
                    bytes: self.final_bytes.unwrap_or(self.size),
                    etag: Some("\"e\"".into()),
                    version_id: None,
                    checksum: self.final_checksum.clone(),
                })),
            })
        }
        fn send_cancel(&mut self, _req: &CancelRequest) {
            self.log.borrow_mut().push("CANCEL".into());
        }
    }

    fn go(op: Op, p: &mut FakePath, o: &mut dyn S3OpsV2) -> Result<V2Outcome> {
        run(op, 4096, &V2Target::new("b", "k/x"), p, o, Instant::now())
    }

    fn steps(log: &Log) -> Vec<String> {
        log.borrow()
            .iter()
            .map(|s| s.split(' ').next().unwrap_or_default().to_string())
            .collect()
    }

    #[test]
    fn get_runs_the_phases_in_order() {
        let log = Log::default();
        let out = go(Op::Get, &mut path(&log), &mut ops(&log)).expect("transfer");
        assert_eq!(out.bytes, 4096);
        assert_eq!(out.etag.as_deref(), Some("\"e\""));
        assert_eq!(
            steps(&log),
            ["PREPARE", "connect", "arm", "READY", "await", "FINAL", "close"]
        );
        assert!(log.borrow()[0].ends_with("/b/k/x"), "{:?}", log.borrow());
        assert!(log.borrow()[1].starts_with("connect 77"));
        assert_eq!(log.borrow()[3], "READY qpn=55 addr=1000 rkey=abc");
        assert_eq!(log.borrow()[6], "close failed=false");
    }

    #[test]
    fn put_pushes_to_the_staging_buffer_after_ready() {
        let log = Log::default();
        let mut o = ops(&log);
        o.final_status = 204;
        go(Op::Put, &mut path(&log), &mut o).expect("transfer");
        assert_eq!(
            steps(&log),
            ["PREPARE", "connect", "arm", "READY", "push", "await", "FINAL", "close"]
        );
        assert!(log.borrow().contains(&"push 9000 42".to_string()));
    }

    #[test]
    fn prepare_statuses_map_as_the_reference_says() {
        for (status, unsupported, want) in [
            (501, true, OpError::NotSupported),
            (501, false, OpError::S3Error),
            (503, false, OpError::Busy),
            (400, false, OpError::InvalidValue),
            (403, false, OpError::InvalidValue),
            (404, false, OpError::S3Error),
            (413, false, OpError::S3Error),
            (500, false, OpError::S3Error),
        ] {
            let log = Log::default();
            let mut o = ops(&log);
            o.prepare_status = status;
            o.unsupported = unsupported;
            let e = go(Op::Get, &mut path(&log), &mut o).unwrap_err();
            assert_eq!(e.code, want, "{status}");
            assert_eq!(e.hip_error, 0);
            // nothing was published: no CANCEL, nothing connected
            assert_eq!(steps(&log), ["PREPARE", "close"], "{status}");
        }
    }

    #[test]
    fn a_put_without_staging_is_invalid() {
        let log = Log::default();
        let mut o = ops(&log);
        o.staging = None;
        let e = go(Op::Put, &mut path(&log), &mut o).unwrap_err();
        assert_eq!(e.code, OpError::InvalidValue);
        o.staging = Some((0, 5));
        assert_eq!(
            go(Op::Put, &mut path(&log), &mut o).unwrap_err().code,
            OpError::InvalidValue
        );
    }

    #[test]
    fn a_malformed_prepare_answer_is_an_rdma_error() {
        struct Malformed(Log);
        impl S3OpsV2 for Malformed {
            fn send_prepare(
                &mut self,
                _req: &PrepareRequest,
            ) -> std::result::Result<PrepareReplyV2, i32> {
                Ok(PrepareReplyV2 {
                    status: 200,
                    unsupported: false,
                    answer: Some(Err(WireError {
                        status: 400,
                        message: "PSN 0".into(),
                    })),
                })
            }
            fn send_ready(&mut self, _req: &ReadyRequest) -> i32 {
                panic!("READY after a malformed PREPARE answer")
            }
            fn finish_ready(&mut self) -> std::result::Result<FinalReplyV2, i32> {
                panic!("FINAL after a malformed PREPARE answer")
            }
            fn send_cancel(&mut self, _req: &CancelRequest) {
                self.0.borrow_mut().push("CANCEL".into());
            }
        }
        let log = Log::default();
        let e = go(Op::Get, &mut path(&log), &mut Malformed(log.clone())).unwrap_err();
        assert_eq!(e.code, OpError::RdmaError);
        assert!(e.detail.contains("PSN 0"), "{e}");
    }

    #[test]
    fn failures_after_prepare_cancel_once_and_close_as_failed() {
        // connect fails
        let log = Log::default();
        let mut p = path(&log);
        p.fail_connect = true;
        let e = go(Op::Get, &mut p, &mut ops(&log)).unwrap_err();
        assert_eq!(e.code, OpError::RdmaError);
        assert_eq!(steps(&log), ["PREPARE", "connect", "close", "CANCEL"]);
        assert!(log.borrow().contains(&"close failed=true".to_string()));
        // READY cannot be written
        let log = Log::default();
        let mut o = ops(&log);
        o.ready_status = -7;
        let e = go(Op::Get, &mut path(&log), &mut o).unwrap_err();
        assert_eq!(e.code, OpError::S3Error);
        assert!(e.detail.contains("-7"));
        assert_eq!(
            steps(&log),
            ["PREPARE", "connect", "arm", "READY", "close", "CANCEL"]
        );
        // the server's immediate is not our cookie: FINAL is never read
        let log = Log::default();
        let mut p = path(&log);
        p.imm = Some(Cookie::random());
        let e = go(Op::Get, &mut p, &mut ops(&log)).unwrap_err();
        assert_eq!(e.code, OpError::RdmaError);
        assert_eq!(
            steps(&log),
            ["PREPARE", "connect", "arm", "READY", "await", "close", "CANCEL"]
        );
    }

    #[test]
    fn final_checks() {
        type Change = fn(&mut FakeOps);
        let cases: [(Change, OpError); 4] = [
            (|o| o.final_status = 500, OpError::S3Error),
            (|o| o.final_status = 204, OpError::S3Error), // 204 is for PUTs only
            (
                |o| o.final_cookie = Some(Cookie::random()),
                OpError::RdmaError,
            ),
            (|o| o.final_bytes = Some(4095), OpError::RdmaError),
        ];
        for (change, want) in cases {
            let log = Log::default();
            let mut o = ops(&log);
            change(&mut o);
            let e = go(Op::Get, &mut path(&log), &mut o).unwrap_err();
            assert_eq!(e.code, want, "{e}");
            assert_eq!(steps(&log).last().map(String::as_str), Some("CANCEL"));
        }
    }

    /// A GET whose FINAL names a CRC64NVME: checked against the bytes that landed, after the
    /// window is gone. A match is `Verified`; a wrong value fails the transfer with an S3 error
    /// naming the algorithm and both values (no CANCEL: the server's session has ended); no
    /// value, or device memory, is said to be unchecked; a PUT's FINAL is not checked.
    #[test]
    fn a_gets_final_checksum_is_compared_with_what_landed() {
        let landed = vec![7u8; 4096];
        let right = wire::final_crc64nvme_text(CrcAlgo::Crc64Nvme.of(&landed));
        let log = Log::default();
        let mut o = ops(&log);
        o.final_checksum = Some(right.clone());
        let out = go(Op::Get, &mut path(&log), &mut o).expect("the bytes match");
        assert_eq!(out.verdict, Verdict::Verified(CrcAlgo::Crc64Nvme.into()));
        assert_eq!(out.checksum.as_deref(), Some(right.as_str()));

        let log = Log::default();
        let mut o = ops(&log);
        let mut flipped = landed.clone();
        flipped[4000] ^= 1;
        o.final_checksum = Some(wire::final_crc64nvme_text(CrcAlgo::Crc64Nvme.of(&flipped)));
        let e = go(Op::Get, &mut path(&log), &mut o).expect_err("a flipped byte");
        assert_eq!(e.code, OpError::S3Error, "{e}");
        let text = e.to_string();
        assert!(text.contains("CRC64NVME mismatch"), "{text}");
        assert!(text.contains(&right["CRC64NVME ".len()..]), "{text}");
        assert_eq!(
            steps(&log),
            ["PREPARE", "connect", "arm", "READY", "await", "FINAL", "close"],
            "checked after close, and no CANCEL"
        );

        let log = Log::default();
        let out = go(Op::Get, &mut path(&log), &mut ops(&log)).expect("no checksum");
        assert_eq!(out.verdict, Verdict::Unchecked(Unchecked::NoneStored));
        let mut device = path(&log);
        device.landed = None;
        let mut o = ops(&log);
        o.final_checksum = wrong_checksum();
        let out = go(Op::Get, &mut device, &mut o).expect("device memory is not read");
        assert_eq!(out.verdict, Verdict::Unchecked(Unchecked::DeviceMemory));
        let mut o = ops(&log);
        o.final_checksum = wrong_checksum();
        let out = go(Op::Put, &mut path(&log), &mut o).expect("a PUT's FINAL is not checked");
        assert_eq!(out.verdict, Verdict::NotAsked);
    }

    /// A FINAL checksum that no 4096 bytes of 7 have.
    fn wrong_checksum() -> Option<String> {
        Some(wire::final_crc64nvme_text(
            CrcAlgo::Crc64Nvme.of(b"123456789"),
        ))
    }

    /// Revision 6: FINAL names any stored algorithm; a malformed value is refused, a COMPOSITE one
    /// is reported unchecked.
    #[test]
    fn a_final_checksum_of_any_algorithm_is_checked_and_a_malformed_one_refused() {
        use crate::checksum::Algorithm;
        let sha = format!("SHA256 {}", Algorithm::Sha256.encoded_of(b"123456789"));
        assert_eq!(
            final_checksum_verdict(&sha, b"123456789").expect("right"),
            Verdict::Verified(Algorithm::Sha256)
        );
        let e = final_checksum_verdict(&sha, b"123456780").expect_err("a flipped byte");
        assert!(e.to_string().contains("SHA256 mismatch"), "{e}");
        let e = final_checksum_verdict("SHA256 abc", b"123456789").expect_err("malformed");
        assert_eq!(e.code, OpError::RdmaError, "{e}");
        let composite =
            final_checksum_verdict("CRC32C 4waSgw==-2 COMPOSITE", b"1").expect("composite");
        assert!(
            matches!(composite, Verdict::Unchecked(Unchecked::Composite(_))),
            "{composite:?}"
        );
    }

    #[test]
    fn deadlines_expire_as_busy_time() {
        let log = Log::default();
        let mut p = path(&log);
        p.data_never_arrives = true;
        let mut target = V2Target::new("b", "k");
        target.deadlines.transfer = Duration::from_millis(50);
        let mut o = ops(&log);
        let e = run(Op::Get, 1, &target, &mut p, &mut o, Instant::now()).unwrap_err();
        assert_eq!(
            (e.code, e.hip_error),
            (OpError::Busy, DIAG_DEADLINE_EXPIRED)
        );
        assert_eq!(steps(&log).last().map(String::as_str), Some("CANCEL"));
        // a call whose budget is spent before it starts sends nothing
        let log = Log::default();
        let started = Instant::now() - Duration::from_secs(61);
        let e = run(
            Op::Get,
            1,
            &V2Target::new("b", "k"),
            &mut path(&log),
            &mut ops(&log),
            started,
        )
        .unwrap_err();
        assert_eq!(e.hip_error, DIAG_DEADLINE_EXPIRED);
        assert_eq!(steps(&log), ["close"]);
    }

    #[test]
    fn the_put_grace_follows_the_prepare_round_trip() {
        assert_eq!(
            put_grace(Duration::from_micros(80)),
            Duration::from_micros(80)
        );
        assert_eq!(put_grace(Duration::from_secs(3)), MAX_PUT_GRACE);
    }

    #[test]
    fn sizes_and_targets_are_checked() {
        assert_eq!(check_size(0).unwrap_err().code, OpError::InvalidValue);
        assert_eq!(check_size(1).unwrap(), 1);
        assert_eq!(check_size(0x7fff_ffff).unwrap(), 0x7fff_ffff);
        assert_eq!(
            check_size(0x8000_0000).unwrap_err().code,
            OpError::SizeTooLarge
        );
        assert!(V2Target::new("b", "k").check().is_ok());
        assert!(V2Target::new("", "k").check().is_err());
        assert!(V2Target::new("b", "").check().is_err());
        assert!(V2Target::new("b".repeat(256), "k").check().is_err());
        assert!(V2Target::new("b", "k".repeat(1025)).check().is_err());
        let mut t = V2Target::new("b", "k");
        t.query = vec![(String::new(), "v".into())];
        assert!(t.check().is_err());
    }

    #[test]
    fn replies_from_headers() {
        let headers = [("x-amz-rdma-protocol-status", " Unsupported ")];
        let get = |n: &str| headers.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
        let r = PrepareReplyV2::from_headers(501, get);
        assert!(r.unsupported);
        assert!(r.answer.is_none());
        let r = PrepareReplyV2::from_headers(200, |_| None);
        assert!(matches!(r.answer, Some(Err(_))), "a bare 200 is malformed");
        let r = FinalReplyV2::from_headers(409, |_| None);
        assert!(r.answer.is_none());
    }
}
