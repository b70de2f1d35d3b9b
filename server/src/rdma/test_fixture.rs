//! TEST FIXTURE (compiled only under `cfg(test)`): an engine over the in-memory RDMA double
//! ([`DoublePort`]) and a temporary fs store, shared by the unit tests of token requests
//! (`paired`), of hipobj-rc-v2 sessions (`v2`) and of the S3 front.

use std::sync::Arc;
use std::time::Duration;

use super::engine::{Engine, EngineSettings};
use super::engines::Engines;
use super::test_double::DoublePort;
use super::worker::{RdmaWorkers, WorkerSettings};
use crate::backend::{Backend, FsBackend, WriteOptions};
use crate::identity::{Identity, Requester};
use crate::stats::Stats;

/// The client GID of the tests' tokens: 10.0.0.2, IPv4-mapped.
pub const CLIENT_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2];
/// The client address the tests' tokens name.
pub const BASE: u64 = 0x7f00_0000_0000;

/// The requester of the tests' jobs: the client GID's own address, one identity.
pub fn tester() -> Requester {
    let [.., a, b, c, d] = CLIENT_GID;
    Requester::new(
        std::net::IpAddr::from([a, b, c, d]),
        Identity::new("tester"),
    )
}

/// Settings small enough that the tests run chunking, deadlines and tables quickly.
pub fn settings() -> EngineSettings {
    EngineSettings {
        chunk_bytes: 1000,
        wr_depth: 4,
        watchdog: Duration::from_millis(50),
        flush_wait: Duration::from_secs(2),
        min_rate: 1 << 20,
        max_pairings: 16,
        max_pairings_per_client: 16,
        pairing_idle: Duration::from_secs(600),
        v2: crate::config::V2Settings::default(),
        #[cfg(feature = "fault-injection")]
        inject_failures: 0,
        #[cfg(feature = "fault-injection")]
        inject_write_offset: 0,
        copy_gets: false,
        file_gets: std::sync::Arc::default(),
    }
}

/// The S3 front's tests: page-sized chunks, a watchdog that never fires on a busy host, 8
/// pairings.
pub fn front_settings() -> EngineSettings {
    EngineSettings {
        chunk_bytes: 4096,
        watchdog: Duration::from_secs(2),
        flush_wait: Duration::from_secs(1),
        max_pairings: 8,
        max_pairings_per_client: 8,
        ..settings()
    }
}

/// An engine, its port, its statistics and its store (bucket `b`).
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub port: DoublePort,
    pub engine: Engine<DoublePort>,
    pub stats: Arc<Stats>,
    pub storage: Arc<dyn Backend>,
}

/// A fixture over `port` with `settings`.
pub fn fixture_with(port: DoublePort, settings: &EngineSettings) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn Backend> = Arc::new(FsBackend::open(dir.path()).expect("storage"));
    storage.create_bucket("b").expect("bucket");
    let stats = Arc::new(Stats::default());
    let engine = Engine::new(
        port.clone(),
        settings,
        Arc::clone(&storage),
        Arc::clone(&stats),
    );
    Fixture {
        dir,
        port,
        engine,
        stats,
        storage,
    }
}

/// A fixture over a fresh port with [`settings`].
pub fn fixture() -> Fixture {
    fixture_with(DoublePort::new(), &settings())
}

/// `engine` behind worker threads as the S3 front uses it: the one device of [`Engines`] (its
/// dispatch and port check included), 2 workers, 4 transfers.
pub fn start_workers(engine: Engine<DoublePort>, stats: &Arc<Stats>) -> Arc<RdmaWorkers> {
    let workers = WorkerSettings {
        workers: 2,
        max_transfers: 4,
        queue: 4,
        queue_wait: Duration::from_millis(100),
        sweep_every: Duration::from_secs(60),
    };
    let engines = Engines::new(vec![engine], stats).expect("one engine");
    Arc::new(RdmaWorkers::start(Arc::new(engines), &workers, Arc::clone(stats)).expect("workers"))
}

/// Store `data` as `b/key`.
pub fn object(f: &Fixture, key: &str, data: &[u8]) {
    let mut w = f
        .storage
        .create_write("b", key, WriteOptions::default())
        .expect("put");
    w.append(data).expect("write");
    w.commit().expect("commit");
}

/// `n` bytes of a pattern that does not repeat every 256 bytes.
pub fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 253) as u8 ^ (i >> 8) as u8).collect()
}
