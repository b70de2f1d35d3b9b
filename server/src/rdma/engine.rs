//! The RDMA engine: one port shared by the two protocols a worker thread serves, each the owner
//! of its own state (docs/protocol.md sections 4 and 10):
//! - `shared`: the port, the staging pool, transfer shapes and deadlines, the store, statistics;
//! - `paired`: token requests over the pairing table (section 4);
//! - `v2`: hipobj-rc-v2 sessions (section 10) over the session table.
//!
//! [`Engine`] holds one of each and hands every job to its owner.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::paired::PairedTransfers;
use super::port::RdmaPort;
use super::session::SessionId;
use super::shared::Shared;
use super::v2::{SessionTransfers, V2Job, V2Outcome};
use super::{RdmaJob, RdmaOutcome};
use crate::backend::Backend;
use crate::identity::Requester;
use crate::stats::Stats;

/// The RDMA knobs the engine uses.
#[derive(Clone, Debug)]
pub struct EngineSettings {
    pub chunk_bytes: usize,
    pub wr_depth: usize,
    pub watchdog: Duration,
    pub flush_wait: Duration,
    /// Slowest acceptable transfer rate (bytes/s): the total deadline is watchdog + size / this.
    pub min_rate: u64,
    pub max_pairings: usize,
    pub max_pairings_per_client: usize,
    pub pairing_idle: Duration,
    /// hipobj-rc-v2 sessions.
    pub v2: crate::config::V2Settings,
    /// Token transfers still to fail on purpose (`--inject-rdma-failures`; tests only).
    #[cfg(feature = "fault-injection")]
    pub inject_failures: u64,
    /// Bytes every GET's WRITE lands past the client's address (`--inject-write-offset`; tests
    /// only).
    #[cfg(feature = "fault-injection")]
    pub inject_write_offset: u64,
    /// Copy every GET through a staging buffer instead of registering the store's file
    /// (`--copy-gets`).
    pub copy_gets: bool,
    /// Whether GETs are sent from the store's files, one answer for every engine of the server
    /// (`paired::FileGets`; cloned settings share it).
    pub file_gets: Arc<crate::rdma::paired::FileGets>,
}

impl From<&crate::config::RdmaSettings> for EngineSettings {
    fn from(s: &crate::config::RdmaSettings) -> Self {
        EngineSettings {
            chunk_bytes: s.chunk_bytes,
            wr_depth: s.wr_depth,
            watchdog: s.watchdog,
            flush_wait: Duration::from_secs(1),
            min_rate: s.min_rate,
            max_pairings: s.max_pairings,
            max_pairings_per_client: s.max_pairings_per_client,
            pairing_idle: s.pairing_idle,
            v2: s.v2.clone(),
            #[cfg(feature = "fault-injection")]
            inject_failures: s.inject_failures,
            #[cfg(feature = "fault-injection")]
            inject_write_offset: s.inject_write_offset,
            copy_gets: s.copy_gets,
            file_gets: Arc::default(),
        }
    }
}

/// Token requests over pairings and hipobj-rc-v2 sessions, over one shared port and staging
/// pool: everything RDMA workers share.
pub struct Engine<P: RdmaPort> {
    pub(super) pairings: PairedTransfers<P>,
    pub(super) sessions: SessionTransfers<P>,
    shared: Arc<Shared<P>>,
}

impl<P: RdmaPort> Engine<P> {
    pub fn new(
        port: P,
        settings: &EngineSettings,
        storage: Arc<dyn Backend>,
        stats: Arc<Stats>,
    ) -> Self {
        let shared = Arc::new(Shared::new(port, settings, storage, stats));
        Engine {
            pairings: PairedTransfers::new(Arc::clone(&shared), settings),
            sessions: SessionTransfers::new(Arc::clone(&shared), &settings.v2),
            shared,
        }
    }

    pub fn port(&self) -> &P {
        &self.shared.port
    }

    /// Destroy pairings idle too long and reclaim hipobj-rc-v2 sessions past T_prep.
    pub fn expire(&self, now: Instant) -> usize {
        self.pairings.expire(now) + self.sessions.expire(now)
    }

    /// Handle one token request (`paired`).
    pub fn run(&self, job: RdmaJob) -> RdmaOutcome {
        self.pairings.run(job)
    }

    /// Run one hipobj-rc-v2 PREPARE or READY (`v2`).
    pub fn run_v2(&self, job: V2Job) -> V2Outcome {
        self.sessions.run(job)
    }

    /// CANCEL: the requester's waiting session ends now. Anything else changes nothing.
    pub fn v2_cancel(&self, requester: &Requester, session: &SessionId) {
        self.sessions.cancel(requester, session)
    }

    /// Whether hipobj-rc-v2 session `id` was prepared on this engine (tombstones included).
    pub fn holds_session(&self, id: &SessionId) -> bool {
        self.sessions.holds(id)
    }

    /// hipobj-rc-v2 sessions prepared or moving now.
    pub fn v2_live(&self) -> usize {
        self.sessions.live()
    }
}
