//! Token requests over pairings (docs/protocol.md section 4, rules 2-5): what one request does
//! on an RDMA worker thread: check the object or bucket, then pair or transfer, then build the
//! outcome. The pairings themselves live in the [`PairingTable`] (`pairing`).

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use hipobj::token::{Token, Transport};
use tracing::{debug, warn};

use super::engine::EngineSettings;
use super::pairing::{CheckoutError, KeyLease, Pairing, PairingKey, PairingTable};
use super::port::{Peer, QpSetup, RdmaPort, RdmaQp};
use super::selection::{select_bytes, SelectionError};
use super::shared::Shared;
use super::staging::Staged;
use super::transfer::{Direction, Plan, Remote, Transfer, TransferError};
use super::{JobKind, RdmaJob, RdmaOutcome};
use crate::backend::{Backend, ObjectReader, ObjectWriter, StorageError};
use crate::error::Fault;
use crate::identity::Requester;
use crate::stats::Stats;

/// Longest GET sent straight from the store's file pages. The registration pins the selected
/// pages for the whole transfer, and pins them all before the first byte moves (a cold page
/// cache is read then): longer GETs (a whole large object in one token; the engine's ranged
/// parts are 8 MiB) go through the pipelined staging copy, which pins nothing of the file.
pub const MAX_REGISTERED_GET: u64 = 64 << 20;

/// Token requests: the pairing table over the shared port and staging pool.
pub struct PairedTransfers<P: RdmaPort> {
    shared: Arc<Shared<P>>,
    pub(super) table: PairingTable<P::Qp>,
    file_gets: Arc<FileGets>,
    copy_gets: bool,
}

/// Whether a GET may be sent from its object's file: never with `--copy-gets`, nor after the
/// first refused registration (a latch). One for the whole server, shared by the engines of all
/// its devices (`EngineSettings::file_gets`): until a registration has succeeded, attempts run
/// one at a time, so a kernel that refuses them all (Debian's 6.1) sees one refused attempt,
/// not one per device and thread at once; and the server asks once at start
/// ([`FileGets::probe`]), before any transfer, so that a kernel refusing them all refuses there.
#[derive(Debug, Default)]
pub struct FileGets {
    /// A file registration was refused: GETs are copied from then on.
    refused: AtomicBool,
    /// A file registration succeeded: later attempts need not wait for each other.
    registered: AtomicBool,
    /// Held by an attempt while none has succeeded yet.
    first: std::sync::Mutex<()>,
}

impl FileGets {
    /// Try to register a GET of `len` bytes, cut in chunks of `chunk` bytes?
    fn worth_trying(&self, copy_gets: bool, len: u64, chunk: u32) -> bool {
        !copy_gets
            && len > u64::from(chunk)
            && len <= MAX_REGISTERED_GET
            && !self.refused.load(Ordering::Relaxed)
    }

    /// Run `attempt` (a file registration), alone while none has succeeded; `None` when an
    /// attempt waited for was refused meanwhile.
    fn attempt<T, E>(&self, attempt: impl FnOnce() -> Result<T, E>) -> Option<Result<T, E>> {
        let _alone = (!self.registered.load(Ordering::Acquire))
            .then(|| self.first.lock().unwrap_or_else(|p| p.into_inner()));
        if self.refused.load(Ordering::Relaxed) {
            return None;
        }
        let outcome = attempt();
        if outcome.is_ok() {
            self.registered.store(true, Ordering::Release);
        }
        Some(outcome)
    }

    /// A registration was refused; true the first time (the caller says it once).
    fn latch_refused(&self) -> bool {
        !self.refused.swap(true, Ordering::Relaxed)
    }

    /// Ask the kernel once, at start, whether it registers a file's pages at all: a one-page
    /// file in memory (memfd), mapped and registered on `port` as a GET's bytes would be. A
    /// kernel that refuses every such registration (Linux before 6.2) then has its one refusal
    /// here, on one thread, before any transfer runs on any device, and no GET tries again. A
    /// refusal that only some files meet (a file system, a pinning limit) is still latched by
    /// the first GET it refuses. Nothing to ask with `--copy-gets`. A refusal is counted in
    /// `file_registrations_refused`; a success is not a GET, so not in `file_registrations`.
    /// Whether it refused.
    pub fn probe<P: RdmaPort>(&self, copy_gets: bool, port: &P, stats: &Stats) -> bool {
        if copy_gets {
            return false;
        }
        let page = hipobj::verbs::page_size();
        let outcome = memory_file(page).and_then(|file| port.register_file(&file, 0, page));
        match outcome {
            Ok(registered) => {
                drop(registered);
                debug!(
                    "this kernel registers a file's pages: GETs may be sent from the store's files"
                );
                false
            }
            Err(e) => {
                if self.latch_refused() {
                    warn!(error = %e, "this kernel refuses registering a file's pages (Linux before 6.2 does): every GET is copied through staging buffers");
                }
                Stats::bump(&stats.file_registrations_refused);
                true
            }
        }
    }
}

/// A file of `len` zero bytes in memory (`memfd_create`), closed on exec.
fn memory_file(len: usize) -> Result<std::fs::File, super::port::PortError> {
    use std::os::fd::FromRawFd;
    let failed =
        |what: &str| super::port::PortError::new(format!("{what}: {}", io::Error::last_os_error()));
    // SAFETY: a NUL-terminated name and valid flags; the result is checked before use.
    let fd = unsafe { libc::memfd_create(c"hipobj-file-probe".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(failed("memfd_create"));
    }
    // SAFETY: `fd` is a descriptor just created and owned by nothing else.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.set_len(len as u64)
        .map_err(|e| super::port::PortError::new(format!("sizing a memfd: {e}")))?;
    Ok(file)
}

impl<P: RdmaPort> PairedTransfers<P> {
    pub fn new(shared: Arc<Shared<P>>, settings: &EngineSettings) -> Self {
        PairedTransfers {
            table: PairingTable::new(
                settings.max_pairings,
                settings.max_pairings_per_client,
                settings.pairing_idle,
                Arc::clone(&shared.stats),
            ),
            file_gets: Arc::clone(&settings.file_gets),
            copy_gets: settings.copy_gets,
            shared,
        }
    }

    /// Destroy pairings idle too long; returns how many.
    pub fn expire(&self, now: Instant) -> usize {
        self.table.expire(now)
    }

    /// Handle one token request. A refusal that does not start nothing (500, 507: the client
    /// replaces its QP) leaves no pairing behind for the token's client QP (revision 5, rule 1);
    /// every other refusal leaves the pairing as it was.
    pub fn run(&self, job: RdmaJob) -> RdmaOutcome {
        let key = pairing_key(&job.token, &job.requester);
        let outcome = self.run_job(job);
        if let RdmaOutcome::Rejected(fault) = &outcome {
            if !fault.starts_nothing() {
                self.drop_pairing(&key, fault);
            }
        }
        outcome
    }

    /// Drop `key`'s pairing after `fault` (a transfer that failed has dropped it already).
    fn drop_pairing(&self, key: &PairingKey, fault: &Fault) {
        let Some(mut lease) = self.table.lease_existing(key) else {
            return;
        };
        if lease.pairing().is_some() {
            debug!(
                client_qpn = key.client.qp_num,
                status = fault.status(),
                "pairing dropped with the answer"
            );
            lease.destroy_pairing("answered with a reply that replaces the QP");
            Stats::bump(&self.shared.stats.pairings_failed);
        }
    }

    fn run_job(&self, job: RdmaJob) -> RdmaOutcome {
        if job.token.transport != Transport::Rc {
            return RdmaOutcome::Rejected(Fault::NO_RDMA);
        }
        let who = &job.requester;
        let storage = self.shared.storage_for(who);
        let storage = storage.as_ref();
        let stats = &self.shared.stats;
        match job.kind {
            JobKind::Get { range } => {
                self.get(storage, &job.token, who, &job.bucket, &job.key, range)
            }
            JobKind::Put { mut options } => {
                options.size = Some(job.token.length);
                let created = storage.create_write(&job.bucket, &job.key, *options);
                self.put(&job.token, who, created, &stats.rdma_puts)
            }
            JobKind::Part {
                upload_id,
                part_number,
                mut options,
            } => {
                options.size = Some(job.token.length);
                let created = storage.create_part_write(
                    &job.bucket,
                    &job.key,
                    &upload_id,
                    part_number,
                    *options,
                );
                self.put(&job.token, who, created, &stats.rdma_parts)
            }
        }
    }

    fn get(
        &self,
        storage: &dyn Backend,
        token: &Token,
        who: &Requester,
        bucket: &str,
        key: &str,
        range: Option<s3s::dto::Range>,
    ) -> RdmaOutcome {
        let mut object = match storage.open_read(bucket, key, None) {
            Ok(o) => o,
            Err(e) => return RdmaOutcome::Rejected(e.into()),
        };
        let selected = match select_bytes(range.as_ref(), object.info.size, token.length) {
            Ok(sel) => sel,
            Err(e) => return RdmaOutcome::Rejected(selection_fault(e)),
        };
        let len = selected.end - selected.start;
        let mut lease = match self.lease_pairing(token, who) {
            Ok(lease) => lease,
            Err(unpaired) => return unpaired.into(),
        };
        object.narrow(selected.clone());
        match self.send_object(&mut lease, &mut object, len, token) {
            Ok(server) => {
                Stats::bump(&self.shared.stats.rdma_gets);
                Stats::add(&self.shared.stats.rdma_bytes_written, len);
                RdmaOutcome::Fetched {
                    server,
                    bytes: len,
                    info: object.info,
                    range: range.map(|_| selected),
                }
            }
            Err(code) => RdmaOutcome::Rejected(code),
        }
    }

    /// RDMA WRITE the narrowed `object` (`len` bytes): from its file's registered pages when
    /// [`Self::register_selected`] allows, else copied through a staging buffer.
    fn send_object(
        &self,
        lease: &mut KeyLease<'_, P::Qp>,
        object: &mut ObjectReader,
        len: u64,
        token: &Token,
    ) -> Result<Token, Fault> {
        if let Some(file) = self.register_selected(object) {
            return self.move_bytes(lease, Direction::Registered, &file, len, token);
        }
        let staged = self.staging(lease)?;
        self.move_bytes(lease, Direction::Write(object), &staged, len, token)
    }

    /// RDMA READ the token's bytes into `created` (an object's or a part's writer) and commit
    /// it; `done` counts the success. The writer is checked before any pairing: a missing
    /// bucket, key or upload is answered without touching the client's memory.
    fn put(
        &self,
        token: &Token,
        who: &Requester,
        created: Result<ObjectWriter, StorageError>,
        done: &AtomicU64,
    ) -> RdmaOutcome {
        let mut writer = match created {
            Ok(w) => w,
            Err(e) => return RdmaOutcome::Rejected(e.into()),
        };
        let mut lease = match self.lease_pairing(token, who) {
            Ok(lease) => lease,
            Err(unpaired) => return unpaired.into(),
        };
        let received = self.staging(&mut lease).and_then(|staged| {
            let dir = Direction::Read(&mut writer);
            self.move_bytes(&mut lease, dir, &staged, token.length, token)
        });
        match received {
            Ok(server) => self.commit(writer, server, done),
            Err(code) => {
                // Nothing of a failed PUT is stored: the temporary bytes go.
                writer.abort();
                RdmaOutcome::Rejected(code)
            }
        }
    }

    /// Commit a PUT whose bytes all arrived in `writer`.
    fn commit(&self, writer: ObjectWriter, server: Token, done: &AtomicU64) -> RdmaOutcome {
        let committing = Instant::now();
        let committed = writer.commit();
        debug!(
            commit_us = committing.elapsed().as_micros() as u64,
            "RDMA PUT committed"
        );
        match committed {
            Ok(info) => {
                Stats::bump(done);
                Stats::add(&self.shared.stats.rdma_bytes_read, info.size);
                RdmaOutcome::Stored { server, info }
            }
            Err(e) => {
                // The RDMA READs completed and nothing was stored: a digest the client sent
                // that does not match stays 400 (the pairing stays), a full disk 507; anything
                // else is a failed transfer (500). `run` drops the pairing after a 507 or 500.
                warn!(error = %e, "storing an RDMA PUT failed");
                RdmaOutcome::Rejected(Fault::from(e).after_transfer())
            }
        }
    }

    /// The lease of the requester's key for the token's client QP when its pairing matches;
    /// otherwise silence any old QP of that key, create and store a new pairing and answer
    /// `Err(PairingNeeded)` (rules 4.3, 4.8).
    fn lease_pairing(
        &self,
        token: &Token,
        who: &Requester,
    ) -> Result<KeyLease<'_, P::Qp>, Unpaired> {
        let key = pairing_key(token, who);
        let peer = key.client;
        let mut lease = match self.table.checkout(key, Instant::now()) {
            Ok(lease) => lease,
            Err(CheckoutError::KeyBusy) => {
                // One client connection never has two requests in flight: refuse at once.
                debug!(client_qpn = peer.qp_num, "pairing key busy; 503");
                Stats::bump(&self.shared.stats.busy_key_rejections);
                return Err(Unpaired::Rejected(Fault::BUSY));
            }
            Err(CheckoutError::TableFull) => return Err(Unpaired::Rejected(Fault::BUSY)),
        };
        let old_id = lease.pairing().map(|p| p.id);
        if token.lid != 0 && old_id == Some(token.lid) {
            return Ok(lease);
        }
        if old_id.is_some() {
            Stats::bump(&self.shared.stats.pairings_replaced);
        }
        // Silence the superseded QP before anything else (docs/protocol.md section 8).
        lease.destroy_pairing("superseded by a new pairing");
        let id = new_pairing_id(old_id, token.lid);
        Err(self.install_pairing(&mut lease, peer, id))
    }

    /// Connect a new server QP to `peer` and install it in the lease as pairing `id`: the 428's
    /// server token, or the refusal when no QP could be made.
    fn install_pairing(&self, lease: &mut KeyLease<'_, P::Qp>, peer: Peer, id: u16) -> Unpaired {
        let start_psn = hipobj::verbs::random_psn();
        let depth = self
            .shared
            .write_shape
            .depth
            .max(self.shared.read_shape.depth) as u32;
        let setup = QpSetup {
            peer,
            start_psn,
            max_send_wr: depth + 1,
        };
        let qp = match self.shared.port.connect_qp(&setup) {
            Ok(qp) => qp,
            Err(e) => {
                warn!(error = %e, client_qpn = peer.qp_num, "creating a server QP failed");
                return Unpaired::Rejected(Fault::RDMA_FAILED);
            }
        };
        let server = self.shared.server_token(qp.qp_num(), start_psn, id);
        debug!(
            client_qpn = peer.qp_num,
            server_qpn = server.qp_num,
            pairing = id,
            "new pairing"
        );
        lease.install(Pairing { id, start_psn, qp });
        Stats::bump(&self.shared.stats.pairings_created);
        Unpaired::PairingCreated(server)
    }

    /// A staging buffer from the pool; without one the pairing goes (500).
    fn staging(&self, lease: &mut KeyLease<'_, P::Qp>) -> Result<Staged<P::Buffer>, Fault> {
        self.shared.staging_buffer().map_err(|_| {
            lease.destroy_pairing("no staging buffer");
            Stats::bump(&self.shared.stats.pairings_failed);
            Fault::RDMA_FAILED
        })
    }

    /// A GET's selected bytes registered where they lie, in the store's file (no copy): when
    /// the store keeps the object in a file, the GET is longer than one chunk and at most
    /// [`MAX_REGISTERED_GET`], and the server was not told to copy (`--copy-gets`). `None`: the
    /// bytes go through a staging buffer.
    ///
    /// After the first refused registration every later GET is copied without trying: kernels
    /// before 6.2 refuse any read-only registration of a shared file mapping (their
    /// `ib_umem_get` pins with FOLL_FORCE | FOLL_WRITE: EFAULT, measured on Debian's 6.1; 6.12
    /// registers), and a pinning limit refuses again. Said once, at warn.
    fn register_selected(&self, object: &ObjectReader) -> Option<P::Buffer> {
        let len = object.range.end - object.range.start;
        if !self
            .file_gets
            .worth_trying(self.copy_gets, len, self.shared.write_shape.chunk)
        {
            return None;
        }
        let file = object.file()?;
        let stats = &self.shared.stats;
        let len_bytes = usize::try_from(len).ok()?;
        let registered = self.file_gets.attempt(|| {
            self.shared
                .port
                .register_file(file, object.range.start, len_bytes)
        })?;
        match registered {
            Ok(registered) => {
                Stats::bump(&stats.file_registrations);
                Some(registered)
            }
            Err(e) => {
                if self.file_gets.latch_refused() {
                    warn!(error = %e, len, "registering an object's file refused; every GET is copied through staging buffers from now on");
                }
                Stats::bump(&stats.file_registrations_refused);
                None
            }
        }
    }

    /// Run the transfer on the lease's pairing through `memory` (a staging buffer, or for
    /// [`Direction::Registered`] the registered file); after a failure (pairing destroyed) the
    /// code to answer: 507 when the local end found the disk full, 500 otherwise. The caller
    /// holds `memory` until this returns, so a failed transfer's QP is destroyed first.
    fn move_bytes(
        &self,
        lease: &mut KeyLease<'_, P::Qp>,
        dir: Direction<'_>,
        memory: &P::Buffer,
        len: u64,
        token: &Token,
    ) -> Result<Token, Fault> {
        let shape = match dir {
            Direction::Write(_) | Direction::Registered => self.shared.write_shape,
            Direction::Read(_) => self.shared.read_shape,
        };
        let pairing = lease.pairing_mut().ok_or(Fault::RDMA_FAILED)?;
        #[cfg(feature = "fault-injection")]
        self.shared
            .injections
            .maybe_fail(&mut pairing.qp, token, &self.shared.stats);
        let plan = Plan {
            shape,
            total: len,
            remote: Remote {
                addr: token.remote_addr,
                rkey: token.rkey,
            },
            last_imm: None,
            send_inv: remote_inv_of(token),
        };
        #[cfg(feature = "fault-injection")]
        let plan = match dir {
            Direction::Write(_) | Direction::Registered => self.shared.injections.write_plan(plan),
            Direction::Read(_) => plan,
        };
        let shared = &*self.shared;
        let result = Transfer::new(
            &mut pairing.qp,
            memory,
            plan,
            shared.deadlines,
            &shared.stats,
        )
        .and_then(|t| t.run(dir));
        match result {
            Ok(()) => Ok(shared
                .server_token(pairing.qp.qp_num(), pairing.start_psn, pairing.id)
                .with_remote_inv(plan.send_inv.is_some())),
            Err(e) => {
                warn!(error = %e, client_qpn = token.qp_num, len, "RDMA transfer failed; pairing destroyed");
                // Destroyed while the caller still holds `memory`: no request can touch it later.
                lease.destroy_pairing("transfer failed");
                Stats::bump(&shared.stats.pairings_failed);
                Err(transfer_fault(e))
            }
        }
    }
}

/// The pairing key of a token from `who` (rule 4.8).
fn pairing_key(token: &Token, who: &Requester) -> PairingKey {
    PairingKey {
        requester: who.clone(),
        client: Peer {
            gid: token.gid,
            qp_num: token.qp_num,
        },
    }
}

/// A random pairing id: non-zero, neither the key's old one nor the one the token echoed.
fn new_pairing_id(old: Option<u16>, echoed: u16) -> u16 {
    loop {
        let id = hipobj::random::u32() as u16;
        if id != 0 && Some(id) != old && id != echoed {
            return id;
        }
    }
}

/// Why no bytes were selected: 416 outside the object, 400 for a buffer too small.
fn selection_fault(e: SelectionError) -> Fault {
    match e {
        SelectionError::NotSatisfiable => Fault::RANGE_OUTSIDE,
        SelectionError::BufferTooSmall { selected, buffer } => {
            debug!(
                len = selected,
                buffer, "client buffer smaller than the selected bytes"
            );
            Fault::BUFFER_TOO_SMALL
        }
    }
}

/// The answer to a failed transfer: 507 when the local end found the disk full, 500 otherwise.
fn transfer_fault(e: TransferError) -> Fault {
    match e {
        TransferError::LocalIo(io) if io.kind() == io::ErrorKind::StorageFull => Fault::StorageFull,
        _ => Fault::RDMA_FAILED,
    }
}

/// Rule 11.1: the rkey to invalidate with a SEND_WITH_INV at the end of the transfer, when the
/// client's token says its QP keeps receives posted (and names a window).
fn remote_inv_of(token: &Token) -> Option<u32> {
    (token.remote_inv() && token.rkey != 0).then_some(token.rkey)
}

/// Why a request did not get a matching pairing.
enum Unpaired {
    /// A new pairing was created (428) and carries this server token.
    PairingCreated(Token),
    Rejected(Fault),
}

impl From<Unpaired> for RdmaOutcome {
    fn from(u: Unpaired) -> Self {
        match u {
            Unpaired::PairingCreated(server) => RdmaOutcome::PairingNeeded { server },
            Unpaired::Rejected(code) => RdmaOutcome::Rejected(code),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{FsBackend, WriteOptions};
    use crate::rdma::engine::Engine;
    use crate::rdma::port::{PortInfo, RdmaOp};
    use crate::rdma::test_double::{Behaviour, DoublePort, QpLog};
    use crate::rdma::test_fixture::{
        fixture, fixture_with, object, pattern, settings, tester, Fixture, BASE, CLIENT_GID,
    };
    use md5::{Digest, Md5};
    use std::io::Read;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    const RKEY: u32 = 0x55;

    fn token(qpn: u32, length: u64, lid: u16) -> Token {
        Token {
            transport: Transport::Rc,
            qp_num: qpn,
            gid: CLIENT_GID,
            rkey: RKEY,
            remote_addr: BASE,
            length,
            port: 1,
            lid,
        }
    }

    fn get(f: &Fixture, t: Token, key: &str, range: Option<s3s::dto::Range>) -> RdmaOutcome {
        f.engine.run(RdmaJob {
            token: t,
            requester: tester(),
            bucket: "b".into(),
            key: key.into(),
            kind: JobKind::Get { range },
        })
    }

    fn put(f: &Fixture, t: Token, key: &str) -> RdmaOutcome {
        f.engine.run(RdmaJob {
            token: t,
            requester: tester(),
            bucket: "b".into(),
            key: key.into(),
            kind: JobKind::Put {
                options: Box::default(),
            },
        })
    }

    /// Check out the tester's key for client QP `qpn`, as a running transfer holds it.
    fn hold(f: &Fixture, qpn: u32) -> KeyLease<'_, <DoublePort as RdmaPort>::Qp> {
        let client = Peer {
            gid: CLIENT_GID,
            qp_num: qpn,
        };
        let key = PairingKey {
            requester: tester(),
            client,
        };
        f.engine
            .pairings
            .table
            .checkout(key, Instant::now())
            .expect("room")
    }

    /// Send with pairing 0, check the 428, return the pairing id.
    fn pair(f: &Fixture, qpn: u32, len: u64, key: &str) -> Token {
        match get(f, token(qpn, len, 0), key, None) {
            RdmaOutcome::PairingNeeded { server } => server,
            other => panic!("expected 428, got {other:?}"),
        }
    }

    #[test]
    fn unpaired_get_creates_a_pairing_and_moves_nothing() {
        let f = fixture();
        object(&f, "k", &pattern(5000));
        f.port.add_region(RKEY, BASE, vec![0; 5000]);
        let server = pair(&f, 0x77, 5000, "k");
        assert_eq!(server.transport, Transport::Rc);
        assert_eq!(server.gid, f.port.info().gid);
        assert_eq!(server.port, 1);
        assert_ne!(server.lid, 0);
        assert!(server.rkey <= 0x00ff_ffff, "starting PSN is 24 bits");
        assert_eq!((server.remote_addr, server.length), (0, 0));
        let setup = f.port.log().into_iter().find_map(|e| match e {
            QpLog::Setup(s) => Some(s),
            _ => None,
        });
        let setup = setup.expect("a QP was set up");
        assert_eq!(
            setup.peer,
            Peer {
                gid: CLIENT_GID,
                qp_num: 0x77
            }
        );
        assert_eq!(setup.start_psn, server.rkey);
        assert!(f.port.posted().is_empty());
        assert!(f.port.region(RKEY).iter().all(|&b| b == 0));
        assert_eq!(f.stats.pairings_created.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn paired_get_writes_the_object_and_answers_with_the_pairing() {
        let f = fixture();
        let data = pattern(5000);
        object(&f, "k", &data);
        f.port.add_region(RKEY, BASE, vec![0; 6000]);
        let server = pair(&f, 0x77, 6000, "k");
        match get(&f, token(0x77, 6000, server.lid), "k", None) {
            RdmaOutcome::Fetched {
                server: s2,
                bytes,
                info,
                range,
            } => {
                assert_eq!(s2, server);
                assert_eq!(bytes, 5000);
                assert_eq!(info.size, 5000);
                assert_eq!(range, None);
            }
            other => panic!("expected 200, got {other:?}"),
        }
        assert_eq!(&f.port.region(RKEY)[..5000], &data[..]);
        let posted = f.port.posted();
        assert_eq!(posted.len(), 5);
        assert!(posted
            .iter()
            .all(|wr| wr.len <= 1000 && wr.op == RdmaOp::Write && wr.rkey == RKEY));
        assert_eq!(f.stats.rdma_bytes_written.load(Ordering::Relaxed), 5000);
        // Later requests reuse the pairing: no new QP.
        assert!(matches!(
            get(&f, token(0x77, 6000, server.lid), "k", None),
            RdmaOutcome::Fetched { .. }
        ));
        assert_eq!(f.stats.pairings_created.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_get_longer_than_a_chunk_is_sent_from_the_objects_file_unless_refused_or_told_to_copy() {
        let data = pattern(5000);
        let range = || s3s::dto::Range::Int {
            first: 1234,
            last: Some(4321),
        };
        let wanted = &data[1234..4322];
        let registrations = |f: &Fixture| {
            let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
            (
                f.port.file_registrations(),
                n(&f.stats.file_registrations),
                n(&f.stats.file_registrations_refused),
            )
        };
        let fetch = |f: &Fixture, key: &str| {
            f.port.add_region(RKEY, BASE, vec![0; 5000]);
            let server = pair(f, 7, 5000, key);
            let got = get(f, token(7, 5000, server.lid), key, Some(range()));
            assert!(
                matches!(got, RdmaOutcome::Fetched { bytes: 3088, .. }),
                "{got:?}"
            );
            assert_eq!(&f.port.region(RKEY)[..wanted.len()], wanted);
            assert!(f.port.posted().iter().all(|wr| wr.len <= 1000));
        };

        let f = fixture();
        object(&f, "k", &data);
        fetch(&f, "k");
        assert_eq!(registrations(&f), (1, 1, 0), "sent from the file's pages");
        // One chunk or less: copied (nothing to gain from a registration).
        f.port.add_region(RKEY, BASE, vec![0; 1000]);
        object(&f, "small", &data[..1000]);
        let server = pair(&f, 8, 1000, "small");
        assert!(matches!(
            get(&f, token(8, 1000, server.lid), "small", None),
            RdmaOutcome::Fetched { bytes: 1000, .. }
        ));
        assert_eq!(&f.port.region(RKEY)[..1000], &data[..1000]);
        assert_eq!(registrations(&f), (1, 1, 0), "a one-chunk GET is copied");

        let f = fixture();
        object(&f, "k", &data);
        f.port.set_refuse_file_registration(true);
        fetch(&f, "k");
        assert_eq!(registrations(&f), (0, 0, 1), "refused: copied instead");
        f.port.set_refuse_file_registration(false);
        fetch(&f, "k");
        assert_eq!(
            registrations(&f),
            (0, 0, 1),
            "once refused, not tried again"
        );

        // Asked at start: a kernel that refuses is known before any GET, which then never tries.
        let refusing = settings();
        let f = fixture_with(DoublePort::new(), &refusing);
        object(&f, "k", &data);
        f.port.set_refuse_file_registration(true);
        assert!(
            refusing.file_gets.probe(false, &f.port, &f.stats),
            "refused"
        );
        f.port.set_refuse_file_registration(false);
        fetch(&f, "k");
        assert_eq!(
            registrations(&f),
            (0, 0, 1),
            "refused at start (counted): never tried"
        );
        let accepting = settings();
        let f = fixture_with(DoublePort::new(), &accepting);
        object(&f, "k", &data);
        assert!(!accepting.file_gets.probe(false, &f.port, &f.stats));
        fetch(&f, "k");
        assert_eq!(
            registrations(&f),
            (2, 1, 0),
            "the probe's page, then the GET's file"
        );
        assert!(
            !accepting.file_gets.probe(true, &f.port, &f.stats),
            "--copy-gets: nothing asked"
        );
        assert_eq!(f.port.file_registrations(), 2);

        let copying = EngineSettings {
            copy_gets: true,
            ..settings()
        };
        let f = fixture_with(DoublePort::new(), &copying);
        object(&f, "k", &data);
        fetch(&f, "k");
        assert_eq!(
            registrations(&f),
            (0, 0, 0),
            "--copy-gets: never registered"
        );
    }

    #[test]
    fn ranged_get_writes_only_the_range() {
        let f = fixture();
        let data = pattern(5000);
        object(&f, "k", &data);
        f.port.add_region(RKEY, BASE, vec![0; 100]);
        let server = pair(&f, 1, 5000, "k");
        let range = s3s::dto::Range::Int {
            first: 1234,
            last: Some(1333),
        };
        match get(&f, token(1, 100, server.lid), "k", Some(range)) {
            RdmaOutcome::Fetched { bytes, range, .. } => {
                assert_eq!(bytes, 100);
                assert_eq!(range, Some(1234..1334));
            }
            other => panic!("expected 206, got {other:?}"),
        }
        assert_eq!(f.port.region(RKEY), data[1234..1334].to_vec());
        let suffix = s3s::dto::Range::Suffix { length: 10 };
        assert!(matches!(
            get(&f, token(1, 100, server.lid), "k", Some(suffix)),
            RdmaOutcome::Fetched { bytes: 10, .. }
        ));
        assert_eq!(&f.port.region(RKEY)[..10], &data[4990..]);
    }

    /// Revision 5, rule 1: a refusal that starts nothing (404) leaves the pairing as it was,
    /// and the next GET on it moves its bytes; a 500 answered before any RDMA (the store failed
    /// reading the object) leaves no pairing behind, since the client replaces its QP on a 500.
    #[test]
    fn a_404_keeps_the_pairing_and_a_500_before_any_rdma_drops_it() {
        let f = fixture();
        let data = pattern(100);
        object(&f, "k", &data);
        object(&f, "broken", b"x");
        f.port.add_region(RKEY, BASE, vec![0; 100]);
        let server = pair(&f, 1, 100, "k");
        let paired = token(1, 100, server.lid);
        assert_eq!(
            get(&f, paired, "nope", None),
            RdmaOutcome::Rejected(Fault::NoSuchKey)
        );
        assert!(matches!(
            get(&f, paired, "k", None),
            RdmaOutcome::Fetched { bytes: 100, .. }
        ));
        assert_eq!(f.port.region(RKEY), data);
        // The object's file replaced by a directory: reading it fails (EISDIR), before any RDMA.
        let file = data_file(&f, "broken");
        std::fs::remove_file(&file).expect("remove");
        std::fs::create_dir(&file).expect("mkdir");
        let posted = f.port.posted().len();
        match get(&f, paired, "broken", None) {
            RdmaOutcome::Rejected(fault) => assert_eq!(fault.status(), 500, "{fault:?}"),
            other => panic!("expected 500, got {other:?}"),
        }
        assert_eq!(f.port.posted().len(), posted, "no work request posted");
        assert_eq!(f.stats.pairings_created.load(Ordering::Relaxed), 1);
        assert_eq!(f.stats.pairings_failed.load(Ordering::Relaxed), 1);
        assert_eq!(f.stats.pairings_live.load(Ordering::Relaxed), 0);
        // That pairing id is gone: the next request pairs again.
        assert!(matches!(
            get(&f, paired, "k", None),
            RdmaOutcome::PairingNeeded { .. }
        ));
    }

    /// The data file of `key` in bucket `b` of the fixture's store: the one file directly in
    /// the bucket's directory whose name contains the key (sidecars live under `.meta`).
    fn data_file(f: &Fixture, key: &str) -> std::path::PathBuf {
        let bucket = std::fs::read_dir(f.dir.path())
            .expect("store")
            .flatten()
            .map(|e| e.path())
            .find(|p| p.is_dir() && p.file_name().is_some_and(|n| n == "b"))
            .expect("bucket b");
        let mut files: Vec<_> = std::fs::read_dir(&bucket)
            .expect("bucket dir")
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.is_file()
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().contains(key))
            })
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        files.remove(0)
    }

    #[test]
    fn checks_that_fail_before_pairing() {
        let f = fixture();
        object(&f, "k", &pattern(5000));
        // Buffer too small for the object: 400, and no pairing was created.
        assert_eq!(
            get(&f, token(1, 4999, 0), "k", None),
            RdmaOutcome::Rejected(Fault::BUFFER_TOO_SMALL)
        );
        // Missing object or bucket: 404.
        assert_eq!(
            get(&f, token(1, 9999, 0), "nope", None),
            RdmaOutcome::Rejected(Fault::NoSuchKey)
        );
        let job = RdmaJob {
            token: token(1, 10, 0),
            requester: tester(),
            bucket: "nob".into(),
            key: "k".into(),
            kind: JobKind::Put {
                options: Box::default(),
            },
        };
        assert_eq!(
            f.engine.run(job),
            RdmaOutcome::Rejected(Fault::NoSuchBucket)
        );
        // Range beyond the end: 416.
        let r = s3s::dto::Range::Int {
            first: 6000,
            last: None,
        };
        assert_eq!(
            get(&f, token(1, 9999, 0), "k", Some(r)),
            RdmaOutcome::Rejected(Fault::RANGE_OUTSIDE)
        );
        // DC token: 501.
        let mut dc = token(1, 9999, 0);
        dc.transport = Transport::Dc;
        assert_eq!(
            get(&f, dc, "k", None),
            RdmaOutcome::Rejected(Fault::NO_RDMA)
        );
        assert_eq!(f.stats.pairings_created.load(Ordering::Relaxed), 0);
        assert!(f.port.log().is_empty());
    }

    #[test]
    fn put_pairs_first_then_reads_and_stores() {
        let f = fixture();
        let data = pattern(4321);
        f.port.add_region(RKEY, BASE, data.clone());
        let server = match put(&f, token(9, 4321, 0), "new") {
            RdmaOutcome::PairingNeeded { server } => server,
            other => panic!("expected 428, got {other:?}"),
        };
        // A 428 stores nothing.
        assert!(matches!(
            f.storage.head_object("b", "new"),
            Err(StorageError::NoSuchKey)
        ));
        match put(&f, token(9, 4321, server.lid), "new") {
            RdmaOutcome::Stored { server: s2, info } => {
                assert_eq!(s2, server);
                assert_eq!(info.size, 4321);
                assert_eq!(info.etag, hex::encode(Md5::digest(&data)));
            }
            other => panic!("expected 200, got {other:?}"),
        }
        let mut stored = Vec::new();
        f.storage
            .open_read("b", "new", None)
            .expect("stored")
            .read_to_end(&mut stored)
            .expect("read");
        assert_eq!(stored, data);
        // READs in flight never exceed the port's max_rd_atomic (16 on the double) nor the depth.
        assert!(f.port.max_outstanding() <= 4);
        assert!(f.port.posted().iter().all(|wr| wr.op == RdmaOp::Read));
    }

    #[test]
    fn other_pairing_id_re_pairs_and_silences_the_old_qp_before_the_428() {
        let f = fixture();
        object(&f, "k", &pattern(10));
        let first = pair(&f, 5, 10, "k");
        let mut live = first;
        for lid in [0, first.lid.wrapping_add(1).max(1)] {
            let before = f.port.log().len();
            let again = match get(&f, token(5, 10, lid), "k", None) {
                RdmaOutcome::PairingNeeded { server } => server,
                other => panic!("expected 428, got {other:?}"),
            };
            assert_ne!(again.qp_num, live.qp_num);
            assert_ne!(again.lid, live.lid);
            let log = f.port.log()[before..].to_vec();
            let to_err = log.iter().position(|e| *e == QpLog::ToError(live.qp_num));
            let destroyed = log.iter().position(|e| *e == QpLog::Destroyed(live.qp_num));
            let created = log.iter().position(|e| *e == QpLog::Created(again.qp_num));
            assert!(
                to_err.is_some() && destroyed.is_some() && created.is_some(),
                "{log:?}"
            );
            assert!(to_err < destroyed && destroyed < created, "{log:?}");
            live = again;
        }
        assert_eq!(f.stats.pairings_replaced.load(Ordering::Relaxed), 2);
        assert_eq!(f.stats.pairings_live.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn failed_transfer_destroys_the_pairing_and_answers_500() {
        let f = fixture();
        object(&f, "k", &pattern(3000));
        f.port.add_region(RKEY, BASE, vec![0; 3000]);
        f.port.set_behaviour(Behaviour::FailWr(1));
        let server = pair(&f, 3, 3000, "k");
        assert_eq!(
            get(&f, token(3, 3000, server.lid), "k", None),
            RdmaOutcome::Rejected(Fault::RDMA_FAILED)
        );
        assert!(f.port.log().contains(&QpLog::Destroyed(server.qp_num)));
        assert_eq!(f.stats.pairings_failed.load(Ordering::Relaxed), 1);
        assert_eq!(f.stats.completion_errors.load(Ordering::Relaxed), 1);
        // The client's next request with the old pairing id gets a fresh pairing.
        f.port.set_behaviour(Behaviour::Normal);
        assert!(matches!(
            get(&f, token(3, 3000, server.lid), "k", None),
            RdmaOutcome::PairingNeeded { .. }
        ));
    }

    #[test]
    fn watchdog_expiry_answers_500() {
        let f = fixture();
        object(&f, "k", &pattern(3000));
        f.port.add_region(RKEY, BASE, vec![0; 3000]);
        f.port.set_behaviour(Behaviour::Hang);
        let server = pair(&f, 3, 3000, "k");
        assert_eq!(
            get(&f, token(3, 3000, server.lid), "k", None),
            RdmaOutcome::Rejected(Fault::RDMA_FAILED)
        );
        assert_eq!(f.stats.watchdog_fired.load(Ordering::Relaxed), 1);
        let log = f.port.log();
        let to_err = log.iter().position(|e| *e == QpLog::ToError(server.qp_num));
        let destroyed = log
            .iter()
            .position(|e| *e == QpLog::Destroyed(server.qp_num));
        assert!(to_err.is_some() && to_err < destroyed, "{log:?}");
    }

    /// `--inject-write-offset`: the GET is answered 200 with the object's bytes one offset off
    /// in the client's memory (staged and straight from the file), and a PUT is untouched.
    #[cfg(feature = "fault-injection")]
    #[test]
    fn injected_write_offset_lands_a_gets_bytes_shifted_and_answers_200() {
        for copy_gets in [false, true] {
            let f = fixture_with(
                DoublePort::new(),
                &EngineSettings {
                    inject_write_offset: 100,
                    copy_gets,
                    ..settings()
                },
            );
            let data = pattern(3000);
            object(&f, "k", &data);
            f.port.add_region(RKEY, BASE, vec![0; 3000]);
            let server = pair(&f, 3, 3000, "k");
            assert!(
                matches!(
                    get(&f, token(3, 3000, server.lid), "k", None),
                    RdmaOutcome::Fetched { bytes: 3000, .. }
                ),
                "copy_gets {copy_gets}"
            );
            let landed = f.port.region(RKEY);
            assert_eq!(landed[..100], [0; 100], "copy_gets {copy_gets}");
            assert_eq!(landed[100..], data[..2900], "copy_gets {copy_gets}");
        }
    }

    #[cfg(feature = "fault-injection")]
    #[test]
    fn injected_failure_takes_the_failure_path_once() {
        let f = fixture_with(
            DoublePort::new(),
            &EngineSettings {
                inject_failures: 1,
                ..settings()
            },
        );
        object(&f, "k", &pattern(3000));
        f.port.add_region(RKEY, BASE, vec![0; 3000]);
        let server = pair(&f, 3, 3000, "k");
        assert_eq!(
            get(&f, token(3, 3000, server.lid), "k", None),
            RdmaOutcome::Rejected(Fault::RDMA_FAILED)
        );
        assert_eq!(f.stats.injected_failures.load(Ordering::Relaxed), 1);
        assert_eq!(f.stats.pairings_failed.load(Ordering::Relaxed), 1);
        // Only once: the client's re-pairing and retry move the bytes.
        let server = pair(&f, 3, 3000, "k");
        assert!(matches!(
            get(&f, token(3, 3000, server.lid), "k", None),
            RdmaOutcome::Fetched { .. }
        ));
        assert_eq!(f.port.region(RKEY), pattern(3000));
    }

    #[test]
    fn failed_put_stores_nothing() {
        let f = fixture();
        f.port.add_region(RKEY, BASE, pattern(3000));
        f.port.set_behaviour(Behaviour::FailWr(2));
        let server = match put(&f, token(4, 3000, 0), "p") {
            RdmaOutcome::PairingNeeded { server } => server,
            other => panic!("expected 428, got {other:?}"),
        };
        assert_eq!(
            put(&f, token(4, 3000, server.lid), "p"),
            RdmaOutcome::Rejected(Fault::RDMA_FAILED)
        );
        assert!(matches!(
            f.storage.head_object("b", "p"),
            Err(StorageError::NoSuchKey)
        ));
    }

    #[test]
    fn qp_creation_failure_answers_500() {
        let f = fixture();
        object(&f, "k", &pattern(10));
        f.port.set_fail_connect(true);
        assert_eq!(
            get(&f, token(1, 10, 0), "k", None),
            RdmaOutcome::Rejected(Fault::RDMA_FAILED)
        );
        assert_eq!(f.stats.pairings_live.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn work_requests_never_exceed_max_msg_sz_and_reads_respect_max_rd_atomic() {
        let port = DoublePort::with_info(PortInfo {
            device: "small0".into(),
            port: 2,
            gid: [1; 16],
            max_msg_sz: 256,
            max_rd_atomic: 2,
        });
        let f = fixture_with(port, &settings());
        let data = pattern(3000);
        f.port.add_region(RKEY, BASE, data.clone());
        let server = match put(&f, token(6, 3000, 0), "x") {
            RdmaOutcome::PairingNeeded { server } => server,
            other => panic!("expected 428, got {other:?}"),
        };
        assert_eq!(server.port, 2);
        assert!(matches!(
            put(&f, token(6, 3000, server.lid), "x"),
            RdmaOutcome::Stored { .. }
        ));
        let posted = f.port.posted();
        assert_eq!(posted.len(), 12);
        assert!(posted.iter().all(|wr| wr.len <= 256));
        assert!(f.port.max_outstanding() <= 2);
    }

    #[test]
    fn table_full_of_busy_pairings_is_503() {
        let mut s = settings();
        s.max_pairings = 1;
        let f = fixture_with(DoublePort::new(), &s);
        object(&f, "k", &pattern(10));
        pair(&f, 1, 10, "k");
        // Hold key 1 as a running transfer would.
        let _busy = hold(&f, 1);
        assert_eq!(
            get(&f, token(2, 10, 0), "k", None),
            RdmaOutcome::Rejected(Fault::BUSY)
        );
    }

    #[test]
    fn the_qp_is_set_to_the_client() {
        let f = fixture();
        object(&f, "k", &pattern(10));
        let server = pair(&f, 0xabc, 10, "k");
        let mut lease = hold(&f, 0xabc);
        let p = lease.pairing_mut().expect("paired");
        assert_eq!(p.qp.qp_num(), server.qp_num);
        assert_eq!(p.id, server.lid);
        assert_eq!(p.start_psn, server.rkey);
    }

    #[test]
    fn a_request_for_a_busy_key_is_refused_at_once() {
        let f = fixture();
        object(&f, "k", &pattern(10));
        let server = pair(&f, 1, 10, "k");
        // Hold key 1 as a running transfer would.
        let held = hold(&f, 1);
        assert_eq!(
            get(&f, token(1, 10, server.lid), "k", None),
            RdmaOutcome::Rejected(Fault::BUSY)
        );
        assert_eq!(f.stats.busy_key_rejections.load(Ordering::Relaxed), 1);
        drop(held);
        f.port.add_region(RKEY, BASE, vec![0; 10]);
        assert!(matches!(
            get(&f, token(1, 10, server.lid), "k", None),
            RdmaOutcome::Fetched { .. }
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_inside_a_transfer_is_500_the_pairing_goes_and_the_worker_stays() {
        use crate::rdma::worker::{RdmaWorkers, WorkerSettings};
        let dir = tempfile::tempdir().expect("tempdir");
        let storage: Arc<dyn Backend> = Arc::new(FsBackend::open(dir.path()).expect("storage"));
        storage.create_bucket("b").expect("bucket");
        let data = pattern(3000);
        let mut w = storage
            .create_write("b", "k", WriteOptions::default())
            .expect("put");
        w.append(&data).expect("write");
        w.commit().expect("commit");
        let port = DoublePort::new();
        port.add_region(RKEY, BASE, vec![0; 3000]);
        let stats = Arc::new(Stats::default());
        let engine = Arc::new(Engine::new(
            port.clone(),
            &settings(),
            storage,
            Arc::clone(&stats),
        ));
        let ws = WorkerSettings {
            workers: 1,
            max_transfers: 2,
            queue: 0,
            queue_wait: Duration::ZERO,
            sweep_every: Duration::from_secs(60),
        };
        let pool = RdmaWorkers::start(engine, &ws, Arc::clone(&stats)).expect("workers");
        let job = |lid| RdmaJob {
            token: token(9, 3000, lid),
            requester: tester(),
            bucket: "b".into(),
            key: "k".into(),
            kind: JobKind::Get { range: None },
        };
        port.set_behaviour(Behaviour::PanicOnPost);
        let server = match pool.submit(job(0)).await {
            RdmaOutcome::PairingNeeded { server } => server,
            other => panic!("expected 428, got {other:?}"),
        };
        assert_eq!(
            pool.submit(job(server.lid)).await,
            RdmaOutcome::Rejected(Fault::RDMA_FAILED)
        );
        assert_eq!(stats.worker_panics.load(Ordering::Relaxed), 1);
        assert_eq!(stats.pairings_live.load(Ordering::Relaxed), 0);
        assert!(port.log().contains(&QpLog::Destroyed(server.qp_num)));
        // The one worker lives on; the old pairing is gone, so the client pairs again.
        port.set_behaviour(Behaviour::Normal);
        let again = match pool.submit(job(server.lid)).await {
            RdmaOutcome::PairingNeeded { server } => server,
            other => panic!("expected 428, got {other:?}"),
        };
        assert!(matches!(
            pool.submit(job(again.lid)).await,
            RdmaOutcome::Fetched { bytes: 3000, .. }
        ));
        assert_eq!(port.region(RKEY), data);
    }

    fn part(f: &Fixture, t: Token, upload_id: &str, part_number: u32) -> RdmaOutcome {
        f.engine.run(RdmaJob {
            token: t,
            requester: tester(),
            bucket: "b".into(),
            key: "mp".into(),
            kind: JobKind::Part {
                upload_id: upload_id.into(),
                part_number,
                options: Box::default(),
            },
        })
    }

    #[test]
    fn an_rdma_part_is_stored_like_any_part_and_a_failed_one_stores_nothing() {
        let f = fixture();
        let id = f
            .storage
            .create_upload("b", "mp", Default::default())
            .expect("upload");
        let data = pattern(3500);
        f.port.add_region(RKEY, BASE, data.clone());
        // An unknown upload: 404 NoSuchUpload before any pairing.
        assert_eq!(
            part(&f, token(7, 3500, 0), "00ff", 1),
            RdmaOutcome::Rejected(Fault::NoSuchUpload)
        );
        assert_eq!(f.stats.pairings_created.load(Ordering::Relaxed), 0);
        let server = match part(&f, token(7, 3500, 0), &id, 1) {
            RdmaOutcome::PairingNeeded { server } => server,
            other => panic!("expected 428, got {other:?}"),
        };
        match part(&f, token(7, 3500, server.lid), &id, 1) {
            RdmaOutcome::Stored { info, .. } => {
                assert_eq!(info.size, 3500);
                assert_eq!(info.etag, hex::encode(Md5::digest(&data)));
            }
            other => panic!("expected 200, got {other:?}"),
        }
        let parts = f.storage.list_parts("b", "mp", &id).expect("parts");
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].etag, hex::encode(Md5::digest(&data)));
        assert_eq!(f.stats.rdma_parts.load(Ordering::Relaxed), 1);
        assert_eq!(f.stats.rdma_puts.load(Ordering::Relaxed), 0);
        // A failed READ of part 2 (the second work request on a QP paired for it) stores no
        // part 2; part 1 stays.
        f.port.set_behaviour(Behaviour::FailWr(1));
        let other = match part(&f, token(8, 3500, 0), &id, 2) {
            RdmaOutcome::PairingNeeded { server } => server,
            other => panic!("expected 428, got {other:?}"),
        };
        assert_eq!(
            part(&f, token(8, 3500, other.lid), &id, 2),
            RdmaOutcome::Rejected(Fault::RDMA_FAILED)
        );
        let parts = f.storage.list_parts("b", "mp", &id).expect("parts");
        assert_eq!(parts.iter().map(|p| p.part_number).collect::<Vec<_>>(), [1]);
    }

    fn run_as(f: &Fixture, who: Requester, t: Token, kind: JobKind) -> RdmaOutcome {
        f.engine.run(RdmaJob {
            token: t,
            requester: who,
            bucket: "b".into(),
            key: "k".into(),
            kind,
        })
    }

    #[test]
    fn a_replayed_token_of_another_requester_is_unpaired_for_the_replayer() {
        let f = fixture();
        let data = pattern(3000);
        object(&f, "k", &data);
        f.port.add_region(RKEY, BASE, vec![0; 4096]);
        let victim = pair(&f, 0x77, 4096, "k");
        let victim_token = token(0x77, 4096, victim.lid);
        let victim_qpn = victim.qp_num;
        let others = [
            // Another address, same identity.
            Requester::new(
                std::net::IpAddr::from([10, 0, 0, 99]),
                crate::identity::Identity::new("tester"),
            ),
            // Same address, another identity.
            Requester::new(tester().peer_ip, crate::identity::Identity::new("mallory")),
        ];
        for other in others {
            for kind in [
                JobKind::Get { range: None },
                JobKind::Put {
                    options: Box::default(),
                },
            ] {
                match run_as(&f, other.clone(), victim_token, kind) {
                    RdmaOutcome::PairingNeeded { server } => {
                        assert_ne!(server.lid, victim.lid);
                        assert_ne!(server.qp_num, victim_qpn);
                    }
                    o => panic!("{other:?}: expected its own 428, got {o:?}"),
                }
            }
        }
        // Nothing moved, the victim's QP was never silenced, and its next transfer is one
        // request.
        assert!(f.port.posted().is_empty(), "{:?}", f.port.posted());
        assert!(f.port.region(RKEY).iter().all(|&b| b == 0));
        assert!(!f.port.log().contains(&QpLog::ToError(victim_qpn)));
        assert!(matches!(
            get(&f, victim_token, "k", None),
            RdmaOutcome::Fetched { server, .. } if server == victim
        ));
        assert_eq!(&f.port.region(RKEY)[..3000], &data[..]);
    }

    #[test]
    fn remote_invalidation_only_when_the_token_asks_and_then_the_reply_says_so() {
        let f = fixture();
        object(&f, "k", &pattern(2500));
        f.port.add_region(RKEY, BASE, vec![0; 3000]);
        let server = pair(&f, 0x77, 3000, "k");
        assert!(!server.remote_inv(), "a 428 announces nothing");
        let sends = |f: &Fixture| {
            f.port
                .log()
                .iter()
                .filter(|e| matches!(e, QpLog::SendInv(..)))
                .count()
        };
        // A revision-3 client: no SEND to its QP, and a reply exactly as before.
        match get(&f, token(0x77, 3000, server.lid), "k", None) {
            RdmaOutcome::Fetched { server: s, .. } => assert_eq!(s, server),
            other => panic!("expected 200, got {other:?}"),
        }
        assert_eq!(sends(&f), 0);
        // A client that keeps receives posted: SEND_WITH_INV of its rkey after the last WRITE.
        let asks = token(0x77, 3000, server.lid).with_remote_inv(true);
        match get(&f, asks, "k", None) {
            RdmaOutcome::Fetched { server: s, .. } => {
                assert!(s.remote_inv(), "the 200 says the window was invalidated");
                assert_eq!(s.with_remote_inv(false), server);
            }
            other => panic!("expected 200, got {other:?}"),
        }
        let log = f.port.log();
        let inv = log
            .iter()
            .position(|e| *e == QpLog::SendInv(server.qp_num, RKEY))
            .expect("a SEND_WITH_INV of the token's rkey");
        let last_post = log.iter().rposition(|e| matches!(e, QpLog::Posted(..)));
        assert!(last_post.is_some_and(|p| p < inv), "after the last WRITE");
        // PUT: after the READs.
        match put(&f, asks, "p") {
            RdmaOutcome::Stored { server: s, .. } => assert!(s.remote_inv()),
            other => panic!("expected 200, got {other:?}"),
        }
        let log = f.port.log();
        let last_read = log
            .iter()
            .rposition(|e| matches!(e, QpLog::Posted(_, wr) if wr.op == RdmaOp::Read));
        let last_inv = log.iter().rposition(|e| matches!(e, QpLog::SendInv(..)));
        assert!(last_read < last_inv, "after the READs");
        assert_eq!(sends(&f), 2);
        assert_eq!(f.stats.remote_invalidations.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_failed_remote_invalidation_fails_the_transfer() {
        let f = fixture();
        // An empty object: the SEND_WITH_INV is the transfer's only work request.
        object(&f, "empty", &[]);
        let server = pair(&f, 0x77, 500, "empty");
        // The client has no window of this rkey: the SEND_WITH_INV completes with an error.
        let unknown = Token {
            rkey: RKEY + 1,
            ..token(0x77, 500, server.lid).with_remote_inv(true)
        };
        assert_eq!(
            get(&f, unknown, "empty", None),
            RdmaOutcome::Rejected(Fault::RDMA_FAILED)
        );
        assert!(f
            .port
            .log()
            .contains(&QpLog::SendInv(server.qp_num, RKEY + 1)));
        assert_eq!(f.stats.pairings_failed.load(Ordering::Relaxed), 1);
    }
}
