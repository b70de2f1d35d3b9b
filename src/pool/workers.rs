//! A runtime's pool connections: the pool that holds the idle ones by value, and the recovery
//! worker of each (`hipobj-qp-NN`, `hipobj_actors::recovery`).

use super::connection::{Connection, Role};
use super::protection::Protection;
use crate::error::{Error, Result};
use crate::verbs::Device;
use hipobj_actors::recovery::RecoveryHandle;
use hipobj_actors::sync::Arc;
use std::time::Duration;

/// The pool of a runtime's connections.
pub type Pool = hipobj_actors::pool::Pool<Connection>;
/// A pool connection, moved to the thread that leased it.
pub type Lease = hipobj_actors::pool::Lease<Connection>;

/// Pause between attempts to create a fresh QP for a failed connection.
const RECOVERY_RETRY: Duration = Duration::from_millis(100);

/// The pool connections of a runtime and their recovery workers.
pub struct PoolConnections {
    // Order matters: the pool goes first; leases a worker still holds keep it alive until that
    // worker stops (below) and drops them, so every connection is dropped once, with the pool.
    pool: Arc<Pool>,
    workers: Vec<RecoveryHandle<Connection>>,
}

impl PoolConnections {
    /// `n` fresh connections (QPs in INIT, with their windows) and a worker for each; with
    /// `remote_inv` (`HIPOBJ_REMOTE_INV`) their QPs keep receives posted for the server's
    /// SEND_WITH_INV.
    pub fn open(
        device: &Arc<Device>,
        protection: Protection,
        n: usize,
        remote_inv: bool,
    ) -> Result<PoolConnections> {
        let mut connections = Vec::with_capacity(n);
        let mut workers = Vec::with_capacity(n);
        for slot in 0..n {
            connections.push(Connection::fresh(
                device,
                protection,
                Role::Pool { slot, remote_inv },
            )?);
            let worker = RecoveryHandle::spawn(format!("hipobj-qp-{slot:02}"), RECOVERY_RETRY)
                .map_err(|e| Error::rdma(format!("cannot start a QP worker thread: {e}")))?;
            workers.push(worker);
        }
        Ok(PoolConnections {
            pool: Pool::new(connections),
            workers,
        })
    }

    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    /// Give a connection back after a transfer: to the pool at once when it succeeded and its
    /// window was confirmed invalid; otherwise to its worker, which replaces the QP (rule 5.5)
    /// before the connection rejoins the pool. Returns at once either way.
    pub fn release(&self, lease: Lease, succeeded: bool) {
        let usable = succeeded && !lease.is_fenced();
        let Role::Pool { slot, .. } = lease.role() else {
            tracing::error!("the application connection was leased from the pool");
            return;
        };
        match self.workers.get(slot) {
            Some(worker) => worker.release(lease, usable),
            None => tracing::error!(slot, "a pool connection without a worker"),
        }
    }
}
