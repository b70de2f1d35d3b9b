//! Every RDMA device the server serves from (`--device rxe1,rxe3`, issue 40): one [`Engine`] per
//! device, each with its own port, pairing table, hipobj-rc-v2 session table and staging buffers
//! registered on that device, and the dispatch of each job to one of them:
//! - a token request or a PREPARE goes to the device facing the client's GID (`rails`), checked
//!   for an ACTIVE port at dispatch; when every facing device is down it is refused with 503
//!   (`Fault::RailDown`) before anything starts, its pairing left as it was;
//! - a READY or CANCEL goes to the device whose session table holds the session (a READY names
//!   no GID; the session's QP and staging live on the device that prepared it).
//!
//! The worker pool runs [`Engines`] as its one [`JobRunner`]: one admission limit, one set of
//! threads, whatever the number of devices. Each device's jobs are counted in its
//! [`DeviceCounters`], published at the statistics endpoint.

use std::sync::Arc;
use std::time::Instant;

use tracing::debug;

use super::engine::Engine;
use super::port::RdmaPort;
use super::rails::{self, Choice};
use super::session::SessionId;
use super::v2::{reject, V2Job, V2Outcome};
use super::worker::JobRunner;
use super::{RdmaJob, RdmaOutcome};
use crate::error::Fault;
use crate::identity::Requester;
use crate::stats::{DeviceCounters, Stats};

/// One device's engine and what it served.
struct Rail<P: RdmaPort> {
    engine: Engine<P>,
    counters: Arc<DeviceCounters>,
}

impl<P: RdmaPort> Rail<P> {
    fn name(&self) -> &str {
        &self.engine.port().info().device
    }

    /// Count one job, and `moved` bytes if it moved any.
    fn count(&self, moved: Option<u64>) {
        Stats::bump(&self.counters.jobs);
        if let Some(bytes) = moved {
            Stats::bump(&self.counters.transfers);
            Stats::add(&self.counters.bytes, bytes);
        }
    }
}

/// The engines of the server's devices, in `--device` order.
pub struct Engines<P: RdmaPort> {
    rails: Vec<Rail<P>>,
    /// Each device's GID, in the same order (what `rails::choose` compares).
    gids: Vec<[u8; 16]>,
}

impl<P: RdmaPort> Engines<P> {
    /// The engines of the opened devices, in `--device` order, their counters published in
    /// `stats`; `None` when there is none.
    pub fn new(engines: Vec<Engine<P>>, stats: &Stats) -> Option<Engines<P>> {
        if engines.is_empty() {
            return None;
        }
        let rails: Vec<Rail<P>> = engines
            .into_iter()
            .map(|engine| Rail {
                engine,
                counters: Arc::default(),
            })
            .collect();
        let published = rails
            .iter()
            .map(|r| (r.name().to_string(), Arc::clone(&r.counters)))
            .collect();
        if !stats.publish_devices(published) {
            debug!("device counters were published already; these engines are not counted");
        }
        let gids = rails.iter().map(|r| r.engine.port().info().gid).collect();
        Some(Engines { rails, gids })
    }

    /// The first device's port (`Engines::new` refuses an empty list).
    pub fn first_port(&self) -> &P {
        self.rails[0].engine.port()
    }

    /// The devices' names, in `--device` order.
    pub fn device_names(&self) -> Vec<&str> {
        self.rails.iter().map(Rail::name).collect()
    }

    /// The device facing `client` whose port is ACTIVE, or the 503 that refuses the request.
    fn facing(&self, client: &[u8; 16]) -> Result<&Rail<P>, Fault> {
        let is_active = |i: usize| self.rails[i].engine.port().is_active();
        match rails::choose(client, &self.gids, is_active) {
            Choice::Serve(i) => Ok(&self.rails[i]),
            Choice::FacingDown(i) => {
                let rail = &self.rails[i];
                Stats::bump(&rail.counters.port_down_refusals);
                debug!(device = rail.name(), client = %std::net::Ipv6Addr::from(*client), "the device facing the client is down: 503");
                Err(Fault::RailDown(
                    format!(
                        "the server's RDMA device facing your GID ({}) is down; use another rail",
                        rail.name()
                    )
                    .into(),
                ))
            }
            Choice::NoDevice => Err(Fault::NO_RDMA),
        }
    }

    /// The device whose session table holds `session`.
    fn holding(&self, session: &SessionId) -> Option<&Rail<P>> {
        self.rails.iter().find(|r| r.engine.holds_session(session))
    }
}

/// Bytes a token request's outcome moved, if it moved any.
fn moved_by(outcome: &RdmaOutcome, length: u64) -> Option<u64> {
    match outcome {
        RdmaOutcome::Fetched { bytes, .. } => Some(*bytes),
        RdmaOutcome::Stored { .. } => Some(length),
        RdmaOutcome::PairingNeeded { .. } | RdmaOutcome::Rejected(_) => None,
    }
}

/// Bytes a PREPARE or READY moved, if it moved any.
fn moved_by_v2(outcome: &V2Outcome) -> Option<u64> {
    match outcome {
        V2Outcome::Moved { bytes, .. } => Some(*bytes),
        V2Outcome::Prepared { .. } | V2Outcome::Rejected(_) => None,
    }
}

impl<P: RdmaPort> JobRunner for Engines<P> {
    fn run(&self, job: RdmaJob) -> RdmaOutcome {
        let rail = match self.facing(&job.token.gid) {
            Ok(rail) => rail,
            Err(fault) => return RdmaOutcome::Rejected(fault),
        };
        let length = job.token.length;
        let outcome = rail.engine.run(job);
        rail.count(moved_by(&outcome, length));
        outcome
    }

    fn run_v2(&self, job: V2Job) -> V2Outcome {
        let rail = match &job {
            V2Job::Prepare(p) => match self.facing(&p.client.gid) {
                Ok(rail) => rail,
                Err(fault) => return V2Outcome::Rejected(fault),
            },
            V2Job::Ready(r) => match self.holding(&r.session) {
                Some(rail) => rail,
                None => return V2Outcome::Rejected(reject::UNKNOWN_SESSION),
            },
        };
        let outcome = rail.engine.run_v2(job);
        rail.count(moved_by_v2(&outcome));
        outcome
    }

    fn cancel_v2(&self, requester: &Requester, session: &SessionId) {
        if let Some(rail) = self.holding(session) {
            rail.engine.v2_cancel(requester, session);
        }
    }

    fn expire(&self, now: Instant) -> usize {
        self.rails.iter().map(|r| r.engine.expire(now)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Backend, FsBackend, WriteOptions};
    use crate::identity::Identity;
    use crate::rdma::port::{Peer, PortInfo};
    use crate::rdma::test_double::{DoublePort, QpLog};
    use crate::rdma::test_fixture::{pattern, settings, BASE};
    use crate::rdma::transfer::Remote;
    use crate::rdma::v2::{PrepareJob, ReadyJob, V2Kind};
    use crate::rdma::worker::{RdmaWorkers, WorkerSettings};
    use crate::rdma::JobKind;
    use hipobj::token::{Token, Transport};
    use std::time::Duration;

    const RKEY: u32 = 0x55;
    const SIZE: usize = 3000;

    /// `::ffff:a.b.c.d`.
    fn gid(ip: [u8; 4]) -> [u8; 16] {
        std::net::Ipv4Addr::from(ip).to_ipv6_mapped().octets()
    }

    /// The lane's two rails: the server's device and its client on each subnet.
    const RAIL_A: ([u8; 4], [u8; 4]) = ([169, 254, 77, 2], [169, 254, 77, 1]);
    const RAIL_B: ([u8; 4], [u8; 4]) = ([169, 254, 78, 2], [169, 254, 78, 1]);

    /// Two devices' engines behind workers, over one store holding `b/k`.
    struct TwoRails {
        _dir: tempfile::TempDir,
        a: DoublePort,
        b: DoublePort,
        stats: Arc<Stats>,
        pool: RdmaWorkers,
        data: Vec<u8>,
    }

    fn port(name: &str, ip: [u8; 4]) -> DoublePort {
        let port = DoublePort::with_info(PortInfo {
            device: name.into(),
            port: 1,
            gid: gid(ip),
            max_msg_sz: 1 << 23,
            max_rd_atomic: 16,
        });
        // The client's buffer, reachable through this rail.
        port.add_region(RKEY, BASE, vec![0; SIZE]);
        port
    }

    fn two_rails() -> TwoRails {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage: Arc<dyn Backend> = Arc::new(FsBackend::open(dir.path()).expect("storage"));
        storage.create_bucket("b").expect("bucket");
        let data = pattern(SIZE);
        let mut w = storage
            .create_write("b", "k", WriteOptions::default())
            .expect("put");
        w.append(&data).expect("write");
        w.commit().expect("commit");
        let (a, b) = (port("rxeA", RAIL_A.0), port("rxeB", RAIL_B.0));
        let stats = Arc::new(Stats::default());
        let engine = |p: &DoublePort| {
            Engine::new(
                p.clone(),
                &settings(),
                Arc::clone(&storage),
                Arc::clone(&stats),
            )
        };
        let engines = Engines::new(vec![engine(&a), engine(&b)], &stats).expect("two engines");
        let ws = WorkerSettings {
            workers: 2,
            max_transfers: 4,
            queue: 4,
            queue_wait: Duration::from_millis(100),
            sweep_every: Duration::from_secs(60),
        };
        let pool = RdmaWorkers::start(Arc::new(engines), &ws, Arc::clone(&stats)).expect("pool");
        TwoRails {
            _dir: dir,
            a,
            b,
            stats,
            pool,
            data,
        }
    }

    fn requester(client: [u8; 4]) -> Requester {
        Requester::new(client.into(), Identity::new("tester"))
    }

    /// A GET of `b/k` from `client`'s QP 9 with pairing id `lid`.
    fn get(client: [u8; 4], lid: u16) -> RdmaJob {
        RdmaJob {
            token: Token {
                transport: Transport::Rc,
                qp_num: 9,
                gid: gid(client),
                rkey: RKEY,
                remote_addr: BASE,
                length: SIZE as u64,
                port: 1,
                lid,
            },
            requester: requester(client),
            bucket: "b".into(),
            key: "k".into(),
            kind: JobKind::Get { range: None },
        }
    }

    /// Pair `client` (428), then GET `b/k` into its buffer.
    async fn pair_and_get(r: &TwoRails, client: [u8; 4]) -> u16 {
        let server = match r.pool.submit(get(client, 0)).await {
            RdmaOutcome::PairingNeeded { server } => server,
            other => panic!("expected 428, got {other:?}"),
        };
        assert!(matches!(
            r.pool.submit(get(client, server.lid)).await,
            RdmaOutcome::Fetched { bytes, .. } if bytes == SIZE as u64
        ));
        server.lid
    }

    /// The client GIDs the port's QPs were aimed at.
    fn peers(port: &DoublePort) -> Vec<[u8; 16]> {
        port.log()
            .into_iter()
            .filter_map(|e| match e {
                QpLog::Setup(s) => Some(s.peer.gid),
                QpLog::Connected(_, peer, ..) => Some(peer.gid),
                _ => None,
            })
            .collect()
    }

    fn device_stats(r: &TwoRails) -> serde_json::Value {
        let json: serde_json::Value = serde_json::from_str(&r.stats.to_json()).expect("JSON");
        json["devices"].clone()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jobs_from_two_client_gids_land_on_the_two_devices_facing_them() {
        let r = two_rails();
        pair_and_get(&r, RAIL_A.1).await;
        pair_and_get(&r, RAIL_B.1).await;
        assert_eq!(peers(&r.a), [gid(RAIL_A.1)], "rxeA paired only its client");
        assert_eq!(peers(&r.b), [gid(RAIL_B.1)], "rxeB paired only its client");
        assert_eq!(r.a.region(RKEY), r.data);
        assert_eq!(r.b.region(RKEY), r.data);
        let devices = device_stats(&r);
        for name in ["rxeA", "rxeB"] {
            assert_eq!(devices[name]["jobs"], 2, "{devices}");
            assert_eq!(devices[name]["transfers"], 1, "{devices}");
            assert_eq!(devices[name]["bytes"], SIZE, "{devices}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_facing_device_down_is_503_starting_nothing_and_its_pairing_stays() {
        let r = two_rails();
        let lid = pair_and_get(&r, RAIL_A.1).await;
        let logged = (r.a.log().len(), r.b.log().len());
        r.a.set_down(true);
        match r.pool.submit(get(RAIL_A.1, lid)).await {
            RdmaOutcome::Rejected(fault) => {
                assert_eq!(fault.status(), 503);
                assert!(fault.starts_nothing());
                assert!(fault.message().contains("rxeA"), "{}", fault.message());
            }
            other => panic!("expected 503, got {other:?}"),
        }
        assert_eq!(
            (r.a.log().len(), r.b.log().len()),
            logged,
            "nothing was tried on either device"
        );
        // The other rail's clients are still served meanwhile.
        pair_and_get(&r, RAIL_B.1).await;
        // The link is back: the pairing was kept, so the next GET moves at once (no 428).
        r.a.set_down(false);
        assert!(matches!(
            r.pool.submit(get(RAIL_A.1, lid)).await,
            RdmaOutcome::Fetched { .. }
        ));
        assert_eq!(peers(&r.a), [gid(RAIL_A.1)]);
        let devices = device_stats(&r);
        assert_eq!(devices["rxeA"]["port_down_refusals"], 1, "{devices}");
        assert_eq!(devices["rxeA"]["transfers"], 2, "{devices}");
        assert_eq!(devices["rxeB"]["port_down_refusals"], 0, "{devices}");
    }

    fn prepare(client: [u8; 4], kind: V2Kind) -> V2Job {
        V2Job::Prepare(PrepareJob {
            requester: requester(client),
            client: Peer {
                gid: gid(client),
                qp_num: 0x4242,
            },
            client_psn: 0x00ab_cdef,
            cookie: 0xc00c_1e55,
            size: SIZE as u32,
            bucket: "b".into(),
            key: "k".into(),
            kind,
        })
    }

    fn ready(client: [u8; 4], session: SessionId) -> V2Job {
        V2Job::Ready(ReadyJob {
            requester: requester(client),
            session,
            cookie: 0xc00c_1e55,
            client_qpn: 0x4242,
            remote: Remote {
                addr: BASE,
                rkey: RKEY,
            },
        })
    }

    fn session_of(outcome: V2Outcome) -> (SessionId, u32) {
        match outcome {
            V2Outcome::Prepared {
                session, server, ..
            } => (session, server.qp_num),
            other => panic!("expected a prepared session, got {other:?}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_v2_session_lives_on_the_facing_device_and_its_ready_and_cancel_find_it() {
        let r = two_rails();
        let get_kind = V2Kind::Get { offset: 0 };
        let (session, _) = session_of(r.pool.submit_v2(prepare(RAIL_B.1, get_kind)).await);
        assert!(r.a.log().is_empty(), "nothing on rxeA: {:?}", r.a.log());
        // READY names no GID: it goes to the device holding the session.
        match r.pool.submit_v2(ready(RAIL_B.1, session)).await {
            V2Outcome::Moved { bytes, .. } => assert_eq!(bytes, SIZE as u64),
            other => panic!("expected FINAL 200, got {other:?}"),
        }
        assert_eq!(r.b.region(RKEY), r.data);
        assert_eq!(peers(&r.b), [gid(RAIL_B.1)]);
        // A session no device holds: 404.
        match r.pool.submit_v2(ready(RAIL_B.1, [7; 16])).await {
            V2Outcome::Rejected(fault) => assert_eq!(fault.status(), 404),
            other => panic!("expected 404, got {other:?}"),
        }
        // A PUT session of rail A, cancelled: its QP on rxeA goes.
        let put = V2Kind::Put {
            options: Box::default(),
        };
        let (session, qpn) = session_of(r.pool.submit_v2(prepare(RAIL_A.1, put)).await);
        r.pool.cancel_v2(requester(RAIL_A.1), session).await;
        assert!(r.a.log().contains(&QpLog::Destroyed(qpn)));
        assert_eq!(
            r.stats
                .v2_cancelled
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        // rxeA down: a PREPARE facing it is refused before anything is made.
        r.a.set_down(true);
        let logged = r.a.log().len();
        let get_kind = V2Kind::Get { offset: 0 };
        match r.pool.submit_v2(prepare(RAIL_A.1, get_kind)).await {
            V2Outcome::Rejected(fault) => assert_eq!(fault.status(), 503),
            other => panic!("expected 503, got {other:?}"),
        }
        assert_eq!(r.a.log().len(), logged);
    }
}
