//! RDMA work runs on dedicated threads, never on the async executor: a small pool of named
//! worker threads fed by a channel, each job answering through its own oneshot. A janitor thread
//! expires idle pairings. Too many token requests at once are refused with 503 before queueing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use tokio::sync::oneshot;
use tracing::{debug, warn};

use super::{RdmaJob, RdmaOutcome, RejectCode};

/// What the workers run: the engine, behind a trait object so the pool is not generic.
pub trait JobRunner: Send + Sync + 'static {
    fn run(&self, job: RdmaJob) -> RdmaOutcome;
    /// Destroy pairings idle too long; returns how many.
    fn expire(&self, now: Instant) -> usize;
}

impl<P: super::port::RdmaPort> JobRunner for super::engine::Engine<P> {
    fn run(&self, job: RdmaJob) -> RdmaOutcome {
        super::engine::Engine::run(self, job)
    }
    fn expire(&self, now: Instant) -> usize {
        super::engine::Engine::expire(self, now)
    }
}

/// Counts token requests being handled; refuses above the limit.
#[derive(Debug)]
pub struct Limiter {
    running: AtomicUsize,
    max: usize,
}

/// One admitted request; dropping it frees its place.
#[derive(Debug)]
pub struct Permit(Arc<Limiter>);

impl Limiter {
    pub fn new(max: usize) -> Arc<Limiter> {
        Arc::new(Limiter {
            running: AtomicUsize::new(0),
            max,
        })
    }

    pub fn try_acquire(self: &Arc<Self>) -> Option<Permit> {
        let mut now = self.running.load(Ordering::Relaxed);
        loop {
            if now >= self.max {
                return None;
            }
            match self.running.compare_exchange_weak(
                now,
                now + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(Permit(Arc::clone(self))),
                Err(seen) => now = seen,
            }
        }
    }

    pub fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

struct Job {
    job: RdmaJob,
    /// Held until the worker answered.
    _permit: Permit,
    answer: oneshot::Sender<RdmaOutcome>,
}

/// The pool handle. Dropping it closes the channels, then joins the threads.
pub struct RdmaWorkers {
    // Declared before `threads`: dropping the senders ends the threads' loops.
    jobs: Option<Sender<Job>>,
    janitor: Option<Sender<()>>,
    limiter: Arc<Limiter>,
    threads: Vec<JoinHandle<()>>,
}

impl RdmaWorkers {
    pub fn start(
        runner: Arc<dyn JobRunner>,
        workers: usize,
        max_transfers: usize,
        sweep_every: Duration,
    ) -> std::io::Result<RdmaWorkers> {
        let (jobs_tx, jobs_rx) = crossbeam_channel::unbounded::<Job>();
        let (janitor_tx, janitor_rx) = crossbeam_channel::bounded::<()>(0);
        let mut threads = Vec::new();
        for i in 0..workers.max(1) {
            let rx = jobs_rx.clone();
            let runner = Arc::clone(&runner);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("hipobj-rdma-{i:02}"))
                    .spawn(move || worker_loop(&*runner, rx))?,
            );
        }
        let runner = Arc::clone(&runner);
        threads.push(
            std::thread::Builder::new()
                .name("hipobj-janitor".into())
                .spawn(move || janitor_loop(&*runner, janitor_rx, sweep_every))?,
        );
        Ok(RdmaWorkers {
            jobs: Some(jobs_tx),
            janitor: Some(janitor_tx),
            limiter: Limiter::new(max_transfers),
            threads,
        })
    }

    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    /// Run `job` on a worker; 503 when the limit is reached.
    pub async fn submit(&self, job: RdmaJob) -> RdmaOutcome {
        let Some(permit) = self.limiter.try_acquire() else {
            debug!("too many RDMA transfers; 503");
            return RdmaOutcome::Rejected(RejectCode::Busy);
        };
        let (tx, rx) = oneshot::channel();
        let Some(jobs) = &self.jobs else {
            return RdmaOutcome::Rejected(RejectCode::Failed);
        };
        if jobs
            .send(Job {
                job,
                _permit: permit,
                answer: tx,
            })
            .is_err()
        {
            warn!("RDMA workers are gone");
            return RdmaOutcome::Rejected(RejectCode::Failed);
        }
        rx.await
            .unwrap_or(RdmaOutcome::Rejected(RejectCode::Failed))
    }
}

fn worker_loop(runner: &dyn JobRunner, jobs: Receiver<Job>) {
    while let Ok(Job {
        job,
        _permit,
        answer,
    }) = jobs.recv()
    {
        let outcome = runner.run(job);
        // The requester may have left (client hung up); nothing to do then.
        let _ = answer.send(outcome);
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

    #[test]
    fn limiter_refuses_above_max_and_frees_on_drop() {
        let l = Limiter::new(2);
        let a = l.try_acquire().expect("1");
        let _b = l.try_acquire().expect("2");
        assert!(l.try_acquire().is_none());
        drop(a);
        assert!(l.try_acquire().is_some());
    }

    /// Blocks every job until released, to fill the pool.
    struct Gate {
        open: Mutex<Receiver<()>>,
    }

    impl JobRunner for Gate {
        fn run(&self, _job: RdmaJob) -> RdmaOutcome {
            let _ = self.open.lock().map(|rx| rx.recv());
            RdmaOutcome::Rejected(RejectCode::NotFound)
        }
        fn expire(&self, _now: Instant) -> usize {
            0
        }
    }

    fn job() -> RdmaJob {
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
            key: "k".into(),
            kind: JobKind::Put,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn third_request_over_a_limit_of_two_gets_503() {
        let (open_tx, open_rx) = crossbeam_channel::unbounded();
        let runner = Arc::new(Gate {
            open: Mutex::new(open_rx),
        });
        let pool =
            Arc::new(RdmaWorkers::start(runner, 2, 2, Duration::from_secs(60)).expect("start"));
        let p1 = Arc::clone(&pool);
        let first = tokio::spawn(async move { p1.submit(job()).await });
        let p2 = Arc::clone(&pool);
        let second = tokio::spawn(async move { p2.submit(job()).await });
        while pool.limiter().running() < 2 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            pool.submit(job()).await,
            RdmaOutcome::Rejected(RejectCode::Busy)
        );
        open_tx.send(()).expect("open");
        open_tx.send(()).expect("open");
        assert_eq!(
            first.await.expect("join"),
            RdmaOutcome::Rejected(RejectCode::NotFound)
        );
        assert_eq!(
            second.await.expect("join"),
            RdmaOutcome::Rejected(RejectCode::NotFound)
        );
        // Places are free again.
        open_tx.send(()).expect("open");
        assert_eq!(
            pool.submit(job()).await,
            RdmaOutcome::Rejected(RejectCode::NotFound)
        );
    }
}
