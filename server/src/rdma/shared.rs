//! What the engine's two protocols share: the port, the staging pool, how a transfer is cut
//! (one [`Shape`] per direction), its deadlines, the store and the statistics. Token requests
//! over pairings (`paired`, docs/protocol.md section 4) and hipobj-rc-v2 sessions (`v2`, section
//! 10) each hold this state through an `Arc` and keep their own tables.

use std::sync::Arc;

use hipobj::token::{Token, Transport};
use tracing::{info, warn};

use super::engine::EngineSettings as Settings;
#[cfg(feature = "fault-injection")]
use super::inject::Injections;
use super::port::{PortError, RdmaOp, RdmaPort};
use super::staging::{Staged, StagingPool};
use super::transfer::{Deadlines, Shape};
use crate::backend::{self, Backend};
use crate::identity::Requester;
use crate::stats::Stats;

/// The port and everything RDMA workers share across protocols.
pub struct Shared<P: RdmaPort> {
    pub port: P,
    /// Staging buffers of either shape's length, registered once and reused.
    pub staging: StagingPool<P::Buffer>,
    /// RDMA WRITE (GET) transfers.
    pub write_shape: Shape,
    /// RDMA READ (PUT) transfers.
    pub read_shape: Shape,
    pub deadlines: Deadlines,
    pub storage: Arc<dyn Backend>,
    pub stats: Arc<Stats>,
    /// Faults injected on purpose (`--inject-rdma-failures`, `--inject-write-offset`; tests only).
    #[cfg(feature = "fault-injection")]
    pub injections: Injections,
}

impl<P: RdmaPort> Shared<P> {
    pub fn new(port: P, settings: &Settings, storage: Arc<dyn Backend>, stats: Arc<Stats>) -> Self {
        let info = port.info().clone();
        let shape = |op| {
            Shape::new(
                op,
                settings.chunk_bytes,
                info.max_msg_sz,
                settings.wr_depth,
                info.max_rd_atomic,
            )
        };
        let write_shape = shape(RdmaOp::Write);
        let read_shape = shape(RdmaOp::Read);
        info!(
            device = %info.device,
            chunk = write_shape.chunk,
            write_depth = write_shape.depth,
            read_depth = read_shape.depth,
            "RDMA engine ready"
        );
        Shared {
            staging: StagingPool::new(write_shape.staging_len().max(read_shape.staging_len())),
            write_shape,
            read_shape,
            deadlines: Deadlines {
                watchdog: settings.watchdog,
                flush_wait: settings.flush_wait,
                min_rate: settings.min_rate,
            },
            port,
            storage,
            stats,
            #[cfg(feature = "fault-injection")]
            injections: Injections::new(settings.inject_failures, settings.inject_write_offset),
        }
    }

    /// The store as `who` reaches it (gateway mode: requests signed as that identity).
    pub fn storage_for(&self, who: &Requester) -> Arc<dyn Backend> {
        backend::acting_for(&self.storage, &who.identity)
    }

    /// A staging buffer of the pool's size; a failure is logged here, the caller answers it.
    pub fn staging_buffer(&self) -> Result<Staged<P::Buffer>, PortError> {
        self.staging.acquire(&self.port).inspect_err(|e| {
            warn!(error = %e, "no staging buffer");
        })
    }

    /// The server token of server QP `qp_num`: this port's GID and port number, `start_psn` in
    /// the rkey field and `id` in the LID field (a pairing's; both 0 for a v2 session's QP).
    pub fn server_token(&self, qp_num: u32, start_psn: u32, id: u16) -> Token {
        let info = self.port.info();
        Token {
            transport: Transport::Rc,
            qp_num,
            gid: info.gid,
            rkey: start_psn,
            remote_addr: 0,
            length: 0,
            port: info.port,
            lid: id,
        }
    }
}
