//! RDMA connections: one QP worker actor per connection, and the pool that leases them.
//!
//! Each worker thread (`hipobj-qp-NN`) owns one RC queue pair and is the only code that touches it.
//! Transfers talk to it through [`ConnectionHandle`]: mint a token for a buffer range, pair the QP with
//! the server QP named in a `428` reply (PROTOCOL.md rule 5.3), check a `200` reply's server token
//! against the pairing (rule 5.4), or replace the QP with a fresh, never-paired one (rule 5.5).
//! A QP is paired at most once in its life: every re-pairing and every reset creates a new QP, so a
//! stale server QP can only ever aim at a dead QP number.

use crate::error::{Error, Result};
use crate::token::{Token, Transport};
use crate::verbs::{Access, Device, QpCaps, RcQp, RtrParams, RtsParams};
use hipobj_actors::answer::{request, Answer};
use hipobj_actors::sync::channel::{unbounded, Receiver, Sender};
use hipobj_actors::sync::thread;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub use hipobj_actors::pool::{AcquireError, Lease, Pool, Wait};

/// Live client QPs of this process (tests check nothing leaks across init/shutdown).
pub static LIVE_QPS: AtomicUsize = AtomicUsize::new(0);

/// Access rights of client QPs: the server reads and writes our memory.
fn qp_access() -> Access {
    Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE
}
/// Verbs attributes of the client side (PROTOCOL.md section 5; never retry_cnt 7).
const CLIENT_TIMEOUT: u8 = 14;
const CLIENT_RETRY_CNT: u8 = 6;
const CLIENT_RNR_RETRY: u8 = 6;
const MIN_RNR_TIMER: u8 = 12;

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
struct Pairing {
    server_qp_num: u32,
    pairing_id: u16,
}

/// A QP and what it is paired with. Owned by the worker thread only.
struct Connection {
    device: Arc<Device>,
    qp: RcQp,
    pairing: Option<Pairing>,
}

impl Connection {
    fn fresh(device: &Arc<Device>) -> Result<Connection> {
        let mut qp = device.create_rc_qp(QpCaps {
            max_send_wr: 1,
            max_recv_wr: 1,
            cq_depth: 1,
        })?;
        qp.to_init(qp_access())?;
        LIVE_QPS.fetch_add(1, Ordering::Relaxed);
        Ok(Connection {
            device: device.clone(),
            qp,
            pairing: None,
        })
    }

    fn token(&self, rkey: u32, remote_addr: u64, length: u64) -> Token {
        let port = self.device.port();
        Token {
            transport: Transport::Rc,
            qp_num: self.qp.qp_num(),
            gid: port.gid,
            rkey,
            remote_addr,
            length,
            port: port.port,
            lid: self.pairing.map_or(0, |p| p.pairing_id),
        }
    }

    /// Rule 5.3.
    fn pair(&mut self, server: &Token) -> Result<PairOutcome> {
        if server.transport != Transport::Rc {
            return Err(Error::rdma("428 reply names a non-RC server QP"));
        }
        if server.lid == 0 {
            return Err(Error::rdma("428 reply carries pairing id 0"));
        }
        if self.pairing.is_some() {
            self.replace()?;
            return Ok(PairOutcome::Replaced);
        }
        let port = self.device.port().clone();
        let caps = self.device.caps().clone();
        self.qp.to_rtr(&RtrParams {
            dest_qp_num: server.qp_num,
            dest_gid: server.gid,
            rq_psn: server.rkey & 0x00ff_ffff,
            path_mtu: port.active_mtu,
            max_dest_rd_atomic: caps.max_qp_rd_atom.max(1),
            min_rnr_timer: MIN_RNR_TIMER,
        })?;
        self.qp.to_rts(&RtsParams {
            sq_psn: crate::random::psn(),
            timeout: CLIENT_TIMEOUT,
            retry_cnt: CLIENT_RETRY_CNT,
            rnr_retry: CLIENT_RNR_RETRY,
            max_rd_atomic: 1,
        })?;
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

    /// Rule 5.4: does a `200:<server token>` name this connection's pairing?
    fn matches(&self, server: &Token) -> bool {
        self.pairing
            .is_some_and(|p| p.server_qp_num == server.qp_num && p.pairing_id == server.lid)
    }

    /// Rule 5.5: destroy the QP and create a fresh, never-paired one.
    fn replace(&mut self) -> Result<()> {
        let fresh = Connection::fresh(&self.device)?;
        let old = std::mem::replace(self, fresh);
        tracing::debug!(
            old_qpn = old.qp.qp_num(),
            new_qpn = self.qp.qp_num(),
            "connection replaced"
        );
        Ok(())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        LIVE_QPS.fetch_sub(1, Ordering::Relaxed);
    }
}

enum Msg {
    Mint {
        rkey: u32,
        remote_addr: u64,
        length: u64,
        answer: Answer<Token>,
    },
    Pair {
        server: Token,
        answer: Answer<Result<PairOutcome>>,
    },
    Matches {
        server: Token,
        answer: Answer<bool>,
    },
    Replace {
        answer: Answer<Result<()>>,
    },
}

struct Worker {
    conn: Connection,
}

impl Worker {
    fn run(mut self, inbox: Receiver<Msg>) {
        while let Ok(msg) = inbox.recv() {
            match msg {
                Msg::Mint {
                    rkey,
                    remote_addr,
                    length,
                    answer,
                } => answer.send(self.conn.token(rkey, remote_addr, length)),
                Msg::Pair { server, answer } => answer.send(self.conn.pair(&server)),
                Msg::Matches { server, answer } => answer.send(self.conn.matches(&server)),
                Msg::Replace { answer } => answer.send(self.conn.replace()),
            }
        }
    }
}

/// The handle of one QP worker. Dropping it stops the worker and joins its thread (which destroys
/// the QP); it is never dropped on the worker's own thread.
pub struct ConnectionHandle {
    // Order matters: the sender drops first, so the worker's `recv` fails and it returns before the
    // join below.
    inbox: Option<Sender<Msg>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl ConnectionHandle {
    /// Create the QP (in INIT) and start its worker thread.
    pub fn spawn(name: String, device: &Arc<Device>) -> Result<ConnectionHandle> {
        let conn = Connection::fresh(device)?;
        let (tx, rx) = unbounded();
        let worker = Worker { conn };
        let thread = std::thread::Builder::new()
            .name(name)
            .stack_size(256 * 1024)
            .spawn(move || worker.run(rx))
            .map_err(|e| Error::rdma(format!("cannot start a QP worker thread: {e}")))?;
        Ok(ConnectionHandle {
            inbox: Some(tx),
            thread: Some(thread),
        })
    }

    fn ask<T>(&self, make: impl FnOnce(Answer<T>) -> Msg) -> Result<T> {
        let stopped = || Error::internal("QP worker stopped");
        let inbox = self.inbox.as_ref().ok_or_else(stopped)?;
        request(inbox, make).map_err(|_| stopped())
    }

    /// A token for `length` bytes at `remote_addr` of the registration with `rkey`.
    pub fn mint(&self, rkey: u32, remote_addr: u64, length: u64) -> Result<Token> {
        self.ask(|answer| Msg::Mint {
            rkey,
            remote_addr,
            length,
            answer,
        })
    }

    /// Apply a `428` reply's server token (rule 5.3).
    pub fn pair(&self, server: Token) -> Result<PairOutcome> {
        self.ask(|answer| Msg::Pair { server, answer })?
    }

    /// Whether a `200` reply's server token names this pairing (rule 5.4).
    pub fn matches(&self, server: Token) -> Result<bool> {
        self.ask(|answer| Msg::Matches { server, answer })
    }

    /// Replace the QP by a fresh one (rule 5.5).
    pub fn replace(&self) -> Result<()> {
        self.ask(|answer| Msg::Replace { answer })?
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
