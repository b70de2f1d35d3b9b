//! One transfer: the request/reply exchange of docs/protocol.md section 5, with staging around it.

use super::rails::Rail;
use super::registration::refusal;
use super::{Runtime, S3Ops, SyncDirection, TransferKind};
use crate::error::{Error, OpError, Result};
use crate::hip::CopyDirection;
use crate::pool::{Connection, Lease, PairOutcome, Pool, PostedBind, Protection, WindowEnd};
use crate::registry::{Buffer, BufferKind};
use crate::reply::{Reply, REPLY_BUFFER_LEN};
use crate::token::{Token, TOKEN_HEX_LEN};
use crate::verbs::{Access, BindRange, Mr};
use hipobj_actors::callback::CallbackGuard;
use hipobj_actors::registry::{Entry, Registry, UseGuard};
use hipobj_actors::stages::{self, Stage};
use hipobj_actors::sync::Arc;
use hipobj_actors::transfer::{self, Direction, Refused, TransferHost, TransferParts};
use std::time::Duration;

/// A transfer never sends more than this many requests (docs/protocol.md rule 5.3).
const MAX_REQUESTS: usize = 3;

impl Runtime {
    pub(super) fn stage(
        &self,
        guard: UseGuard<Buffer>,
        dir: CopyDirection,
        offset: usize,
        size: usize,
    ) -> Result<UseGuard<Buffer>> {
        if guard.entry().payload().kind() != BufferKind::DeviceStaged {
            return Ok(guard);
        }
        let stager = self
            .stager
            .as_ref()
            .ok_or_else(|| Error::internal("staged buffer without a stager"))?;
        stager.copy(
            guard,
            dir,
            offset,
            size,
            Duration::from_millis(self.env.stage_timeout_ms),
        )
    }

    /// `hipObjGet`/`hipObjPut` after the argument checks of the ffi layer: the composition of
    /// `hipobj_actors::transfer::run` (the one the loom models drive) over this runtime's parts.
    ///
    /// A staged PUT is staged before a connection is leased (the lease is not held across the
    /// device -> host copy). The lease moves the connection to the caller's thread, where the
    /// exchange uses it directly; after a failure (other than a refusal that started nothing on
    /// the current pairing), or a window whose invalidation was not confirmed, the lease goes to the connection's worker, which replaces the QP before the
    /// connection rejoins the pool, and the caller returns at once.
    pub fn transfer(
        &self,
        kind: TransferKind,
        ptr: usize,
        size: usize,
        offset: u64,
        ops: &mut dyn S3Ops,
    ) -> Result<()> {
        let direction = match kind {
            TransferKind::Get => Direction::Get,
            TransferKind::Put => Direction::Put,
        };
        self.rails.run(size, |index, rail| {
            transfer::run(
                &OnRail::new(self, index, rail),
                direction,
                ptr,
                size,
                offset,
                &mut *ops,
            )
        })
    }

    /// `hipObjBufSync` after the argument checks of the ffi layer.
    pub fn sync(&self, ptr: usize, size: usize, offset: u64, dir: SyncDirection) -> Result<()> {
        let guard = self.use_range(ptr, size, offset)?;
        let dir = match dir {
            SyncDirection::ToHost => CopyDirection::DeviceToHost,
            SyncDirection::ToDevice => CopyDirection::HostToDevice,
        };
        self.stage(guard, dir, offset as usize, size).map(drop)
    }

    /// `hipObjGetRdmaToken`: the 88-hex token for `[ptr, ptr + size)` on the dedicated connection
    /// (of the first device: application-driven tokens do not move between devices).
    /// Under memory windows and once that connection is paired, a window over exactly these bytes
    /// (remote write for a GET, remote read for a PUT) stays bound until `hipObjPutRdmaToken`.
    pub fn mint_token(&self, ptr: usize, size: usize, kind: TransferKind) -> Result<String> {
        let guard = self.use_range(ptr, size, 0)?;
        let buffer = guard.entry().payload();
        let range = BindRange {
            mr: buffer.mr(),
            addr: buffer.remote_addr(0),
            len: size as u64,
            access: match kind {
                TransferKind::Get => Access::REMOTE_WRITE,
                TransferKind::Put => Access::REMOTE_READ,
            },
        };
        let token = self
            .rails
            .first()
            .app_connection
            .mint(&range, buffer.rkey())?;
        Ok(token.encode_hex())
    }

    /// `hipObjPutRdmaToken` while initialised: invalidate the window the token names, if it is
    /// one of the dedicated connection's.
    pub fn release_token(&self, token: &Token) {
        self.rails.first().app_connection.release(token)
    }

    /// Windows of application-driven tokens not yet released.
    pub fn open_token_windows(&self) -> usize {
        self.rails.first().app_connection.open_windows()
    }

    /// `hipObjParseRdmaReply` with a `428:<token>` reply: pair the dedicated connection (rule 5.3).
    pub fn apply_reply(&self, reply: &Reply) -> Result<()> {
        match reply {
            Reply::PairingNeeded(server) => {
                self.rails.first().app_connection.pair(server).map(drop)
            }
            _ => Ok(()),
        }
    }

    /// The registration's own rkey (for tests that show it grants nothing remotely).
    pub fn registration_rkey(&self, ptr: usize) -> Option<u32> {
        self.registry.lookup(ptr).map(|e| e.payload().rkey())
    }
}

/// A runtime as one transfer on one of its rails sees it: the registry and staging are the
/// runtime's, the connections, protection and the buffer's registration the rail's.
pub(super) struct OnRail<'r> {
    rt: &'r Runtime,
    index: usize,
    pub(super) rail: &'r Rail,
}

impl<'r> OnRail<'r> {
    pub(super) fn new(rt: &'r Runtime, index: usize, rail: &'r Rail) -> OnRail<'r> {
        OnRail { rt, index, rail }
    }

    /// The buffer's registration on this rail's device (made now on its first use there).
    pub(super) fn mr_of<'b>(&self, buffer: &'b Buffer) -> Result<&'b Mr> {
        buffer.mr_on(
            self.index,
            &self.rail.device,
            self.rail.protection.registration_access(),
        )
    }
}

/// What v1 and v2 transfers share (`hipobj_actors::transfer::run` composes it with their parts).
impl TransferHost for OnRail<'_> {
    type Payload = Buffer;
    type Error = Error;
    type Connection = Connection;

    fn registry(&self) -> &Registry<Buffer> {
        &self.rt.registry
    }

    fn pool(&self) -> &Arc<Pool> {
        self.rail.connections.pool()
    }

    fn refused(&self, why: Refused, base: usize, size: usize, offset: u64) -> Error {
        refusal(why, base, size, offset)
    }

    fn stage_out(
        &self,
        guard: UseGuard<Buffer>,
        offset: usize,
        size: usize,
    ) -> Result<UseGuard<Buffer>> {
        self.rt
            .stage(guard, CopyDirection::DeviceToHost, offset, size)
    }

    /// After a GET: copy host -> device if the buffer is staged, or make the RDMA write visible
    /// to the device.
    fn stage_in(&self, guard: UseGuard<Buffer>, offset: usize, size: usize) -> Result<()> {
        match guard.entry().payload().kind() {
            BufferKind::DeviceStaged => self
                .rt
                .stage(guard, CopyDirection::HostToDevice, offset, size)
                .map(drop),
            BufferKind::DeviceDirect => match &self.rt.gpu {
                Some(gpu) => gpu
                    .runtime
                    .make_visible_after_rdma_write(gpu.device)
                    .map_err(|e| e.to_error(OpError::RdmaError)),
                None => Ok(()),
            },
            BufferKind::Host => Ok(()),
        }
    }
}

/// The exchange of a v1 transfer: the request/reply on the leased, paired connection.
impl<'a> TransferParts<dyn S3Ops + 'a> for OnRail<'_> {
    fn exchange(
        &self,
        conn: &mut Connection,
        direction: Direction,
        buffer: &Entry<Buffer>,
        offset: usize,
        size: usize,
        ops: &mut (dyn S3Ops + 'a),
    ) -> Result<()> {
        let buffer = buffer.payload();
        let grant = Grant {
            protection: self.rail.protection,
            range: BindRange {
                mr: self.mr_of(buffer)?,
                addr: buffer.remote_addr(offset),
                len: size as u64,
                access: match direction {
                    Direction::Get => Access::REMOTE_WRITE,
                    Direction::Put => Access::REMOTE_READ,
                },
            },
        };
        stages::mark(Stage::Connection);
        let conn = FenceOnUnwind(conn);
        exchange(&mut *conn.0, &grant, ops)
    }

    /// A connection that failed, or whose window invalidation was not confirmed (fenced), goes
    /// to its worker, which replaces the QP before the lease returns it to the pool. A refusal
    /// that started nothing on the current pairing (revision 5) is no failure of the connection:
    /// it goes back as it is (unless it was fenced).
    fn release(&self, lease: Lease, outcome: &Result<()>) {
        let usable = match outcome {
            Ok(()) => true,
            Err(e) if e.pairing_kept => true,
            Err(e) => {
                tracing::debug!(role = ?lease.role(), "transfer failed ({e}); replacing its QP");
                false
            }
        };
        self.rail.connections.release(lease, usable);
    }
}

/// The leased connection during an exchange. If the exchange panics (an `S3Ops` of Rust code),
/// the connection is fenced as it unwinds: it goes back to the pool with its QP in ERR (no remote
/// access through a window that may still be bound) and is replaced before it is used again.
struct FenceOnUnwind<'c>(&'c mut Connection);

impl Drop for FenceOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.fence();
        }
    }
}

/// `hipObjParseRdmaReply` after the argument checks: the reply's code; while initialised, a
/// `428:<token>` reply first pairs the dedicated connection (docs/protocol.md section 6) and a failure
/// to do so is the call's error.
pub fn reply_code(bytes: &[u8]) -> Result<i32> {
    let reply = Reply::parse(bytes).map_err(|e| Error::invalid(e.to_string()))?;
    if let Reply::PairingNeeded(_) = reply {
        if let Some(rt) = super::current() {
            rt.apply_reply(&reply)?;
        }
    }
    Ok(reply.http_code())
}

/// `hipObjPutRdmaToken` of a token's text: while initialised, invalidate the window it names
/// (docs/protocol.md 9.9). Text that is not a token names no window.
pub fn release_token(text: &[u8]) {
    let Ok(token) = Token::decode_hex(text) else {
        return;
    };
    if let Some(rt) = super::current() {
        rt.release_token(&token);
    }
}

/// What one transfer lets the server reach: a window over `range` (revision 2), or the
/// registration's rkey.
struct Grant<'a> {
    protection: Protection,
    range: BindRange<'a>,
}

impl Grant<'_> {
    /// The rkey for the next request on `conn`: a window bind posted when the QP is paired, 0
    /// when it is not (the server answers 428 and moves nothing). A bind that cannot be posted
    /// (the QP went to ERR, e.g. after the server's access was refused) replaces the QP: the
    /// request then goes out unpaired. Revision 1: the registration's rkey.
    fn post(&self, conn: &mut Connection) -> Result<Bind> {
        if self.protection == Protection::Registration {
            return Ok(Bind::Ready(self.range.mr.rkey()));
        }
        if !conn.is_paired() {
            return Ok(Bind::Ready(0));
        }
        match conn.post_bind(&self.range) {
            Ok(posted) => Ok(Bind::Posted(posted)),
            Err(e) => {
                tracing::debug!("window bind failed ({e}); replacing the QP");
                conn.replace()?;
                Ok(Bind::Ready(0))
            }
        }
    }

    /// Wait for a posted bind before anything may reach the server. `Some(rkey)`: the token
    /// built with `bind.rkey()` stands; `None`: the bind failed and the QP was replaced, so the
    /// request goes out unpaired with a token of the fresh QP.
    fn confirm(&self, conn: &mut Connection, bind: Bind) -> Result<Option<u32>> {
        let posted = match bind {
            Bind::Ready(rkey) => return Ok(Some(rkey)),
            Bind::Posted(posted) => posted,
        };
        match conn.confirm_bind(posted) {
            Ok(rkey) => Ok(Some(rkey)),
            Err(e) => {
                tracing::debug!("window bind failed ({e}); replacing the QP");
                conn.replace()?;
                Ok(None)
            }
        }
    }

    /// End the window bound for one request, before its reply is acted on: the server's
    /// SEND_WITH_INV when its `200` announces one (docs/protocol.md 11.2), else a local
    /// invalidation.
    fn end(&self, conn: &mut Connection, rkey: u32, reply: &Result<Reply>) -> Result<()> {
        if self.protection != Protection::Windows || rkey == 0 {
            return Ok(());
        }
        let end = match reply {
            Ok(Reply::Done(server)) if server.remote_inv() => WindowEnd::Announced,
            // A failed transfer or a reply never seen may follow a SEND_WITH_INV the NIC
            // executes later.
            Err(_) => WindowEnd::Unknown,
            Ok(Reply::Code(code)) => WindowEnd::of_code(*code),
            Ok(_) => WindowEnd::Settled,
        };
        conn.end_window(rkey, end)
    }
}

/// The rkey of one request: ready at once, or a window bind posted and not yet confirmed.
enum Bind {
    Ready(u32),
    Posted(PostedBind),
}

impl Bind {
    fn rkey(&self) -> u32 {
        match self {
            Bind::Ready(rkey) => *rkey,
            Bind::Posted(posted) => posted.rkey(),
        }
    }
}

/// The token text of a request with `rkey` over the grant's bytes, from the connection's state.
fn token_text<'t>(
    conn: &Connection,
    grant: &Grant<'_>,
    rkey: u32,
    text: &'t mut [u8; TOKEN_HEX_LEN],
) -> &'t str {
    conn.state()
        .token(rkey, grant.range.addr, grant.range.len)
        .encode_hex_into(text)
}

/// One transfer's request/reply exchange on a leased connection (docs/protocol.md section 5). A
/// request's window bind is confirmed before `sendRequest` is called (the token is built while
/// the bind completes), and every window bound for a request is invalidated before the reply is
/// looked at, whatever it is.
fn exchange(conn: &mut Connection, grant: &Grant<'_>, ops: &mut dyn S3Ops) -> Result<()> {
    let mut paired_here = false;
    let mut reply_buf = [0u8; REPLY_BUFFER_LEN];
    let mut text = [0u8; TOKEN_HEX_LEN];
    for _request in 0..MAX_REQUESTS {
        let bind = grant.post(conn)?;
        stages::mark(Stage::BindPost);
        token_text(conn, grant, bind.rkey(), &mut text);
        stages::mark(Stage::Token);
        let confirmed = grant.confirm(conn, bind)?;
        stages::mark(Stage::BindWait);
        let (rkey, token) = match confirmed {
            Some(rkey) => (rkey, std::str::from_utf8(&text).unwrap_or_default()),
            None => (0, token_text(conn, grant, 0, &mut text)),
        };
        // Whether this request's token names the connection's current pairing.
        let on_pairing = conn.is_paired();
        let reply = round_trip(token, ops, &mut reply_buf);
        grant.end(conn, rkey, &reply)?;
        match reply? {
            Reply::PairingNeeded(server) => {
                if paired_here {
                    return Err(Error::rdma(
                        "the server asked to pair again a QP it paired in this transfer",
                    ));
                }
                if conn.pair(&server)? == PairOutcome::Paired {
                    paired_here = true;
                }
            }
            Reply::Done(server) => {
                let named_here = conn.state().matches(&server);
                stages::mark(Stage::Check);
                return if named_here {
                    Ok(())
                } else {
                    Err(Error::s3("the 200 reply names another QP or pairing"))
                };
            }
            Reply::Code(200 | 204 | 206) => return Ok(()),
            Reply::Code(code) => {
                let mut e = Error::s3(format!("the server answered {code}"));
                e.pairing_kept = on_pairing && crate::reply::starts_nothing(code);
                e.path_failed = code >= 500 && code != 501;
                return Err(e);
            }
        }
    }
    Err(Error::rdma("no transfer after three requests"))
}

/// `sendRequest` then `recvReply` (with the callback marker raised), and the reply parsed.
fn round_trip(token: &str, ops: &mut dyn S3Ops, reply_buf: &mut [u8]) -> Result<Reply> {
    let status = {
        let _cb = CallbackGuard::enter();
        ops.send_request(token)
    };
    if status != 0 {
        return Err(Error::s3(format!("sendRequest failed ({status})")));
    }
    let n = {
        let _cb = CallbackGuard::enter();
        ops.recv_reply(reply_buf)
    }
    .map_err(|status| Error::s3(format!("recvReply failed ({status})")))?;
    stages::mark(Stage::Callbacks);
    let raw = reply_buf
        .get(..n)
        .ok_or_else(|| Error::s3("recvReply reported more bytes than the buffer holds"))?;
    let reply = Reply::parse(raw).map_err(|_| {
        Error::s3(format!(
            "malformed x-amz-rdma-reply {:?}",
            String::from_utf8_lossy(raw)
        ))
    });
    stages::mark(Stage::ReplyParse);
    reply
}
