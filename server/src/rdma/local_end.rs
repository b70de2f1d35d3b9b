//! The local end of a transfer: the file a GET reads from or a PUT writes to, working on staging
//! slots the poller hands it (docs/protocol.md section 4 says nothing about it; this is the pipeline).
//!
//! A slot belongs to exactly one party at a time, the holder of its token ([`Slot`], from the
//! transfer's [`super::staging::SlotPool`]): the poller (free, ready, or posted to the NIC) or the
//! local end (being filled or drained). A job moves the token to the local end and back, so the
//! local end only ever makes a slice over a slot it holds, and no reference ever covers bytes the
//! NIC may touch.
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

use super::staging::Slot;
use crate::backend::ObjectWriter;

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

impl ChunkSink for ObjectWriter {
    fn drain(&mut self, data: &[u8]) -> io::Result<()> {
        self.append(data)
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

/// Where one chunk lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotJob {
    /// Chunk index within the transfer (also the work request id).
    pub chunk: u64,
    /// Byte offset of the chunk in the staging memory (its slot's, or its place in a registered
    /// file mapping).
    pub offset: usize,
    pub len: u32,
}

/// One chunk and, in a staging buffer, the token of the slot it lies in (none in a registered
/// file mapping, which nothing fills or drains).
#[derive(Debug)]
pub struct Job<'s> {
    pub at: SlotJob,
    pub slot: Option<Slot<'s>>,
}

/// A job the local end finished (its slot token handed back), or why it stopped.
pub type JobResult<'s> = Result<Job<'s>, io::Error>;

/// What the poller sees of the local end.
pub trait LocalEnd<'s> {
    /// Hand `job` and its slot to the local end (GET: fill it; PUT: drain it). Jobs run in order.
    fn submit(&mut self, job: Job<'s>);
    /// A finished job, if one is ready (never blocks).
    fn try_finished(&mut self) -> Option<JobResult<'s>>;
    /// A finished job, waiting at most `wait` for one.
    fn wait_finished(&mut self, wait: Duration) -> Option<JobResult<'s>>;
    /// Time spent filling or draining slots so far (for the transfer's debug log; 0 unless the
    /// server is built with the bench-only `stage-timing` feature).
    fn busy(&self) -> Duration;
}

/// [`work`], timed into `busy` (nanoseconds) in the bench-only `stage-timing` build only: the
/// shipped server reads no clock per chunk (`busy` stays 0).
fn timed_work(dir: &mut Direction<'_>, job: &mut Job<'_>, busy: &AtomicU64) -> io::Result<()> {
    #[cfg(feature = "stage-timing")]
    let started = std::time::Instant::now();
    let r = work(dir, job);
    #[cfg(feature = "stage-timing")]
    busy.fetch_add(
        u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    #[cfg(not(feature = "stage-timing"))]
    let _ = busy;
    r
}

/// Fill or drain `job`'s slot (a registered GET's chunk needs nothing but to lie in the memory,
/// which the transfer checked).
fn work(dir: &mut Direction<'_>, job: &mut Job<'_>) -> io::Result<()> {
    match dir {
        Direction::Registered => Ok(()),
        Direction::Write(source) => source.fill(bytes(job)?),
        Direction::Read(sink) => sink.drain(bytes(job)?),
    }
}

/// The chunk's bytes in the slot the job holds.
fn bytes<'j>(job: &'j mut Job<'_>) -> io::Result<&'j mut [u8]> {
    let len = job.at.len as usize;
    job.slot
        .as_mut()
        .map(Slot::bytes_mut)
        .and_then(|b| b.get_mut(..len))
        .ok_or_else(|| io::Error::other("a chunk without a staging slot of its size"))
}

/// Jobs done at once on the caller's thread.
pub struct Inline<'a, 's> {
    dir: Direction<'a>,
    finished: VecDeque<JobResult<'s>>,
    busy: AtomicU64,
}

impl<'a> Inline<'a, '_> {
    pub fn new(dir: Direction<'a>) -> Self {
        Inline {
            dir,
            finished: VecDeque::new(),
            busy: AtomicU64::new(0),
        }
    }
}

impl<'s> LocalEnd<'s> for Inline<'_, 's> {
    fn submit(&mut self, mut job: Job<'s>) {
        let r = timed_work(&mut self.dir, &mut job, &self.busy);
        self.finished.push_back(r.map(|()| job));
    }

    fn try_finished(&mut self) -> Option<JobResult<'s>> {
        self.finished.pop_front()
    }

    fn wait_finished(&mut self, _wait: Duration) -> Option<JobResult<'s>> {
        self.finished.pop_front()
    }

    fn busy(&self) -> Duration {
        Duration::from_nanos(self.busy.load(Ordering::Relaxed))
    }
}

/// Jobs done in order on a scoped thread. Dropping it makes the thread end after its current job
/// (jobs still queued are skipped and their slot tokens dropped, which frees the slots); the scope
/// joins it before the staging memory can be reused.
pub struct Threaded<'s> {
    jobs: Sender<Job<'s>>,
    finished: Receiver<JobResult<'s>>,
    stop: Arc<AtomicBool>,
    busy: Arc<AtomicU64>,
}

impl<'s> Threaded<'s> {
    /// Start the local end's thread inside `scope`.
    pub fn start<'scope, 'env, 'd: 'scope>(
        scope: &'scope Scope<'scope, 'env>,
        mut dir: Direction<'d>,
    ) -> io::Result<Threaded<'s>>
    where
        's: 'scope,
    {
        let (jobs_tx, jobs_rx) = crossbeam_channel::unbounded::<Job<'s>>();
        let (done_tx, done_rx) = crossbeam_channel::unbounded::<JobResult<'s>>();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let busy = Arc::new(AtomicU64::new(0));
        let busy_here = Arc::clone(&busy);
        std::thread::Builder::new()
            .name("hipobj-rdma-file".into())
            .spawn_scoped(scope, move || {
                for mut job in jobs_rx {
                    if stopped.load(Ordering::Acquire) {
                        return;
                    }
                    let r = timed_work(&mut dir, &mut job, &busy_here);
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

impl Drop for Threaded<'_> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl<'s> LocalEnd<'s> for Threaded<'s> {
    fn submit(&mut self, job: Job<'s>) {
        // A send fails only when the thread stopped after an error, which it reports itself.
        let _ = self.jobs.send(job);
    }

    fn try_finished(&mut self) -> Option<JobResult<'s>> {
        self.finished.try_recv().ok()
    }

    fn wait_finished(&mut self, wait: Duration) -> Option<JobResult<'s>> {
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
    use crate::rdma::staging::StagingMemory;

    struct VecSink(Vec<u8>);
    impl ChunkSink for VecSink {
        fn drain(&mut self, data: &[u8]) -> io::Result<()> {
            self.0.extend_from_slice(data);
            Ok(())
        }
    }

    fn job(chunk: u64, len: u32, slot: Slot<'_>) -> Job<'_> {
        Job {
            at: SlotJob {
                chunk,
                offset: slot.offset(),
                len,
            },
            slot: Some(slot),
        }
    }

    fn at(r: Option<JobResult<'_>>) -> Option<(u64, usize, u32)> {
        r.and_then(Result::ok)
            .map(|j| (j.at.chunk, j.at.offset, j.at.len))
    }

    #[test]
    fn inline_fills_slots_in_order() {
        let mut memory = StagingMemory::zeroed(64).expect("memory");
        let data: Vec<u8> = (0..40).collect();
        {
            let pool = memory.slots(32, 2).expect("cut");
            let (first, second) = (pool.take().expect("slot"), pool.take().expect("slot"));
            assert_eq!((first.offset(), second.offset()), (0, 32));
            let mut src: &[u8] = &data;
            let mut end = Inline::new(Direction::Write(&mut src));
            end.submit(job(0, 20, second));
            end.submit(job(1, 20, first));
            assert_eq!(at(end.try_finished()), Some((0, 32, 20)));
            assert_eq!(at(end.try_finished()), Some((1, 0, 20)));
            assert!(end.try_finished().is_none());
            assert_eq!(
                pool.free(),
                2,
                "finished jobs dropped: their slots are free"
            );
        }
        let all = memory.bytes_mut().expect("heap");
        assert_eq!(&all[32..52], &data[..20]);
        assert_eq!(&all[..20], &data[20..]);
    }

    #[test]
    fn threaded_drains_in_order_and_reports_errors() {
        let mut memory = StagingMemory::zeroed(16).expect("memory");
        memory
            .bytes_mut()
            .expect("heap")
            .copy_from_slice(b"0123456789abcdef");
        let pool = memory.slots(8, 2).expect("cut");
        let (low, high) = (pool.take().expect("slot"), pool.take().expect("slot"));
        let mut sink = VecSink(Vec::new());
        std::thread::scope(|s| {
            let mut end = Threaded::start(s, Direction::Read(&mut sink)).expect("thread");
            end.submit(job(0, 8, high));
            end.submit(job(1, 4, low));
            end.submit(Job {
                at: SlotJob {
                    chunk: 2,
                    offset: 0,
                    len: 4,
                },
                slot: None,
            });
            let got: Vec<_> = (0..3)
                .map(|_| end.wait_finished(Duration::from_secs(10)).expect("result"))
                .collect();
            assert_eq!(got[0].as_ref().ok().map(|j| j.at.chunk), Some(0));
            assert_eq!(got[1].as_ref().ok().map(|j| j.at.chunk), Some(1));
            assert!(got[2].is_err(), "a chunk without a slot is an error");
        });
        assert_eq!(sink.0, b"89abcdef0123");
        assert_eq!(pool.free(), 2);
    }

    #[test]
    fn dropping_the_threaded_end_skips_the_queued_jobs_and_frees_their_slots() {
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
        let pool = memory.slots(64, 100).expect("cut");
        let mut src = Slow(0);
        std::thread::scope(|s| {
            let mut end = Threaded::start(s, Direction::Write(&mut src)).expect("thread");
            for i in 0..100 {
                end.submit(job(i, 64, pool.take().expect("slot")));
            }
            drop(end);
        });
        assert!(
            src.0 < 100,
            "{} of 100 queued jobs ran after the drop",
            src.0
        );
        assert_eq!(pool.free(), 100, "every slot token came back");
    }
}
