//! The local end of a transfer: the file a GET reads from or a PUT writes to, working on staging
//! slots the poller hands it (docs/protocol.md section 4 says nothing about it; this is the pipeline).
//!
//! A slot belongs to exactly one party at a time: the poller (free), the NIC (posted) or the local
//! end (being filled or drained). The local end makes a Rust slice over a slot only while it owns
//! it, so no reference ever covers bytes the NIC may touch.
//!
//! Two ways to run it: [`Inline`] does each job at once on the poller's thread (one-chunk
//! transfers: no thread to start); [`Threaded`] runs the jobs in order on a scoped thread, so file
//! reads overlap RDMA WRITEs and file writes overlap RDMA READs.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::Scope;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::port::StagingMemory;

/// Where a GET's bytes come from, in order.
pub trait ChunkSource: Send {
    fn fill(&mut self, buf: &mut [u8]) -> io::Result<()>;
}

/// Where a PUT's bytes go, in order.
pub trait ChunkSink: Send {
    fn drain(&mut self, data: &[u8]) -> io::Result<()>;
}

impl<R: io::Read + Send> ChunkSource for R {
    fn fill(&mut self, buf: &mut [u8]) -> io::Result<()> {
        self.read_exact(buf)
    }
}

/// The operation's local end.
pub enum Direction<'a> {
    /// GET: slots are filled from the source, then RDMA-WRITTEN.
    Write(&'a mut dyn ChunkSource),
    /// GET from a registered file mapping: the bytes already are in the memory, in order from
    /// its start; each chunk is RDMA-WRITTEN from its own place, nothing is filled.
    Registered,
    /// PUT: slots are RDMA-READ, then drained into the sink.
    Read(&'a mut dyn ChunkSink),
}

/// One chunk in one staging slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotJob {
    /// Chunk index within the transfer (also the work request id).
    pub chunk: u64,
    /// Byte offset of the slot in the staging memory.
    pub offset: usize,
    pub len: u32,
}

/// A job the local end finished, or why it stopped.
pub type JobResult = Result<SlotJob, io::Error>;

/// What the poller sees of the local end.
pub trait LocalEnd {
    /// Hand `job`'s slot to the local end (GET: fill it; PUT: drain it). Jobs run in order.
    fn submit(&mut self, job: SlotJob);
    /// A finished job, if one is ready (never blocks).
    fn try_finished(&mut self) -> Option<JobResult>;
    /// A finished job, waiting at most `wait` for one.
    fn wait_finished(&mut self, wait: Duration) -> Option<JobResult>;
    /// Time spent filling or draining slots so far (for the transfer's debug log; 0 unless the
    /// server is built with the bench-only `stage-timing` feature).
    fn busy(&self) -> Duration;
}

/// [`work`], timed into `busy` (nanoseconds) in the bench-only `stage-timing` build only: the
/// shipped server reads no clock per chunk (`busy` stays 0).
///
/// # Safety
/// As for [`work`].
unsafe fn timed_work(
    dir: &mut Direction<'_>,
    memory: &StagingMemory,
    job: SlotJob,
    busy: &AtomicU64,
) -> io::Result<()> {
    #[cfg(feature = "stage-timing")]
    let started = std::time::Instant::now();
    // SAFETY: the caller's promise, passed on.
    let r = unsafe { work(dir, memory, job) };
    #[cfg(feature = "stage-timing")]
    busy.fetch_add(
        u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    #[cfg(not(feature = "stage-timing"))]
    let _ = busy;
    r
}

/// Fill or drain `job`'s slot (a registered GET's chunk needs nothing but to lie in the memory).
///
/// # Safety
/// The caller owns `job`'s slot: no work request over it is outstanding and no other reference
/// to its bytes is alive.
unsafe fn work(dir: &mut Direction<'_>, memory: &StagingMemory, job: SlotJob) -> io::Result<()> {
    match dir {
        Direction::Registered if memory.covers(job.offset, job.len as usize) => Ok(()),
        Direction::Registered => Err(io::Error::other("chunk outside the registered file")),
        // SAFETY: the caller's promise, passed on.
        Direction::Write(source) => source.fill(unsafe { slot(memory, job) }?),
        // SAFETY: the caller's promise, passed on.
        Direction::Read(sink) => sink.drain(unsafe { slot(memory, job) }?),
    }
}

/// `job`'s slot of staging memory.
///
/// # Safety
/// As for [`work`].
#[allow(clippy::mut_from_ref)]
unsafe fn slot(memory: &StagingMemory, job: SlotJob) -> io::Result<&mut [u8]> {
    // SAFETY: the caller's promise, passed on.
    unsafe { memory.slot_mut(job.offset, job.len as usize) }
        .ok_or_else(|| io::Error::other("slot outside the staging memory"))
}

/// Jobs done at once on the caller's thread.
pub struct Inline<'a, 'm> {
    dir: Direction<'a>,
    memory: &'m StagingMemory,
    finished: VecDeque<JobResult>,
    busy: AtomicU64,
}

impl<'a, 'm> Inline<'a, 'm> {
    pub fn new(dir: Direction<'a>, memory: &'m StagingMemory) -> Self {
        Inline {
            dir,
            memory,
            finished: VecDeque::new(),
            busy: AtomicU64::new(0),
        }
    }
}

impl LocalEnd for Inline<'_, '_> {
    fn submit(&mut self, job: SlotJob) {
        // SAFETY: the poller hands over a slot it owns (module doc) and waits for it back.
        let r = unsafe { timed_work(&mut self.dir, self.memory, job, &self.busy) };
        self.finished.push_back(r.map(|()| job));
    }

    fn try_finished(&mut self) -> Option<JobResult> {
        self.finished.pop_front()
    }

    fn wait_finished(&mut self, _wait: Duration) -> Option<JobResult> {
        self.finished.pop_front()
    }

    fn busy(&self) -> Duration {
        Duration::from_nanos(self.busy.load(Ordering::Relaxed))
    }
}

/// Jobs done in order on a scoped thread. Dropping it makes the thread end after its current job
/// (jobs still queued are skipped); the scope joins it before the staging memory can be reused.
pub struct Threaded {
    jobs: Sender<SlotJob>,
    finished: Receiver<JobResult>,
    stop: Arc<AtomicBool>,
    busy: Arc<AtomicU64>,
}

impl Threaded {
    /// Start the local end's thread inside `scope`.
    pub fn start<'scope, 'env, 'd: 'scope, 'm: 'scope>(
        scope: &'scope Scope<'scope, 'env>,
        mut dir: Direction<'d>,
        memory: &'m StagingMemory,
    ) -> io::Result<Threaded> {
        let (jobs_tx, jobs_rx) = crossbeam_channel::unbounded::<SlotJob>();
        let (done_tx, done_rx) = crossbeam_channel::unbounded::<JobResult>();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let busy = Arc::new(AtomicU64::new(0));
        let busy_here = Arc::clone(&busy);
        std::thread::Builder::new()
            .name("hipobj-rdma-file".into())
            .spawn_scoped(scope, move || {
                for job in jobs_rx {
                    if stopped.load(Ordering::Acquire) {
                        return;
                    }
                    // SAFETY: the poller hands over slots it owns (module doc) and does not touch
                    // them until this thread sends them back.
                    let r = unsafe { timed_work(&mut dir, memory, job, &busy_here) };
                    let failed = r.is_err();
                    if done_tx.send(r.map(|()| job)).is_err() || failed {
                        return;
                    }
                }
            })?;
        Ok(Threaded {
            jobs: jobs_tx,
            finished: done_rx,
            stop,
            busy,
        })
    }
}

impl Drop for Threaded {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl LocalEnd for Threaded {
    fn submit(&mut self, job: SlotJob) {
        // A send fails only when the thread stopped after an error, which it reports itself.
        let _ = self.jobs.send(job);
    }

    fn try_finished(&mut self) -> Option<JobResult> {
        self.finished.try_recv().ok()
    }

    fn wait_finished(&mut self, wait: Duration) -> Option<JobResult> {
        match self.finished.recv_timeout(wait) {
            Ok(r) => Some(r),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => Some(Err(io::Error::other(
                "the local end's thread stopped (it panicked)",
            ))),
        }
    }

    fn busy(&self) -> Duration {
        Duration::from_nanos(self.busy.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct VecSink(Vec<u8>);
    impl ChunkSink for VecSink {
        fn drain(&mut self, data: &[u8]) -> io::Result<()> {
            self.0.extend_from_slice(data);
            Ok(())
        }
    }

    fn job(chunk: u64, offset: usize, len: u32) -> SlotJob {
        SlotJob { chunk, offset, len }
    }

    #[test]
    fn inline_fills_slots_in_order() {
        let memory = StagingMemory::zeroed(64).expect("memory");
        let data: Vec<u8> = (0..40).collect();
        let mut src: &[u8] = &data;
        let mut end = Inline::new(Direction::Write(&mut src), &memory);
        end.submit(job(0, 32, 20));
        end.submit(job(1, 0, 20));
        assert_eq!(
            end.try_finished().map(|r| r.ok()),
            Some(Some(job(0, 32, 20)))
        );
        assert_eq!(
            end.try_finished().map(|r| r.ok()),
            Some(Some(job(1, 0, 20)))
        );
        assert!(end.try_finished().is_none());
        drop(end);
        // SAFETY: nothing is posted and the local end is gone.
        let all = unsafe { memory.slot_mut(0, 64) }.expect("slot");
        assert_eq!(&all[32..52], &data[..20]);
        assert_eq!(&all[..20], &data[20..]);
    }

    #[test]
    fn threaded_drains_in_order_and_reports_errors() {
        let memory = StagingMemory::zeroed(16).expect("memory");
        {
            // SAFETY: nothing is posted; this slice ends before the local end starts.
            let all = unsafe { memory.slot_mut(0, 16) }.expect("slot");
            all.copy_from_slice(b"0123456789abcdef");
        }
        let mut sink = VecSink(Vec::new());
        std::thread::scope(|s| {
            let mut end = Threaded::start(s, Direction::Read(&mut sink), &memory).expect("thread");
            end.submit(job(0, 8, 8));
            end.submit(job(1, 0, 4));
            end.submit(job(2, 100, 4));
            let got: Vec<_> = (0..3)
                .map(|_| end.wait_finished(Duration::from_secs(10)).expect("result"))
                .collect();
            assert_eq!(got[0].as_ref().ok(), Some(&job(0, 8, 8)));
            assert_eq!(got[1].as_ref().ok(), Some(&job(1, 0, 4)));
            assert!(got[2].is_err(), "a slot outside the memory is an error");
        });
        assert_eq!(sink.0, b"89abcdef0123");
    }

    #[test]
    fn dropping_the_threaded_end_skips_the_queued_jobs() {
        struct Slow(u32);
        impl ChunkSource for Slow {
            fn fill(&mut self, buf: &mut [u8]) -> io::Result<()> {
                self.0 += 1;
                std::thread::sleep(Duration::from_millis(20));
                buf.fill(1);
                Ok(())
            }
        }
        let memory = StagingMemory::zeroed(64 * 100).expect("memory");
        let mut src = Slow(0);
        std::thread::scope(|s| {
            let mut end = Threaded::start(s, Direction::Write(&mut src), &memory).expect("thread");
            for i in 0..100 {
                end.submit(job(i, i as usize * 64, 64));
            }
            drop(end);
        });
        assert!(
            src.0 < 100,
            "{} of 100 queued jobs ran after the drop",
            src.0
        );
    }
}
