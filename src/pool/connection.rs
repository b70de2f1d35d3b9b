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
use crate::verbs::{random_psn, Access, BindRange, Device, QpCaps, RcPeer, RcQp, Window, MAX_PSN};
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
/// application connection: by its lock). Fields drop in order: the window before the QP. What a
/// bind or invalidation the NIC did not confirm does to the QP (fence it) is the window's
/// policy ([`Window`]); the connection asks the QP whether it was fenced.
pub struct Connection {
    window: Option<Window>,
    qp: RcQp,
    pairing: Option<Pairing>,
    /// Zero-length receives for the server's SEND_WITH_INV (pool connections under windows).
    recv: Option<RecvRing>,
    /// Which connection this is; fresh QPs keep it.
    role: Role,
    next_wr_id: u64,
    device: Arc<Device>,
}

impl Connection {
    /// A fresh QP in INIT with its window; for a pool connection under windows (a registration's
    /// rkey must never be invalidated remotely) its receives for remote invalidation posted.
    pub fn fresh(device: &Arc<Device>, protection: Protection, role: Role) -> Result<Connection> {
        let mut qp = device.create_rc_qp(CLIENT_QP_CAPS)?;
        let window = match protection {
            Protection::Windows => Some(Window::alloc(&qp)?),
            Protection::Registration => None,
        };
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
            next_wr_id: 1,
            device: device.clone(),
        })
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
        self.qp.is_fenced()
    }

    /// Apply a `428` reply's server token (rule 5.3).
    pub fn pair(&mut self, server: &Token) -> Result<PairOutcome> {
        if server.transport != Transport::Rc {
            return Err(Error::rdma("428 reply names a non-RC server QP"));
        }
        if server.lid == 0 {
            return Err(Error::rdma("428 reply carries pairing id 0"));
        }
        if self.pairing.is_some() || self.is_fenced() {
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

    /// Move the QP to ERR: from now on it accepts no remote access at all (its window is dead).
    pub fn fence(&mut self) {
        match &mut self.window {
            Some(window) => window.fence(),
            None => self.qp.fence(),
        }
    }

    fn wr_id(&mut self) -> u64 {
        self.next_wr_id = self.next_wr_id.wrapping_add(1);
        self.next_wr_id
    }

    /// A window for binding on this QP (the application connection's: one per token).
    pub(super) fn alloc_window(&self) -> Result<Window> {
        Ok(Window::alloc(&self.qp)?)
    }

    fn check_bindable(&self) -> Result<()> {
        if self.pairing.is_none() || self.is_fenced() {
            return Err(Error::internal("bind on an unpaired or fenced QP"));
        }
        Ok(())
    }

    /// Bind `window` (of this QP) over `range` on this (paired, RTS) QP and wait for the bind to
    /// complete; the window's new rkey. Not confirmed: the QP is fenced (the window's policy).
    pub(super) fn bind_window(
        &mut self,
        window: &mut Window,
        range: &BindRange<'_>,
    ) -> Result<u32> {
        self.check_bindable()?;
        let wr_id = self.wr_id();
        let (rkey, effort) = window.bind(&mut self.qp, wr_id, range, LOCAL_OP_LIMIT)?;
        stages::waited(effort.empty_polls, effort.yields);
        Ok(rkey)
    }

    /// Post a bind of the connection's own window over `range` (docs/protocol.md 9.7). Its rkey is
    /// known at once (work such as the token may go on meanwhile); the window grants nothing
    /// remotely to rely on until [`Connection::confirm_bind`] has seen the bind complete.
    pub fn post_bind(&mut self, range: &BindRange<'_>) -> Result<PostedBind> {
        self.check_bindable()?;
        let wr_id = self.wr_id();
        let window = self
            .window
            .as_mut()
            .ok_or_else(|| Error::internal("bind on a connection without a window"))?;
        let rkey = window.post_bind(&mut self.qp, wr_id, range)?;
        Ok(PostedBind { rkey })
    }

    /// Wait for the bind [`Connection::post_bind`] posted to complete; its rkey. Not confirmed:
    /// the QP is fenced.
    pub fn confirm_bind(&mut self, bind: PostedBind) -> Result<u32> {
        let window = self
            .window
            .as_mut()
            .ok_or_else(|| Error::internal("bind on a connection without a window"))?;
        let (rkey, effort) = window.confirm_bind(&mut self.qp, LOCAL_OP_LIMIT)?;
        stages::waited(effort.empty_polls, effort.yields);
        if rkey != bind.rkey {
            return Err(Error::internal(
                "a bind confirmed with another rkey than posted",
            ));
        }
        Ok(rkey)
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
        if self.is_fenced() {
            return Ok(());
        }
        let Some(ring) = &mut self.recv else {
            self.invalidate();
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
                if let Some(window) = self.window.as_mut() {
                    window.invalidated_remotely();
                }
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
                self.invalidate();
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

    /// Invalidate the connection's own window and wait for it (docs/protocol.md 9.8). If that
    /// cannot be confirmed the QP is fenced (the window's policy) and must be replaced before it
    /// is used again.
    fn invalidate(&mut self) {
        let wr_id = self.wr_id();
        let Some(window) = self.window.as_mut() else {
            return;
        };
        let done = window.post_invalidate(&mut self.qp, wr_id).and_then(|()| {
            stages::mark(Stage::InvalidatePost);
            window.confirm_invalidate(&mut self.qp, LOCAL_OP_LIMIT)
        });
        stages::mark(Stage::InvalidateWait);
        match done {
            Ok(effort) => stages::waited(effort.empty_polls, effort.yields),
            Err(e) => tracing::debug!(
                qpn = self.qp.qp_num(),
                "window invalidation not confirmed ({e}); the QP is fenced"
            ),
        }
    }

    /// Invalidate an application window bound on this QP and wait for it (docs/protocol.md 9.8,
    /// rule 9.9); not confirmed: the QP is fenced. A window of an earlier QP of this connection
    /// is left alone (dropping it fences that QP, which is out of use).
    pub(super) fn invalidate_window(&mut self, window: &mut Window) {
        if !window.is_on(&self.qp) || self.is_fenced() {
            return;
        }
        let wr_id = self.wr_id();
        if let Err(e) = window.invalidate(&mut self.qp, wr_id, LOCAL_OP_LIMIT) {
            tracing::debug!(
                qpn = self.qp.qp_num(),
                "window invalidation not confirmed ({e}); the QP is fenced"
            );
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
    rkey: u32,
}

impl PostedBind {
    /// The rkey the bind gives the window (chosen by us: `ibv_inc_rkey`).
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
}

/// The window policy as the pool's connections meet it, over real verbs (the lane's rxe): a bind
/// the NIC refuses fences the QP, which is replaced before it is used again.
#[cfg(test)]
mod rxe_tests {
    use super::*;
    use crate::pool::AppConnection;
    use crate::verbs::lane_tests::{self, TestMemory};

    /// A server token naming a QP of the same device (binds are local: it need not answer).
    fn server_token(device: &Device, qp_num: u32) -> Token {
        Token {
            transport: Transport::Rc,
            qp_num,
            gid: device.port().gid,
            rkey: 0x1234,
            remote_addr: 0,
            length: 0,
            port: device.port().port,
            lid: 7,
        }
    }

    fn range(mem: &TestMemory) -> BindRange<'_> {
        BindRange {
            mr: &mem.mr,
            addr: mem.mr.addr() as u64,
            len: 4096,
            access: Access::REMOTE_WRITE,
        }
    }

    #[test]
    #[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
    fn a_pool_connection_whose_bind_is_not_confirmed_is_fenced_then_replaced() {
        let device = lane_tests::open();
        let role = Role::Pool {
            slot: 0,
            remote_inv: false,
        };
        let mut conn = Connection::fresh(&device, Protection::Windows, role).expect("fresh");
        let peer = conn.state().qp_num;
        conn.pair(&server_token(&device, peer)).expect("pair");
        let good = TestMemory::new(&device, 4096, Access::LOCAL_WRITE | Access::MW_BIND);
        let posted = conn.post_bind(&range(&good)).expect("post bind");
        let rkey = conn.confirm_bind(posted).expect("bind confirmed");
        conn.end_window(rkey, WindowEnd::Settled)
            .expect("invalidated");
        assert!(!conn.is_fenced(), "confirmed bind and invalidation");

        let no_bind = TestMemory::new(&device, 4096, Access::LOCAL_WRITE);
        let posted = conn.post_bind(&range(&no_bind)).expect("post bind");
        assert!(
            conn.confirm_bind(posted).is_err(),
            "the NIC refuses the bind"
        );
        assert!(
            conn.is_fenced(),
            "an unconfirmed bind fences the connection's QP"
        );
        assert!(
            conn.post_bind(&range(&good)).is_err(),
            "a fenced QP binds nothing"
        );
        let old_qp = conn.state().qp_num;
        conn.renew().expect("the worker replaces the QP");
        assert!(!conn.is_fenced() && !conn.is_paired());
        assert_ne!(conn.state().qp_num, old_qp);
    }

    #[test]
    #[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
    fn an_application_window_whose_bind_is_not_confirmed_fences_the_qp() {
        let device = lane_tests::open();
        let app = AppConnection::new(&device, Protection::Windows).expect("app connection");
        let good = TestMemory::new(&device, 4096, Access::LOCAL_WRITE | Access::MW_BIND);
        let unpaired = app.mint(&range(&good), 0).expect("unpaired token");
        assert_eq!(unpaired.rkey, 0);
        app.pair(&server_token(&device, unpaired.qp_num))
            .expect("pair");
        let token = app.mint(&range(&good), 0).expect("token");
        assert_ne!(token.rkey, 0);
        assert_eq!(token.qp_num, unpaired.qp_num);
        app.release(&token);
        assert_eq!(app.open_windows(), 0);

        let no_bind = TestMemory::new(&device, 4096, Access::LOCAL_WRITE);
        assert!(
            app.mint(&range(&no_bind), 0).is_err(),
            "the NIC refuses the bind"
        );
        assert_eq!(app.open_windows(), 0);
        // The fenced QP is replaced before the next token: a fresh, unpaired one.
        let next = app.mint(&range(&good), 0).expect("token of a fresh QP");
        assert_ne!(next.qp_num, unpaired.qp_num, "the fenced QP was replaced");
        assert_eq!(next.rkey, 0, "the fresh QP is not paired yet");
    }
}
