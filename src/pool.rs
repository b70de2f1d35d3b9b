//! RDMA connections: the QP of each connection, its memory window, what it publishes, and the
//! worker that recovers it.
//!
//! **Steady state on the caller's thread.** A transfer leases a connection from the pool; the lease
//! gives it exclusive use, so it binds and invalidates the connection's window, pairs its QP on a
//! `428`, and reads the published [`ConnState`] (QP number, GID, port, pairing) to mint tokens and
//! check `200` replies, all on its own thread: no message and no thread hop per request. The QP
//! itself sits in a `Mutex` only so that safe Rust can hand `&mut` to whoever holds the lease; it
//! is taken with `try_lock` and never waited on (a second holder would be a bug: internal error).
//! The published state is an `ArcSwap`, rewritten only when the QP is paired or replaced.
//!
//! **Recovery on the worker.** After a transfer that did not end in success, or whose window could
//! not be confirmed invalid, the caller hands its lease to the connection's worker thread
//! (`hipobj-qp-NN`) and returns at once. The worker replaces the QP (and window) by fresh ones
//! (PROTOCOL.md rule 5.5) and only then drops the lease, so the connection rejoins the pool with a
//! never-paired QP; if creating the fresh QP fails, it retries and the slot stays out of the pool.
//!
//! A QP is paired at most once in its life: every re-pairing and every reset creates a new QP, so a
//! stale server QP can only ever aim at a dead QP number.

use crate::env::EnvConfig;
use crate::error::{Error, Result};
use crate::remote_inv::{RecvRing, RemoteInv, RECV_WAIT, RING};
use crate::token::{Token, Transport};
use crate::verbs::{
    random_psn, wc_status_name, Access, BindRange, Device, Mw, QpCaps, RcPeer, RcQp, MAX_PSN,
};
use arc_swap::ArcSwap;
use hipobj_actors::stages::{self, Stage};
use hipobj_actors::sync::channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use hipobj_actors::sync::thread;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, TryLockError};
use std::time::Duration;

pub use hipobj_actors::pool::{AcquireError, Lease, Pool, Wait};

/// Live client QPs of this process (tests check nothing leaks across init/shutdown).
pub static LIVE_QPS: AtomicUsize = AtomicUsize::new(0);

/// Access rights of client QPs: the server reads and writes our memory (through windows, or
/// through the registration itself on a device without them).
fn qp_access() -> Access {
    Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE
}
/// Send queue of a client QP: one bind and one invalidation at a time, with room to spare; the
/// receive queue holds the zero-length receives of remote invalidation (PROTOCOL.md section 11).
const CLIENT_QP_CAPS: QpCaps = QpCaps {
    max_send_wr: 4,
    max_recv_wr: RING,
    cq_depth: 8 + RING,
};
/// How long a bind or an invalidation may take to complete (both are local operations).
const LOCAL_OP_LIMIT: Duration = Duration::from_secs(2);
/// Pause between attempts to create a fresh QP for a failed connection.
const RECOVERY_RETRY: Duration = Duration::from_millis(100);

/// How transfers of a runtime grant the server access to a buffer (PROTOCOL.md 9.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    /// Registrations have local access and window binding only; each request binds a type-2
    /// window over exactly its bytes and invalidates it before the call returns (revision 2).
    Windows,
    /// The device has no type-2 windows: the registration's rkey grants remote read and write of
    /// the whole registration (revision 1).
    Registration,
}

impl Protection {
    /// The device's protection, or `hipObjRdmaError` when `HIPOBJ_REQUIRE_MW` asks for windows
    /// the device lacks. Warns once per process when falling back.
    pub fn choose(device: &Device, env: &EnvConfig) -> Result<Protection> {
        let has_windows = device.caps().mem_window_type_2b;
        if has_windows && !env.perf_no_mw {
            return Ok(Protection::Windows);
        }
        if env.require_mw {
            return Err(Error::rdma(format!(
                "HIPOBJ_REQUIRE_MW is set but {} {}",
                device.name(),
                if has_windows {
                    "is used without memory windows (HIPOBJ_PERF_NO_MW)"
                } else {
                    "has no type-2 memory windows (MEM_WINDOW_TYPE_2B)"
                }
            )));
        }
        static WARNED: Once = Once::new();
        WARNED.call_once(|| {
            if has_windows {
                tracing::warn!("HIPOBJ_PERF_NO_MW: memory windows are off (benchmarks only): registrations grant remote access for their whole life");
            } else {
                tracing::warn!(device = %device.name(), "the RDMA device has no type-2 memory windows: registrations grant remote read and write for their whole life (protocol revision 1)");
            }
        });
        Ok(Protection::Registration)
    }

    /// Access rights of every registration under this protection.
    pub fn registration_access(self) -> Access {
        match self {
            Protection::Windows => Access::LOCAL_WRITE | Access::MW_BIND,
            Protection::Registration => {
                Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ
            }
        }
    }
}

/// How a request's window ends (PROTOCOL.md 9.8, 11.2), from its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowEnd {
    /// A `200` announced the server's SEND_WITH_INV.
    Announced,
    /// No transfer failed at the server: it sent no SEND_WITH_INV, or one that completed before
    /// it answered (a revision-4 server waits for the SEND's completion, which the client NIC
    /// acknowledges after the receive completed), so the receive's completion is already there
    /// when the reply is read. `428`, a refusal before any transfer, a `200` without the flag,
    /// or an error after a successful transfer (a `400 BadDigest` or `507` of the commit).
    Settled,
    /// A transfer may have failed after the SEND_WITH_INV was posted, which the NIC may still
    /// execute: a `500`, a `507` (the disk filled during the transfer), a gateway's 5xx, or no
    /// reply seen.
    Unknown,
}

impl WindowEnd {
    /// The window's end after a reply with status `code` that announced no SEND_WITH_INV
    /// (`-1`: no reply was seen). Only the server's failed transfers answer `500` or `507`
    /// (a `5xx` of a gateway in between may hide them); `501` and `503` refuse before any
    /// transfer.
    pub fn of_code(code: i32) -> WindowEnd {
        match code {
            501 | 503 => WindowEnd::Settled,
            c if !(0..500).contains(&c) => WindowEnd::Unknown,
            _ => WindowEnd::Settled,
        }
    }
}

/// What pairing did with a `428` reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairOutcome {
    /// The never-paired QP is now paired with the server QP: send the request again.
    Paired,
    /// The QP was already paired (the server forgot it, or it is another server): it was replaced by a
    /// fresh QP; send the request again so the server pairs the fresh one.
    Replaced,
}

/// The pairing a connection's QP has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pairing {
    pub server_qp_num: u32,
    pub pairing_id: u16,
}

/// What a connection publishes for lock-free reads: everything a token and a `200` check need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnState {
    pub qp_num: u32,
    pub gid: [u8; 16],
    pub port: u8,
    pub pairing: Option<Pairing>,
    /// The QP keeps zero-length receives posted: its tokens ask for remote invalidation.
    pub remote_inv: bool,
}

impl ConnState {
    /// The token for `length` bytes at `remote_addr` reachable with `rkey` (0: nothing).
    pub fn token(&self, rkey: u32, remote_addr: u64, length: u64) -> Token {
        Token {
            transport: Transport::Rc,
            qp_num: self.qp_num,
            gid: self.gid,
            rkey,
            remote_addr,
            length,
            port: self.port,
            lid: self.pairing.map_or(0, |p| p.pairing_id),
        }
        .with_remote_inv(self.remote_inv)
    }

    /// Rule 5.4: does a `200:<server token>` name this pairing?
    pub fn matches(&self, server: &Token) -> bool {
        self.pairing
            .is_some_and(|p| p.server_qp_num == server.qp_num && p.pairing_id == server.lid)
    }
}

/// A QP, its memory window and its pairing. Only the holder of the connection's lease (or the
/// application connection's lock) touches it. Fields drop in order: the window before the QP.
pub struct Connection {
    window: Option<Mw>,
    qp: RcQp,
    pairing: Option<Pairing>,
    /// Zero-length receives for the server's SEND_WITH_INV (pool connections under windows).
    recv: Option<RecvRing>,
    /// Whether fresh QPs of this connection keep receives posted.
    keeps_receives: bool,
    /// Set when a window of this QP may still be valid (an invalidation was not confirmed): the
    /// QP was moved to ERR and must be replaced before any further use.
    fenced: bool,
    next_wr_id: u64,
    device: Arc<Device>,
}

impl Connection {
    /// A fresh QP in INIT with its window; with `keeps_receives` (and windows: a registration's
    /// rkey must never be invalidated remotely) its receives for remote invalidation posted.
    fn fresh(
        device: &Arc<Device>,
        protection: Protection,
        keeps_receives: bool,
    ) -> Result<Connection> {
        let window = match protection {
            Protection::Windows => Some(device.alloc_mw()?),
            Protection::Registration => None,
        };
        let mut qp = device.create_rc_qp(CLIENT_QP_CAPS)?;
        qp.to_init(qp_access())?;
        LIVE_QPS.fetch_add(1, Ordering::Relaxed);
        let recv = match (protection, keeps_receives) {
            (Protection::Windows, true) => RecvRing::fill(&mut qp)
                .inspect_err(|e| {
                    tracing::warn!(
                        "cannot post receives for remote invalidation ({e}); invalidating locally"
                    )
                })
                .ok(),
            _ => None,
        };
        Ok(Connection {
            window,
            qp,
            pairing: None,
            recv,
            keeps_receives,
            fenced: false,
            next_wr_id: 1,
            device: device.clone(),
        })
    }

    fn protection(&self) -> Protection {
        if self.window.is_some() {
            Protection::Windows
        } else {
            Protection::Registration
        }
    }

    fn state(&self) -> ConnState {
        let port = self.device.port();
        ConnState {
            qp_num: self.qp.qp_num(),
            gid: port.gid,
            port: port.port,
            pairing: self.pairing,
            remote_inv: self.recv.is_some(),
        }
    }

    pub fn is_paired(&self) -> bool {
        self.pairing.is_some()
    }

    /// Whether the QP must be replaced before the connection is used again.
    pub fn is_fenced(&self) -> bool {
        self.fenced
    }

    /// Rule 5.3.
    fn pair(&mut self, server: &Token) -> Result<PairOutcome> {
        if server.transport != Transport::Rc {
            return Err(Error::rdma("428 reply names a non-RC server QP"));
        }
        if server.lid == 0 {
            return Err(Error::rdma("428 reply carries pairing id 0"));
        }
        if self.pairing.is_some() || self.fenced {
            self.replace()?;
            return Ok(PairOutcome::Replaced);
        }
        // The client posts no READs: one outstanding is enough (rule 5.6).
        self.qp.connect(
            &RcPeer {
                qp_num: server.qp_num,
                gid: server.gid,
            },
            server.rkey & MAX_PSN,
            random_psn(),
            1,
        )?;
        self.pairing = Some(Pairing {
            server_qp_num: server.qp_num,
            pairing_id: server.lid,
        });
        tracing::debug!(
            qpn = self.qp.qp_num(),
            server_qpn = server.qp_num,
            pairing = server.lid,
            "paired"
        );
        Ok(PairOutcome::Paired)
    }

    /// Rule 5.5: destroy the QP (and its window) and create fresh, never-paired ones. On error the
    /// old QP stays, moved to ERR, and the connection stays fenced.
    fn replace(&mut self) -> Result<()> {
        let fresh = match Connection::fresh(&self.device, self.protection(), self.keeps_receives) {
            Ok(fresh) => fresh,
            Err(e) => {
                self.fence();
                return Err(e);
            }
        };
        let old = std::mem::replace(self, fresh);
        tracing::debug!(
            old_qpn = old.qp.qp_num(),
            new_qpn = self.qp.qp_num(),
            "connection replaced"
        );
        Ok(())
    }

    /// Move the QP to ERR: from now on it accepts no remote access at all.
    fn fence(&mut self) {
        self.fenced = true;
        if let Err(e) = self.qp.to_error() {
            tracing::warn!(qpn = self.qp.qp_num(), "could not move a QP to ERR: {e}");
        }
    }

    fn wr_id(&mut self) -> u64 {
        self.next_wr_id = self.next_wr_id.wrapping_add(1);
        self.next_wr_id
    }

    /// Wait for the successful completion of work request `wr_id` (`what`, for the error).
    fn confirm(&mut self, what: &str, wr_id: u64) -> Result<()> {
        let (done, effort) = self.qp.wait_completion_with_effort(wr_id, LOCAL_OP_LIMIT)?;
        stages::waited(effort.empty_polls, effort.yields);
        if !done.is_success() {
            return Err(Error::rdma(format!(
                "{what} on QP {:#x} completed with {} (vendor error {:#x})",
                self.qp.qp_num(),
                wc_status_name(done.status),
                done.vendor_err
            )));
        }
        Ok(())
    }

    /// Post a bind of `window` over `range` on this (paired, RTS) QP; the rkey it will have.
    fn post_bind_window(&mut self, window: &Mw, range: &BindRange<'_>) -> Result<PostedBind> {
        if self.pairing.is_none() || self.fenced {
            return Err(Error::internal("bind on an unpaired or fenced QP"));
        }
        let wr_id = self.wr_id();
        let rkey = self.qp.post_bind_mw(wr_id, window, range)?;
        Ok(PostedBind { wr_id, rkey })
    }

    /// Wait for a posted bind of `window`; once it completed successfully its rkey is the
    /// window's. An error leaves no usable bind (the old rkey was invalidated before).
    fn confirm_bind_window(&mut self, window: &mut Mw, bind: PostedBind) -> Result<u32> {
        self.confirm("memory window bind", bind.wr_id)?;
        self.qp.bound(window, bind.rkey);
        Ok(bind.rkey)
    }

    /// Bind `window` over `range` on this (paired, RTS) QP and wait for the bind to complete; the
    /// window's new rkey.
    fn bind_window(&mut self, window: &mut Mw, range: &BindRange<'_>) -> Result<u32> {
        let bind = self.post_bind_window(window, range)?;
        self.confirm_bind_window(window, bind)
    }

    /// Post a bind of the connection's own window over `range` (PROTOCOL.md 9.7). Its rkey is
    /// known at once (work such as the token may go on meanwhile); the window grants nothing
    /// remotely to rely on until [`Connection::confirm_bind`] has seen the bind complete.
    pub fn post_bind(&mut self, range: &BindRange<'_>) -> Result<PostedBind> {
        let window = self
            .window
            .take()
            .ok_or_else(|| Error::internal("bind on a connection without a window"))?;
        let posted = self.post_bind_window(&window, range);
        self.window = Some(window);
        posted
    }

    /// Wait for the bind [`Connection::post_bind`] posted to complete; its rkey.
    pub fn confirm_bind(&mut self, bind: PostedBind) -> Result<u32> {
        let mut window = self
            .window
            .take()
            .ok_or_else(|| Error::internal("bind on a connection without a window"))?;
        let confirmed = self.confirm_bind_window(&mut window, bind);
        self.window = Some(window);
        confirmed
    }

    /// End the window `rkey` of a request (rules 9.8 and 11.2). `Announced`: the `200` says the
    /// server sent a SEND_WITH_INV; its receive is looked for (bounded wait) and, when seen,
    /// nothing is posted. Otherwise, on a QP that keeps receives posted, the receive is looked
    /// for without waiting (a server may have invalidated the window and then failed the
    /// request, e.g. a `400 BadDigest` or `507` of the commit after the READs): seen, the window
    /// is gone; not seen, `Settled` invalidates locally and `Unknown` fences the QP (ERR: no
    /// remote access through it; replaced before reuse). An announced SEND not seen in time and a
    /// SEND_WITH_INV of another rkey fence the QP too, and so does a receive flushed (the QP in
    /// ERR) after a reply that announced nothing. A window the server may have invalidated
    /// is never invalidated locally: rxe of Linux 6.1 dereferences NULL when a window that was
    /// invalidated remotely is invalidated again (measured: guest kernel panic in
    /// `rxe_invalidate_mw` from a local invalidation after a callback failure), and in the
    /// responder when a late SEND_WITH_INV names a window already invalidated locally.
    pub fn end_window(&mut self, rkey: u32, end: WindowEnd) -> Result<()> {
        if self.fenced {
            return Ok(());
        }
        let Some(ring) = &mut self.recv else {
            self.invalidate(rkey);
            return Ok(());
        };
        let wait = match end {
            WindowEnd::Announced => RECV_WAIT,
            WindowEnd::Settled | WindowEnd::Unknown => Duration::ZERO,
        };
        let seen = ring.await_inv(&mut self.qp, rkey, wait);
        stages::mark(Stage::InvalidateWait);
        match (seen, end) {
            (RemoteInv::Invalidated, _) => {
                if let Err(e) = ring.refill(&mut self.qp) {
                    tracing::debug!(
                        qpn = self.qp.qp_num(),
                        "cannot refill receives ({e}); fencing the QP"
                    );
                    self.fence();
                }
                Ok(())
            }
            (RemoteInv::NotSeen, WindowEnd::Settled) => {
                self.invalidate(rkey);
                Ok(())
            }
            (RemoteInv::NotSeen, WindowEnd::Announced | WindowEnd::Unknown) => {
                tracing::debug!(
                    qpn = self.qp.qp_num(),
                    ?end,
                    "no remote invalidation seen where the server may have sent one; fencing the QP"
                );
                self.fence();
                Ok(())
            }
            // After an error reply a flushed receive only says the QP is in ERR already (the
            // server's access was refused, say): the reply's own error is the transfer's.
            (RemoteInv::Failed(what), WindowEnd::Settled | WindowEnd::Unknown) => {
                tracing::debug!(
                    qpn = self.qp.qp_num(),
                    "{what} after a reply without remote invalidation; fencing the QP"
                );
                self.fence();
                Ok(())
            }
            (RemoteInv::Failed(what) | RemoteInv::Wrong(what), _) => {
                self.fence();
                Err(Error::rdma(format!("remote invalidation: {what}")))
            }
        }
    }

    /// Invalidate `rkey` on this QP and wait for it (PROTOCOL.md 9.8). If that cannot be
    /// confirmed the QP is fenced (moved to ERR) and must be replaced before it is used again.
    pub fn invalidate(&mut self, rkey: u32) {
        if self.fenced {
            return;
        }
        let wr_id = self.wr_id();
        let done = self
            .qp
            .post_local_inv(wr_id, rkey)
            .map_err(Error::from)
            .and_then(|()| {
                stages::mark(Stage::InvalidatePost);
                self.confirm("memory window invalidation", wr_id)
            });
        stages::mark(Stage::InvalidateWait);
        if let Err(e) = done {
            tracing::debug!(
                qpn = self.qp.qp_num(),
                "window invalidation not confirmed ({e}); fencing the QP"
            );
            self.fence();
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        LIVE_QPS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A window bind posted and not yet seen complete: the rkey the window will have.
#[must_use = "a posted bind must be confirmed before the server may use its rkey"]
#[derive(Debug)]
pub struct PostedBind {
    wr_id: u64,
    rkey: u32,
}

impl PostedBind {
    /// The rkey the bind gives the window (chosen by us: `ibv_inc_rkey`).
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
}

/// A connection and its published state: the one place that keeps them in step.
struct Shared {
    state: ArcSwap<ConnState>,
    conn: Mutex<Connection>,
}

impl Shared {
    fn new(conn: Connection) -> Shared {
        Shared {
            state: ArcSwap::from_pointee(conn.state()),
            conn: Mutex::new(conn),
        }
    }

    /// The connection, for the holder of its lease: never waits (nobody else may hold it).
    fn leased(&self) -> Result<ConnGuard<'_>> {
        let conn = match self.conn.try_lock() {
            Ok(g) => g,
            // A panic while the connection was held: it is fenced and replaced below.
            Err(TryLockError::Poisoned(p)) => {
                let mut g = p.into_inner();
                g.fence();
                g
            }
            Err(TryLockError::WouldBlock) => {
                return Err(Error::internal(
                    "a leased connection is in use by someone else",
                ))
            }
        };
        Ok(ConnGuard { conn, shared: self })
    }

    /// The connection, waiting for other users (the application connection only).
    fn shared(&self) -> ConnGuard<'_> {
        let conn = match self.conn.lock() {
            Ok(g) => g,
            // A panic while the connection was held: fence it, so it is replaced before use.
            Err(p) => {
                let mut g = p.into_inner();
                g.fence();
                g
            }
        };
        ConnGuard { conn, shared: self }
    }
}

/// Exclusive use of a connection; republishes its state whenever its QP changes.
pub struct ConnGuard<'a> {
    conn: MutexGuard<'a, Connection>,
    shared: &'a Shared,
}

impl ConnGuard<'_> {
    fn publish(&self) {
        self.shared.state.store(Arc::new(self.conn.state()));
    }

    /// The published state (what tokens and `200` checks read).
    pub fn state(&self) -> arc_swap::Guard<Arc<ConnState>> {
        self.shared.state.load()
    }

    pub fn connection(&mut self) -> &mut Connection {
        &mut self.conn
    }

    /// Apply a `428` reply's server token (rule 5.3).
    pub fn pair(&mut self, server: &Token) -> Result<PairOutcome> {
        let outcome = self.conn.pair(server);
        self.publish();
        outcome
    }

    /// Replace the QP by a fresh one (rule 5.5).
    pub fn replace(&mut self) -> Result<()> {
        let outcome = self.conn.replace();
        self.publish();
        outcome
    }
}

/// Messages to a connection's worker.
enum Msg {
    /// Replace the QP of the leased connection, then let the lease go.
    Recover(Lease),
}

/// One pool connection and its worker thread (`hipobj-qp-NN`). Dropping it stops the worker and
/// joins its thread; it is never dropped on the worker's own thread.
pub struct ConnectionHandle {
    shared: Arc<Shared>,
    // Order matters: the sender drops first, so the worker's `recv` fails and it returns before the
    // join below.
    inbox: Option<Sender<Msg>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl ConnectionHandle {
    /// Create the QP (in INIT) and its window, and start its worker thread; with `remote_inv`
    /// (`HIPOBJ_REMOTE_INV`) its QPs keep receives posted for the server's SEND_WITH_INV.
    pub fn spawn(
        name: String,
        device: &Arc<Device>,
        protection: Protection,
        remote_inv: bool,
    ) -> Result<ConnectionHandle> {
        let shared = Arc::new(Shared::new(Connection::fresh(
            device, protection, remote_inv,
        )?));
        let (tx, rx) = unbounded();
        let worker_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(name)
            .stack_size(256 * 1024)
            .spawn(move || recovery_worker(&worker_shared, &rx))
            .map_err(|e| Error::rdma(format!("cannot start a QP worker thread: {e}")))?;
        Ok(ConnectionHandle {
            shared,
            inbox: Some(tx),
            thread: Some(thread),
        })
    }

    /// The connection, for the holder of its lease (checked: never waits).
    pub fn leased(&self, _lease: &Lease) -> Result<ConnGuard<'_>> {
        self.shared.leased()
    }

    /// The published state, read without a lock.
    pub fn state(&self) -> ConnState {
        **self.shared.state.load()
    }

    /// Hand a connection that must not be reused as it is to the worker, which replaces its QP
    /// and then releases the lease. Returns at once.
    pub fn recover(&self, lease: Lease) {
        let Some(inbox) = &self.inbox else { return };
        if let Err(e) = inbox.send(Msg::Recover(lease)) {
            // The worker is gone (the runtime is being dropped): replace here instead.
            let Msg::Recover(lease) = e.0;
            if let Ok(mut g) = self.shared.leased() {
                let _ = g.replace();
            }
            drop(lease);
        }
    }
}

/// The worker: replace the QP of each connection handed to it, retrying until a fresh QP exists;
/// only then does the lease go and the connection rejoin the pool.
fn recovery_worker(shared: &Shared, inbox: &Receiver<Msg>) {
    while let Ok(Msg::Recover(lease)) = inbox.recv() {
        loop {
            let replaced = shared.leased().and_then(|mut g| g.replace());
            match replaced {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(
                        slot = lease.slot(),
                        "cannot replace a failed connection's QP ({e}); retrying, the connection stays out of the pool"
                    );
                    match inbox.recv_timeout(RECOVERY_RETRY) {
                        Err(RecvTimeoutError::Timeout) => {}
                        // Shutting down: the slot is never used again.
                        Err(RecvTimeoutError::Disconnected) => return,
                        Ok(Msg::Recover(other)) => {
                            tracing::error!(
                                slot = other.slot(),
                                "a connection was handed over twice"
                            );
                        }
                    }
                }
            }
        }
        drop(lease);
    }
}

impl Drop for ConnectionHandle {
    fn drop(&mut self) {
        drop(self.inbox.take());
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("a QP worker thread panicked");
            }
        }
    }
}

/// One outstanding application-driven window (`hipObjGetRdmaToken`).
struct AppWindow {
    window: Mw,
    qp_num: u32,
}

/// The dedicated connection of application-driven tokens (PROTOCOL.md section 6, rule 9.9). Not in
/// the pool: any thread may use it, one at a time (its lock). Each token of a paired connection
/// gets its own window, invalidated by `hipObjPutRdmaToken`.
pub struct AppConnection {
    shared: Shared,
    windows: Mutex<std::collections::HashMap<u32, AppWindow>>,
}

impl AppConnection {
    pub fn new(device: &Arc<Device>, protection: Protection) -> Result<AppConnection> {
        Ok(AppConnection {
            shared: Shared::new(Connection::fresh(device, protection, false)?),
            windows: Mutex::new(std::collections::HashMap::new()),
        })
    }

    fn windows(&self) -> MutexGuard<'_, std::collections::HashMap<u32, AppWindow>> {
        self.windows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The published state, read without a lock.
    pub fn state(&self) -> ConnState {
        **self.shared.state.load()
    }

    /// A token for `range` (`registration_rkey` is used as it is under revision-1 protection).
    /// Under windows: a window bound over exactly the range when the connection is paired, rkey 0
    /// otherwise (the server answers 428 and moves nothing).
    pub fn mint(&self, range: &BindRange<'_>, registration_rkey: u32) -> Result<Token> {
        let mut g = self.shared.shared();
        if g.conn.is_fenced() {
            g.replace()?;
            self.windows().clear();
        }
        if g.conn.protection() == Protection::Registration {
            return Ok(g
                .conn
                .state()
                .token(registration_rkey, range.addr, range.len));
        }
        if !g.conn.is_paired() {
            return Ok(g.conn.state().token(0, range.addr, range.len));
        }
        let mut window = g.conn.device.alloc_mw()?;
        let rkey = g.conn.bind_window(&mut window, range)?;
        let state = g.conn.state();
        self.windows().insert(
            rkey,
            AppWindow {
                window,
                qp_num: state.qp_num,
            },
        );
        Ok(state.token(rkey, range.addr, range.len))
    }

    /// `hipObjPutRdmaToken`: invalidate the window the token names, if it is one of ours. When
    /// that cannot be confirmed the QP is fenced (moved to ERR: every window on it is dead) and
    /// replaced, now or at the next token.
    pub fn release(&self, token: &Token) {
        if token.rkey == 0 {
            return;
        }
        let mut g = self.shared.shared();
        let Some(w) = self.windows().remove(&token.rkey) else {
            return;
        };
        if w.qp_num == g.conn.state().qp_num {
            g.conn.invalidate(token.rkey);
        }
        drop(w.window);
        if g.conn.is_fenced() {
            self.windows().clear();
            if let Err(e) = g.replace() {
                tracing::warn!("cannot replace the application connection's QP yet: {e}");
            }
        }
    }

    /// Apply a `428` reply (rule 5.3). Replacing the QP ends every window bound on it.
    pub fn pair(&self, server: &Token) -> Result<PairOutcome> {
        let mut g = self.shared.shared();
        let outcome = g.pair(server);
        if matches!(outcome, Ok(PairOutcome::Replaced) | Err(_)) {
            self.windows().clear();
        }
        outcome
    }

    /// Windows bound by tokens not yet released (diagnostics and tests).
    pub fn open_windows(&self) -> usize {
        self.windows().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which replies may follow a SEND_WITH_INV the NIC still executes (the window is then
    /// fenced, never invalidated locally, when its receive is not there yet).
    #[test]
    fn only_failed_transfers_and_lost_replies_leave_the_window_unknown() {
        for code in [500, 502, 504, 507, -1] {
            assert_eq!(WindowEnd::of_code(code), WindowEnd::Unknown, "{code}");
        }
        for code in [200, 204, 206, 400, 403, 404, 412, 416, 428, 501, 503] {
            assert_eq!(WindowEnd::of_code(code), WindowEnd::Settled, "{code}");
        }
    }

    #[test]
    fn registrations_grant_remote_access_only_without_windows() {
        let windows = Protection::Windows.registration_access();
        assert!(windows.contains(Access::MW_BIND | Access::LOCAL_WRITE));
        assert!(!windows.contains(Access::REMOTE_WRITE));
        assert!(!windows.contains(Access::REMOTE_READ));
        let rev1 = Protection::Registration.registration_access();
        assert!(rev1.contains(Access::REMOTE_WRITE | Access::REMOTE_READ | Access::LOCAL_WRITE));
        assert!(!rev1.contains(Access::MW_BIND));
    }

    #[test]
    fn published_state_mints_and_checks() {
        let unpaired = ConnState {
            qp_num: 0x12,
            gid: [7; 16],
            port: 1,
            pairing: None,
            remote_inv: false,
        };
        let t = unpaired.token(0, 0x1000, 4096);
        assert_eq!((t.qp_num, t.rkey, t.lid, t.port), (0x12, 0, 0, 1));
        assert_eq!((t.remote_addr, t.length, t.gid), (0x1000, 4096, [7; 16]));
        let server = Token {
            qp_num: 0x99,
            lid: 5,
            ..t
        };
        assert!(
            !unpaired.matches(&server),
            "an unpaired connection matches nothing"
        );
        let paired = ConnState {
            pairing: Some(Pairing {
                server_qp_num: 0x99,
                pairing_id: 5,
            }),
            ..unpaired
        };
        assert_eq!(paired.token(0xabcd, 0, 1).lid, 5);
        assert_eq!(paired.token(0xabcd, 0, 1).rkey, 0xabcd);
        assert!(paired.matches(&server));
        assert!(!paired.token(0xabcd, 0, 1).remote_inv());
        let receiving = ConnState {
            remote_inv: true,
            ..paired
        };
        let flagged = receiving.token(0xabcd, 0, 1);
        assert!(
            flagged.remote_inv(),
            "a QP with receives posted asks for remote invalidation"
        );
        assert_eq!(flagged.port_number(), 1);
        assert!(receiving.matches(&server));
        assert!(!paired.matches(&Token { lid: 6, ..server }));
        assert!(!paired.matches(&Token {
            qp_num: 0x98,
            ..server
        }));
    }
}
