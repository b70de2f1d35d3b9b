//! RDMA work runs on dedicated threads, never on the async executor: a small pool of named
//! worker threads fed by a channel, each job answering through its own oneshot. A janitor thread
//! expires idle pairings.
//!
//! Backpressure ([`Admission`]): up to `max_transfers` token requests are admitted at once; the
//! next ones wait in a bounded queue for at most `queue_wait`, then get 503 (with `Retry-After`);
//! beyond the queue, 503 at once. A request's place is freed before its answer is sent, so a
//! client that sends its next request as soon as it has the answer always finds it free.
//!
//! A job that panics is contained: its request gets 500, its pairing is destroyed (the lease's
//! drop, see `pairing`), its staging buffer is leaked (work requests may still be posted over
//! it), and the worker thread goes on with the next job.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use hipobj_actors::handoff::{serve, Handoff};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, error, warn};

use super::session::SessionId;
use super::v2::{reject, V2Job, V2Outcome};
use super::{RdmaJob, RdmaOutcome};
use crate::error::Fault;
use crate::identity::Requester;
use crate::stats::Stats;

/// What the workers run: the engine, behind a trait object so the pool is not generic.
pub trait JobRunner: Send + Sync + 'static {
    fn run(&self, job: RdmaJob) -> RdmaOutcome;
    /// A hipobj-rc-v2 PREPARE or READY.
    fn run_v2(&self, job: V2Job) -> V2Outcome;
    /// A hipobj-rc-v2 CANCEL (changes nothing unless `requester` owns a waiting `session`).
    fn cancel_v2(&self, requester: &Requester, session: &SessionId);
    /// Destroy pairings idle too long and reclaim v2 sessions past T_prep; returns how many.
    fn expire(&self, now: Instant) -> usize;
}

impl<P: super::port::RdmaPort> JobRunner for super::engine::Engine<P> {
    fn run(&self, job: RdmaJob) -> RdmaOutcome {
        super::engine::Engine::run(self, job)
    }
    fn run_v2(&self, job: V2Job) -> V2Outcome {
        super::engine::Engine::run_v2(self, job)
    }
    fn cancel_v2(&self, requester: &Requester, session: &SessionId) {
        super::engine::Engine::v2_cancel(self, requester, session)
    }
    fn expire(&self, now: Instant) -> usize {
        super::engine::Engine::expire(self, now)
    }
}

/// How the pool is sized.
#[derive(Clone, Debug)]
pub struct WorkerSettings {
    /// Worker threads.
    pub workers: usize,
    /// Token requests admitted at once (queued for a worker or running).
    pub max_transfers: usize,
    /// Requests that may wait for a place beyond `max_transfers`.
    pub queue: usize,
    /// How long one waits before its 503.
    pub queue_wait: Duration,
    /// How often the janitor looks for idle pairings.
    pub sweep_every: Duration,
}

/// Admits token requests: `max` at once, a bounded queue of waiters, 503 for the rest.
#[derive(Debug)]
pub struct Admission {
    places: Arc<Semaphore>,
    waiting: AtomicUsize,
    queue: usize,
    queue_wait: Duration,
}

/// One admitted request; dropping it frees its place.
#[derive(Debug)]
pub struct Permit(#[allow(dead_code)] OwnedSemaphorePermit);

/// Counts a waiter for as long as it waits (also when its request is dropped meanwhile).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Admission {
    pub fn new(max: usize, queue: usize, queue_wait: Duration) -> Arc<Admission> {
        Arc::new(Admission {
            places: Arc::new(Semaphore::new(max.max(1))),
            waiting: AtomicUsize::new(0),
            queue,
            queue_wait,
        })
    }

    /// A place now, if one is free.
    pub fn try_acquire(&self) -> Option<Permit> {
        Arc::clone(&self.places)
            .try_acquire_owned()
            .ok()
            .map(Permit)
    }

    /// A place now, or after waiting in the queue; `None` = 503. `queued` is told when the
    /// request had to wait.
    pub async fn acquire(&self, queued: impl FnOnce()) -> Option<Permit> {
        if let Some(p) = self.try_acquire() {
            return Some(p);
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.queue {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let _waiting = Waiting(&self.waiting);
        queued();
        let wait = Arc::clone(&self.places).acquire_owned();
        match tokio::time::timeout(self.queue_wait, wait).await {
            Ok(Ok(p)) => Some(Permit(p)),
            // Timed out (or the semaphore closed, which never happens).
            _ => None,
        }
    }

    /// Places taken now.
    pub fn running(&self, max: usize) -> usize {
        max.saturating_sub(self.places.available_permits())
    }

    /// Requests waiting for a place now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }
}

/// One job and where its answer goes.
enum Work {
    Token(RdmaJob, oneshot::Sender<RdmaOutcome>),
    V2(V2Job, oneshot::Sender<V2Outcome>),
}

/// A job on its way to a worker, with its place (freed just before the answer is sent:
/// `hipobj_actors::handoff::serve`, which loom-tests/tests/server_worker.rs checks).
type Job = Handoff<Queued, Permit>;

struct Queued {
    work: Work,
    /// When the request handed it over (the queue wait is logged).
    submitted: Instant,
}

/// The pool handle. Dropping it closes the channels, then joins the threads.
pub struct RdmaWorkers {
    // Declared before `threads`: dropping the senders ends the threads' loops.
    jobs: Option<Sender<Job>>,
    janitor: Option<Sender<()>>,
    /// CANCELs run on the blocking pool, outside the admission limit (always 204).
    runner: Arc<dyn JobRunner>,
    admission: Arc<Admission>,
    max_transfers: usize,
    stats: Arc<Stats>,
    threads: Vec<JoinHandle<()>>,
}

impl RdmaWorkers {
    pub fn start(
        runner: Arc<dyn JobRunner>,
        settings: &WorkerSettings,
        stats: Arc<Stats>,
    ) -> std::io::Result<RdmaWorkers> {
        let (jobs_tx, jobs_rx) = crossbeam_channel::unbounded::<Job>();
        let (janitor_tx, janitor_rx) = crossbeam_channel::bounded::<()>(0);
        let mut threads = Vec::new();
        for i in 0..settings.workers.max(1) {
            let rx = jobs_rx.clone();
            let runner = Arc::clone(&runner);
            let stats = Arc::clone(&stats);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("hipobj-rdma-{i:02}"))
                    .spawn(move || worker_loop(&*runner, rx, &stats))?,
            );
        }
        let janitor = Arc::clone(&runner);
        let every = settings.sweep_every;
        threads.push(
            std::thread::Builder::new()
                .name("hipobj-janitor".into())
                .spawn(move || janitor_loop(&*janitor, janitor_rx, every))?,
        );
        Ok(RdmaWorkers {
            jobs: Some(jobs_tx),
            janitor: Some(janitor_tx),
            runner,
            admission: Admission::new(settings.max_transfers, settings.queue, settings.queue_wait),
            max_transfers: settings.max_transfers.max(1),
            stats,
            threads,
        })
    }

    pub fn admission(&self) -> &Arc<Admission> {
        &self.admission
    }

    /// Places taken now.
    pub fn running(&self) -> usize {
        self.admission.running(self.max_transfers)
    }

    /// Run `job` on a worker; 503 when no place freed up within the queue wait.
    pub async fn submit(&self, job: RdmaJob) -> RdmaOutcome {
        let failed = RdmaOutcome::Rejected(Fault::RDMA_FAILED);
        match self.place().await {
            None => RdmaOutcome::Rejected(Fault::BUSY),
            Some(permit) => {
                let (tx, rx) = oneshot::channel();
                if !self.hand_over(Work::Token(job, tx), permit) {
                    return failed;
                }
                rx.await.unwrap_or(failed)
            }
        }
    }

    /// Run a hipobj-rc-v2 PREPARE or READY on a worker, under the same admission (503).
    pub async fn submit_v2(&self, job: V2Job) -> V2Outcome {
        let failed = V2Outcome::Rejected(reject::FAILED);
        match self.place().await {
            None => V2Outcome::Rejected(reject::BUSY),
            Some(permit) => {
                let (tx, rx) = oneshot::channel();
                if !self.hand_over(Work::V2(job, tx), permit) {
                    return failed;
                }
                rx.await.unwrap_or(failed)
            }
        }
    }

    /// A hipobj-rc-v2 CANCEL, off the async workers (a window invalidation waits for its
    /// completion). Not admission-limited: a CANCEL frees resources.
    pub async fn cancel_v2(&self, requester: Requester, session: SessionId) {
        let runner = Arc::clone(&self.runner);
        let done =
            tokio::task::spawn_blocking(move || runner.cancel_v2(&requester, &session)).await;
        if done.is_err() {
            warn!("a v2 CANCEL panicked");
        }
    }

    /// A place for one job, or `None` (503).
    async fn place(&self) -> Option<Permit> {
        let queued = || Stats::bump(&self.stats.transfers_queued);
        let permit = self.admission.acquire(queued).await;
        if permit.is_none() {
            debug!("too many RDMA transfers; 503");
        }
        permit
    }

    /// Queue `work` for a worker; false when the workers are gone.
    fn hand_over(&self, work: Work, permit: Permit) -> bool {
        let Some(jobs) = &self.jobs else {
            return false;
        };
        let sent = jobs.send(Handoff {
            work: Queued {
                work,
                submitted: Instant::now(),
            },
            place: permit,
        });
        if sent.is_err() {
            warn!("RDMA workers are gone");
        }
        sent.is_ok()
    }
}

fn worker_loop(runner: &dyn JobRunner, jobs: Receiver<Job>, stats: &Stats) {
    serve(&jobs, |Queued { work, submitted }| {
        let started = Instant::now();
        // The requester may have left (client hung up); nothing to do then.
        let answer: Box<dyn FnOnce()> = match work {
            Work::Token(job, answer) => {
                let what = format!("{:?} {}/{}", job.kind, job.bucket, job.key);
                let failed = RdmaOutcome::Rejected(Fault::RDMA_FAILED);
                let outcome = contained(&what, || runner.run(job), failed, stats);
                Box::new(move || {
                    let _ = answer.send(outcome);
                })
            }
            Work::V2(job, answer) => {
                let what = format!("{job:?}");
                let failed = V2Outcome::Rejected(reject::FAILED);
                let outcome = contained(&what, || runner.run_v2(job), failed, stats);
                Box::new(move || {
                    let _ = answer.send(outcome);
                })
            }
        };
        debug!(
            queued_us = started.saturating_duration_since(submitted).as_micros() as u64,
            run_us = started.elapsed().as_micros() as u64,
            "RDMA job done"
        );
        answer
    });
}

/// Run one job; a panic becomes `failed` (500) and the thread lives on.
fn contained<T>(what: &str, job: impl FnOnce() -> T, failed: T, stats: &Stats) -> T {
    // AssertUnwindSafe: the engine's shared state is poison-free (locks recover), a panicking
    // lease destroys its pairing and a claimed v2 session ends in its guard's drop, so nothing
    // half-updated is used afterwards.
    match catch_unwind(AssertUnwindSafe(job)) {
        Ok(outcome) => outcome,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            error!(job = %what, %message, "RDMA job panicked; 500, pairing destroyed");
            Stats::bump(&stats.worker_panics);
            failed
        }
    }
}

fn janitor_loop(runner: &dyn JobRunner, stop: Receiver<()>, every: Duration) {
    loop {
        match stop.recv_timeout(every) {
            Err(RecvTimeoutError::Timeout) => {
                let n = runner.expire(Instant::now());
                if n > 0 {
                    debug!(expired = n, "idle pairings destroyed");
                }
            }
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

impl Drop for RdmaWorkers {
    fn drop(&mut self) {
        self.jobs.take();
        self.janitor.take();
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                warn!("an RDMA thread panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::JobKind;
    use hipobj::token::{Token, Transport};
    use std::sync::Mutex;

    #[tokio::test]
    async fn admission_refuses_above_max_and_frees_on_drop() {
        let a = Admission::new(2, 0, Duration::from_millis(10));
        let p1 = a.try_acquire().expect("1");
        let _p2 = a.try_acquire().expect("2");
        assert!(a.try_acquire().is_none());
        // No queue: refused at once.
        assert!(a.acquire(|| panic!("must not queue")).await.is_none());
        drop(p1);
        assert!(a.acquire(|| panic!("a place is free")).await.is_some());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_queued_request_gets_the_next_free_place() {
        let a = Admission::new(1, 1, Duration::from_secs(30));
        let held = a.try_acquire().expect("1");
        let a2 = Arc::clone(&a);
        let waiter = tokio::spawn(async move { a2.acquire(|| {}).await.is_some() });
        while a.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        // The queue (1) is full: the next one is refused at once.
        assert!(a.acquire(|| panic!("queue is full")).await.is_none());
        drop(held);
        assert!(
            waiter.await.expect("join"),
            "the waiter got the freed place"
        );
        assert_eq!(a.waiting(), 0);
    }

    #[tokio::test]
    async fn a_queued_request_gives_up_after_the_queue_wait() {
        let a = Admission::new(1, 4, Duration::from_millis(20));
        let _held = a.try_acquire().expect("1");
        let mut queued = false;
        assert!(a.acquire(|| queued = true).await.is_none());
        assert!(queued);
        assert_eq!(a.waiting(), 0);
    }

    /// Blocks every job until released, to fill the pool.
    struct Gate {
        open: Mutex<Receiver<()>>,
    }

    impl JobRunner for Gate {
        fn run(&self, job: RdmaJob) -> RdmaOutcome {
            if job.key == "panic" {
                panic!("scripted panic in a job");
            }
            let _ = self.open.lock().map(|rx| rx.recv());
            RdmaOutcome::Rejected(Fault::NoSuchKey)
        }
        fn run_v2(&self, _job: V2Job) -> V2Outcome {
            let _ = self.open.lock().map(|rx| rx.recv());
            V2Outcome::Rejected(reject::UNKNOWN_SESSION)
        }
        fn cancel_v2(&self, _requester: &Requester, _session: &SessionId) {}
        fn expire(&self, _now: Instant) -> usize {
            0
        }
    }

    fn job(key: &str) -> RdmaJob {
        let token = Token {
            transport: Transport::Rc,
            qp_num: 1,
            gid: [0; 16],
            rkey: 0,
            remote_addr: 0,
            length: 0,
            port: 1,
            lid: 0,
        };
        RdmaJob {
            token,
            requester: crate::identity::Requester::new(
                std::net::Ipv4Addr::LOCALHOST.into(),
                crate::identity::Identity::anonymous(),
            ),
            bucket: "b".into(),
            key: key.into(),
            kind: JobKind::Put {
                options: Box::default(),
            },
        }
    }

    fn settings(workers: usize, max: usize, queue: usize, wait: Duration) -> WorkerSettings {
        WorkerSettings {
            workers,
            max_transfers: max,
            queue,
            queue_wait: wait,
            sweep_every: Duration::from_secs(60),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn third_request_over_a_limit_of_two_waits_then_gets_503() {
        let (open_tx, open_rx) = crossbeam_channel::unbounded();
        let runner = Arc::new(Gate {
            open: Mutex::new(open_rx),
        });
        let stats = Arc::new(Stats::default());
        let s = settings(2, 2, 1, Duration::from_millis(50));
        let pool = Arc::new(RdmaWorkers::start(runner, &s, Arc::clone(&stats)).expect("start"));
        let p1 = Arc::clone(&pool);
        let first = tokio::spawn(async move { p1.submit(job("k")).await });
        let p2 = Arc::clone(&pool);
        let second = tokio::spawn(async move { p2.submit(job("k")).await });
        while pool.running() < 2 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            pool.submit(job("k")).await,
            RdmaOutcome::Rejected(Fault::BUSY)
        );
        assert_eq!(stats.transfers_queued.load(Ordering::Relaxed), 1);
        open_tx.send(()).expect("open");
        open_tx.send(()).expect("open");
        assert_eq!(
            first.await.expect("join"),
            RdmaOutcome::Rejected(Fault::NoSuchKey)
        );
        assert_eq!(
            second.await.expect("join"),
            RdmaOutcome::Rejected(Fault::NoSuchKey)
        );
        // Places are free again.
        open_tx.send(()).expect("open");
        assert_eq!(
            pool.submit(job("k")).await,
            RdmaOutcome::Rejected(Fault::NoSuchKey)
        );
    }

    /// The place is freed before the answer: a client sending its next request right after each
    /// answer never finds the limit taken by its own previous request.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn back_to_back_requests_at_the_limit_never_get_503() {
        let (open_tx, open_rx) = crossbeam_channel::unbounded();
        let runner = Arc::new(Gate {
            open: Mutex::new(open_rx),
        });
        for _ in 0..400 {
            open_tx.send(()).expect("open");
        }
        let s = settings(1, 1, 0, Duration::ZERO);
        let pool = RdmaWorkers::start(runner, &s, Arc::new(Stats::default())).expect("start");
        for _ in 0..400 {
            assert_eq!(
                pool.submit(job("k")).await,
                RdmaOutcome::Rejected(Fault::NoSuchKey)
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_job_gets_500_and_the_worker_lives_on() {
        let (open_tx, open_rx) = crossbeam_channel::unbounded();
        let runner = Arc::new(Gate {
            open: Mutex::new(open_rx),
        });
        let stats = Arc::new(Stats::default());
        let s = settings(1, 4, 0, Duration::ZERO);
        let pool = RdmaWorkers::start(runner, &s, Arc::clone(&stats)).expect("start");
        assert_eq!(
            pool.submit(job("panic")).await,
            RdmaOutcome::Rejected(Fault::RDMA_FAILED)
        );
        assert_eq!(stats.worker_panics.load(Ordering::Relaxed), 1);
        // The one worker still serves.
        open_tx.send(()).expect("open");
        assert_eq!(
            pool.submit(job("k")).await,
            RdmaOutcome::Rejected(Fault::NoSuchKey)
        );
        assert_eq!(pool.running(), 0);
    }
}
