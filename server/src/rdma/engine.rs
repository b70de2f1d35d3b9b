//! What one token request does on an RDMA worker thread (PROTOCOL.md section 4, rules 2-5):
//! check the object or bucket, then pair or transfer, then build the outcome.

use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hipobj::token::{Token, Transport};
use tracing::{debug, info, warn};

use super::pairing::{KeyLease, Pairing, PairingTable};
use super::port::{Peer, QpSetup, RdmaOp, RdmaPort};
use super::staging::StagingPool;
use super::transfer::{self, ChunkSink, Deadlines, Direction, Remote, Shape};
use super::{JobKind, RdmaJob, RdmaOutcome, RejectCode};
use crate::stats::Stats;
use crate::storage::{ObjectWriter, Storage, StorageError};

/// The RDMA knobs the engine uses.
#[derive(Clone, Debug)]
pub struct EngineSettings {
    pub chunk_bytes: usize,
    pub wr_depth: usize,
    pub watchdog: Duration,
    pub flush_wait: Duration,
    pub max_pairings: usize,
    pub pairing_idle: Duration,
}

impl From<&crate::config::RdmaSettings> for EngineSettings {
    fn from(s: &crate::config::RdmaSettings) -> Self {
        EngineSettings {
            chunk_bytes: s.chunk_bytes,
            wr_depth: s.wr_depth,
            watchdog: s.watchdog,
            flush_wait: Duration::from_secs(1),
            max_pairings: s.max_pairings,
            pairing_idle: s.pairing_idle,
        }
    }
}

/// Pairing table, staging pool and port: everything RDMA workers share.
pub struct Engine<P: RdmaPort> {
    port: P,
    table: PairingTable<P::Qp>,
    staging: StagingPool<P::Buffer>,
    write_shape: Shape,
    read_shape: Shape,
    deadlines: Deadlines,
    storage: Arc<Storage>,
    stats: Arc<Stats>,
}

impl<P: RdmaPort> Engine<P> {
    pub fn new(
        port: P,
        settings: &EngineSettings,
        storage: Arc<Storage>,
        stats: Arc<Stats>,
    ) -> Self {
        let info = port.info().clone();
        let write_shape = Shape::new(
            RdmaOp::Write,
            settings.chunk_bytes,
            info.max_msg_sz,
            settings.wr_depth,
            info.max_rd_atomic,
        );
        let read_shape = Shape::new(
            RdmaOp::Read,
            settings.chunk_bytes,
            info.max_msg_sz,
            settings.wr_depth,
            info.max_rd_atomic,
        );
        info!(
            device = %info.device,
            chunk = write_shape.chunk,
            write_depth = write_shape.depth,
            read_depth = read_shape.depth,
            "RDMA engine ready"
        );
        Engine {
            table: PairingTable::new(
                settings.max_pairings,
                settings.pairing_idle,
                Arc::clone(&stats),
            ),
            staging: StagingPool::new(write_shape.staging_len().max(read_shape.staging_len())),
            write_shape,
            read_shape,
            deadlines: Deadlines {
                watchdog: settings.watchdog,
                flush_wait: settings.flush_wait,
            },
            port,
            storage,
            stats,
        }
    }

    pub fn port(&self) -> &P {
        &self.port
    }

    /// Destroy pairings idle too long.
    pub fn expire(&self, now: Instant) -> usize {
        self.table.expire(now)
    }

    /// Handle one token request.
    pub fn run(&self, job: RdmaJob) -> RdmaOutcome {
        if job.token.transport != Transport::Rc {
            return RdmaOutcome::Rejected(RejectCode::NotImplemented);
        }
        match job.kind {
            JobKind::Get { range } => self.get(&job.token, &job.bucket, &job.key, range),
            JobKind::Put => self.put(&job.token, &job.bucket, &job.key),
        }
    }

    fn get(
        &self,
        token: &Token,
        bucket: &str,
        key: &str,
        range: Option<s3s::dto::Range>,
    ) -> RdmaOutcome {
        let object = match self.storage.open_object(bucket, key) {
            Ok(o) => o,
            Err(e) => return reject_storage(e),
        };
        let size = object.info.size;
        let selected = match range {
            None => 0..size,
            Some(r) => match r.check(size) {
                Ok(sel) => sel,
                Err(_) => return RdmaOutcome::Rejected(RejectCode::RangeNotSatisfiable),
            },
        };
        let len = selected.end - selected.start;
        if len > token.length {
            debug!(
                len,
                buffer = token.length,
                "client buffer smaller than the selected bytes"
            );
            return RdmaOutcome::Rejected(RejectCode::BadRequest);
        }
        let mut lease = match self.lease_pairing(token) {
            Ok(lease) => lease,
            Err(outcome) => return outcome,
        };
        let mut file = &object.file;
        if let Err(e) = file.seek(SeekFrom::Start(selected.start)) {
            warn!(error = %e, "seek failed");
            return RdmaOutcome::Rejected(RejectCode::Failed);
        }
        let mut source = file.take(len);
        match self.move_bytes(&mut lease, Direction::Write(&mut source), len, token) {
            Some(server) => {
                Stats::bump(&self.stats.rdma_gets);
                Stats::add(&self.stats.rdma_bytes_written, len);
                RdmaOutcome::Fetched {
                    server,
                    bytes: len,
                    info: object.info,
                    range: range.map(|_| selected),
                }
            }
            None => RdmaOutcome::Rejected(RejectCode::Failed),
        }
    }

    fn put(&self, token: &Token, bucket: &str, key: &str) -> RdmaOutcome {
        let mut writer = match self.storage.begin_put(bucket, key) {
            Ok(w) => w,
            Err(e) => return reject_storage(e),
        };
        let mut lease = match self.lease_pairing(token) {
            Ok(lease) => lease,
            Err(outcome) => return outcome,
        };
        let Some(server) = self.move_bytes(
            &mut lease,
            Direction::Read(&mut writer),
            token.length,
            token,
        ) else {
            return RdmaOutcome::Rejected(RejectCode::Failed);
        };
        match writer.commit() {
            Ok(info) => {
                Stats::bump(&self.stats.rdma_puts);
                Stats::add(&self.stats.rdma_bytes_read, info.size);
                RdmaOutcome::Stored { server, info }
            }
            Err(e) => {
                warn!(error = %e, "storing an RDMA PUT failed");
                lease.destroy_pairing("object not stored");
                RdmaOutcome::Rejected(RejectCode::Failed)
            }
        }
    }

    /// The lease of the token's key when its pairing matches; otherwise silence any old QP,
    /// create and store a new pairing and answer `Err(PairingNeeded)` (rule 3).
    fn lease_pairing(&self, token: &Token) -> Result<KeyLease<'_, P::Qp>, RdmaOutcome> {
        let peer = Peer {
            gid: token.gid,
            qp_num: token.qp_num,
        };
        let mut lease = self
            .table
            .checkout(peer, Instant::now())
            .map_err(|_| RdmaOutcome::Rejected(RejectCode::Busy))?;
        let old_id = lease.pairing().map(|p| p.id);
        if token.lid != 0 && old_id == Some(token.lid) {
            return Ok(lease);
        }
        if old_id.is_some() {
            Stats::bump(&self.stats.pairings_replaced);
        }
        // Silence the superseded QP before anything else (PAIRING-FINDINGS section 5, item 2).
        lease.destroy_pairing("superseded by a new pairing");
        let start_psn = random_u32() & 0x00ff_ffff;
        let id = loop {
            let id = random_u32() as u16;
            if id != 0 && Some(id) != old_id && id != token.lid {
                break id;
            }
        };
        let depth = self.write_shape.depth.max(self.read_shape.depth) as u32;
        let setup = QpSetup {
            peer,
            start_psn,
            max_send_wr: depth + 1,
        };
        let qp = match self.port.connect_qp(&setup) {
            Ok(qp) => qp,
            Err(e) => {
                warn!(error = %e, client_qpn = peer.qp_num, "creating a server QP failed");
                return Err(RdmaOutcome::Rejected(RejectCode::Failed));
            }
        };
        let server = self.server_token(qp_num_of(&qp), start_psn, id);
        debug!(
            client_qpn = peer.qp_num,
            server_qpn = server.qp_num,
            pairing = id,
            "new pairing"
        );
        lease.install(Pairing { id, start_psn, qp });
        Stats::bump(&self.stats.pairings_created);
        Err(RdmaOutcome::PairingNeeded { server })
    }

    /// Run the transfer on the lease's pairing; `None` after a failure (pairing destroyed).
    fn move_bytes(
        &self,
        lease: &mut KeyLease<'_, P::Qp>,
        dir: Direction<'_>,
        len: u64,
        token: &Token,
    ) -> Option<Token> {
        let shape = match dir {
            Direction::Write(_) => self.write_shape,
            Direction::Read(_) => self.read_shape,
        };
        let mut staging = match self.staging.acquire(&self.port) {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "no staging buffer");
                lease.destroy_pairing("no staging buffer");
                Stats::bump(&self.stats.pairings_failed);
                return None;
            }
        };
        let pairing = lease.pairing_mut()?;
        let remote = Remote {
            addr: token.remote_addr,
            rkey: token.rkey,
        };
        let result = transfer::run(
            &mut pairing.qp,
            &mut staging,
            shape,
            dir,
            len,
            remote,
            self.deadlines,
            &self.stats,
        );
        match result {
            Ok(()) => {
                Some(self.server_token(qp_num_of(&pairing.qp), pairing.start_psn, pairing.id))
            }
            Err(e) => {
                warn!(error = %e, client_qpn = token.qp_num, len, "RDMA transfer failed; pairing destroyed");
                // Destroyed while the staging buffer is still held: no request can touch it later.
                lease.destroy_pairing("transfer failed");
                Stats::bump(&self.stats.pairings_failed);
                drop(staging);
                None
            }
        }
    }

    fn server_token(&self, qp_num: u32, start_psn: u32, id: u16) -> Token {
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

fn qp_num_of<Q: super::port::RdmaQp>(qp: &Q) -> u32 {
    qp.qp_num()
}

impl ChunkSink for ObjectWriter {
    fn drain(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.write_all(data)
    }
}

fn reject_storage(e: StorageError) -> RdmaOutcome {
    RdmaOutcome::Rejected(match e {
        StorageError::NoSuchBucket | StorageError::NoSuchKey => RejectCode::NotFound,
        StorageError::InvalidKey => RejectCode::BadRequest,
        other => {
            warn!(error = %other, "storage failed");
            RejectCode::Failed
        }
    })
}

/// Random bits from the OS, with a per-process hashed counter as fallback.
pub fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    if getrandom::fill(&mut b).is_ok() {
        return u32::from_le_bytes(b);
    }
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.finish() as u32
}
