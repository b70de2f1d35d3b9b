//! A connection: one QP, its memory window and its pairing, and everything a transfer does with
//! them (pair, bind, end a window, fence, replace).
//!
//! A pool connection is a plain value: the holder of its lease owns it on the caller's thread and
//! calls these methods directly (no lock: nobody else can reach it), and its recovery worker owns
//! it while it replaces the QP. A QP is paired at most once in its life: every re-pairing and
//! every reset creates a new QP, so a stale server QP can only ever aim at a dead QP number.

use super::protection::Protection;
use super::state::{ConnState, PairOutcome, Pairing, WindowEnd};
use crate::error::{Error, Result};
use crate::remote_inv::{RecvRing, RemoteInv, RECV_WAIT, RING};
use crate::token::{Token, Transport};
use crate::verbs::{
    random_psn, wc_status_name, Access, BindRange, Device, Mw, QpCaps, RcPeer, RcQp, MAX_PSN,
};
use hipobj_actors::recovery::Renew;
use hipobj_actors::stages::{self, Stage};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Live client QPs of this process (tests check nothing leaks across init/shutdown).
pub static LIVE_QPS: AtomicUsize = AtomicUsize::new(0);

/// Access rights of client QPs: the server reads and writes our memory (through windows, or
/// through the registration itself on a device without them).
fn qp_access() -> Access {
    Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE
}
/// Send queue of a client QP: one bind and one invalidation at a time, with room to spare; the
/// receive queue holds the zero-length receives of remote invalidation (docs/protocol.md section 11).
const CLIENT_QP_CAPS: QpCaps = QpCaps {
    max_send_wr: 4,
    max_recv_wr: RING,
    cq_depth: 8 + RING,
};
/// How long a bind or an invalidation may take to complete (both are local operations).
const LOCAL_OP_LIMIT: Duration = Duration::from_secs(2);

/// Which connection a QP is: one of the pool's, or the application connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Pool connection `slot`: its recovery worker is the runtime's `slot`th; with `remote_inv`
    /// (opt-in, docs/protocol.md section 11) its QP keeps receives posted for remote
    /// invalidation (under windows).
    Pool { slot: usize, remote_inv: bool },
    /// The application connection (`hipObjGetRdmaToken`): invalidates every window locally.
    App,
}

/// A QP, its memory window and its pairing, owned by value: by the pool while idle, by the holder
/// of its lease during a transfer, by its recovery worker while its QP is replaced (the
/// application connection: by its lock). Fields drop in order: the window before the QP.
pub struct Connection {
    window: Option<Mw>,
    qp: RcQp,
    pairing: Option<Pairing>,
    /// Zero-length receives for the server's SEND_WITH_INV (pool connections under windows).
    recv: Option<RecvRing>,
    /// Which connection this is; fresh QPs keep it.
    role: Role,
    /// Set when a window of this QP may still be valid (an invalidation was not confirmed): the
    /// QP was moved to ERR and must be replaced before any further use.
    fenced: bool,
    next_wr_id: u64,
    device: Arc<Device>,
}

impl Connection {
    /// A fresh QP in INIT with its window; for a pool connection under windows (a registration's
    /// rkey must never be invalidated remotely) its receives for remote invalidation posted.
    pub fn fresh(device: &Arc<Device>, protection: Protection, role: Role) -> Result<Connection> {
        let window = match protection {
            Protection::Windows => Some(device.alloc_mw()?),
            Protection::Registration => None,
        };
        let mut qp = device.create_rc_qp(CLIENT_QP_CAPS)?;
        qp.to_init(qp_access())?;
        LIVE_QPS.fetch_add(1, Ordering::Relaxed);
        let recv = match (protection, role) {
            (
                Protection::Windows,
                Role::Pool {
                    remote_inv: true, ..
                },
            ) => RecvRing::fill(&mut qp)
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
            role,
            fenced: false,
            next_wr_id: 1,
            device: device.clone(),
        })
    }

    pub(super) fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Which connection this is.
    pub fn role(&self) -> Role {
        self.role
    }

    pub(super) fn protection(&self) -> Protection {
        if self.window.is_some() {
            Protection::Windows
        } else {
            Protection::Registration
        }
    }

    /// What tokens are minted from and `200` replies checked against, read from the QP itself.
    pub fn state(&self) -> ConnState {
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

    /// Apply a `428` reply's server token (rule 5.3).
    pub fn pair(&mut self, server: &Token) -> Result<PairOutcome> {
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
    pub fn replace(&mut self) -> Result<()> {
        let fresh = match Connection::fresh(&self.device, self.protection(), self.role) {
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
    pub fn fence(&mut self) {
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
    pub(super) fn bind_window(&mut self, window: &mut Mw, range: &BindRange<'_>) -> Result<u32> {
        let bind = self.post_bind_window(window, range)?;
        self.confirm_bind_window(window, bind)
    }

    /// Post a bind of the connection's own window over `range` (docs/protocol.md 9.7). Its rkey is
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

    /// Invalidate `rkey` on this QP and wait for it (docs/protocol.md 9.8). If that cannot be
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

/// What the recovery worker does with a connection handed to it: replace the QP (rule 5.5).
impl Renew for Connection {
    type Error = Error;

    fn renew(&mut self) -> Result<()> {
        self.replace()
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
