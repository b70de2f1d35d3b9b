//! One RDMA transfer over a paired QP (docs/protocol.md section 4, rules 4 and 5), pipelined: the
//! transfer is cut into work requests no larger than the chunk size; up to `depth` of them are at
//! the NIC while the local end (see `local_end`) fills (GET) or drains (PUT) other staging slots,
//! so file reads overlap RDMA WRITEs and file writes overlap RDMA READs.
//!
//! It succeeds only when every request completed successfully and the local end took every
//! chunk. On an error completion, a local I/O error, the inactivity watchdog (no completion for
//! the time `patience` allows while requests are posted: the configured watchdog at least, more
//! on a machine measured slow) or the total deadline (proportional to the size),
//! the QP goes to ERR and the flushes are awaited. Every completion of a poll batch is counted,
//! also those after an error completion, so a failed transfer waits only for the flushes still
//! missing.
//!
//! Bytes enter and leave strictly in order: a GET's slots are filled chunk after chunk; a PUT's
//! chunks are handed to the sink in chunk order even if their completions arrived out of order.

use std::collections::BTreeMap;
use std::io;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

pub use super::local_end::{ChunkSink, ChunkSource, Direction};
use super::local_end::{Inline, Job, LocalEnd, SlotJob, Threaded};
use super::patience::{Patience, RateMeter};
use super::port::{PortError, RdmaOp, RdmaQp, StagingBuffer, WorkCompletion, WorkRequest};
use super::staging::SlotPool;
use crate::stats::Stats;

/// How a transfer is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Bytes per work request (never above the port's max_msg_sz).
    pub chunk: u32,
    /// Work requests in flight (READs also <= max_rd_atomic).
    pub depth: usize,
    /// Staging slots (>= depth): the ones not at the NIC are with the local end.
    pub slots: usize,
}

/// Longest RDMA READ. A READ's response is one burst from the client's NIC; on Soft-RoCE the
/// responder sends one QP's whole response before it serves another QP, so with several clients
/// a long response starves the others' requesters past the 67 ms ACK timeout (docs/protocol.md rule
/// 4.3), and their retries restart responses that again outlast it: measured with perftest in the
/// lane, `ib_read_bw -q 4` of 8 MiB messages never finished, of 1 MiB messages it finished with
/// retries. So READs are cut shorter than `--chunk-bytes`; `--wr-depth` of them are in flight
/// (2 MiB by default): in one lane boot (benches/server-datapath-2026-12-01T1211.log) 4 streams
/// of PUT reached 0.90x `ib_read_bw -q 4` with 2 MiB in flight per transfer, 0.53x with 8 MiB.
pub const MAX_READ_CHUNK: u32 = 256 << 10;

impl Shape {
    /// The shape for `op` given the settings and the port's limits: twice as many slots as work
    /// requests in flight, so the local end works on a full window while another is at the NIC.
    /// READs are at most [`MAX_READ_CHUNK`] long, `wr_depth` of them within max_rd_atomic.
    pub fn new(
        op: RdmaOp,
        chunk_bytes: usize,
        max_msg_sz: u32,
        wr_depth: usize,
        max_rd_atomic: u8,
    ) -> Shape {
        let chunk = (chunk_bytes.min(u32::MAX as usize) as u32)
            .min(max_msg_sz)
            .max(1);
        let (chunk, depth) = match op {
            RdmaOp::Write => (chunk, wr_depth),
            RdmaOp::Read => (
                chunk.min(MAX_READ_CHUNK),
                wr_depth.min(usize::from(max_rd_atomic)),
            ),
        };
        let depth = depth.max(1);
        Shape {
            chunk,
            depth,
            slots: depth * 2,
        }
    }

    /// Staging bytes this shape needs.
    pub fn staging_len(&self) -> usize {
        self.chunk as usize * self.slots
    }

    /// Work requests for `total` bytes.
    pub fn chunks(&self, total: u64) -> u64 {
        total.div_ceil(u64::from(self.chunk))
    }

    /// Length of chunk `i` of `total` bytes.
    pub fn chunk_len(&self, total: u64, i: u64) -> u32 {
        let start = i * u64::from(self.chunk);
        (total.saturating_sub(start)).min(u64::from(self.chunk)) as u32
    }

    /// Where chunk `i` lies in a registered file mapping of the whole transfer.
    fn linear_offset(&self, chunk: u64) -> usize {
        chunk as usize * self.chunk as usize
    }
}

/// The client memory named by the token.
#[derive(Clone, Copy, Debug)]
pub struct Remote {
    pub addr: u64,
    pub rkey: u32,
}

/// Time limits of one transfer.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    /// Abort when no completion arrived for this long while work requests are posted: the
    /// floor; a machine measured slow gets more (see `patience`).
    pub watchdog: Duration,
    /// After ERR, wait at most this long for the flushes.
    pub flush_wait: Duration,
    /// Slowest acceptable rate in bytes per second: a transfer of N bytes is aborted after
    /// `watchdog + N / min_rate` in total, however steadily it trickles.
    pub min_rate: u64,
}

impl Deadlines {
    /// The total time a transfer of `bytes` may take.
    pub fn total_for(&self, bytes: u64) -> Duration {
        let secs = bytes as f64 / self.min_rate.max(1) as f64;
        self.watchdog
            .saturating_add(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
    }
}

/// Why a transfer failed.
#[derive(Debug)]
pub enum TransferError {
    Post(PortError),
    Poll(PortError),
    Completion {
        wr_id: u64,
        status: u32,
        vendor_err: u32,
    },
    Watchdog,
    /// The total deadline (proportional to the size) passed.
    Deadline(Duration),
    LocalIo(io::Error),
    /// Staging buffer smaller than the shape needs (a bug).
    Staging,
}

impl std::fmt::Display for TransferError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransferError::Post(e) => write!(f, "post failed: {e}"),
            TransferError::Poll(e) => write!(f, "poll failed: {e}"),
            TransferError::Completion {
                wr_id,
                status,
                vendor_err,
            } => {
                write!(
                    f,
                    "work request {wr_id} completed with status {status} (vendor {vendor_err:#x})"
                )
            }
            TransferError::Watchdog => f.write_str("watchdog fired: no completion in time"),
            TransferError::Deadline(d) => write!(f, "total deadline passed after {d:?}"),
            TransferError::LocalIo(e) => write!(f, "local i/o failed: {e}"),
            TransferError::Staging => f.write_str("staging buffer too small"),
        }
    }
}

/// Empty polls before the poller starts sleeping between polls.
const SPIN_POLLS: u32 = 64;
const IDLE_SLEEP: Duration = Duration::from_micros(50);
/// Longest sleep between two empty polls while work requests are posted.
const MAX_IDLE_SLEEP: Duration = Duration::from_millis(1);
/// Longest block on the local end when nothing is at the NIC (deadlines are checked between).
const LOCAL_WAIT: Duration = Duration::from_millis(20);

/// Which bytes a transfer moves, and how it is cut.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub shape: Shape,
    /// Bytes to move (the client memory starts at `remote.addr`).
    pub total: u64,
    pub remote: Remote,
    /// GET of hipobj-rc-v2: the last WRITE carries this immediate (the session's cookie); RC
    /// ordering puts every earlier WRITE in the client's memory before it.
    pub last_imm: Option<u32>,
    /// Revision 4 (docs/protocol.md section 11): end with a zero-length SEND_WITH_INV of this rkey,
    /// posted right after the last WRITE (GET) or once every READ completed (PUT). The transfer
    /// succeeds only when that SEND completed too (the client's receive completed first).
    pub send_inv: Option<u32>,
}

/// Work-request id of the SEND_WITH_INV (chunks are numbered from 0).
const SEND_INV_WR_ID: u64 = u64::MAX;

/// Where a transfer's SEND_WITH_INV stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum SendInv {
    /// None asked for, or it completed.
    #[default]
    Done,
    /// Asked for, not yet posted.
    Due(u32),
    /// At the NIC.
    Posted,
}

/// Where each chunk lies in the transfer's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// A staging buffer: `shape.slots` slots reused in turn by the local end and the NIC.
    Ring,
    /// A registered file mapping of the whole transfer: chunk `i` at `i * chunk`, never moved.
    Linear,
}

/// One transfer on one QP with one staging buffer (or one registered file mapping), checked and
/// not yet started.
pub struct Transfer<'t, Q: RdmaQp> {
    qp: &'t mut Q,
    staging: &'t Q::Buffer,
    plan: Plan,
    /// From the memory: a file mapping is laid out linearly.
    layout: Layout,
    deadlines: Deadlines,
    stats: &'t Stats,
}

/// A running transfer: the poller's loop. Its slots (a staging buffer cut into `shape.slots`
/// slots) are tokens: free ones in `slots`, the others held in `progress` or by the local end.
struct Pump<'t, 's, Q: RdmaQp> {
    qp: &'t mut Q,
    staging: &'t Q::Buffer,
    shape: Shape,
    layout: Layout,
    op: RdmaOp,
    total: u64,
    remote: Remote,
    last_imm: Option<u32>,
    deadlines: Deadlines,
    stats: &'t Stats,
    /// The staging buffer's slots (none in a file mapping).
    slots: Option<&'s SlotPool<'t>>,
    progress: Progress<'s>,
}

/// Where a transfer stands. Each chunk in `ready`, `posted` and `landed` holds its slot's token.
#[derive(Debug, Default)]
struct Progress<'s> {
    /// Chunks in the transfer.
    chunks: u64,
    /// GET: next chunk to hand to the local end for filling.
    next_fill: u64,
    /// GET: filled chunks waiting to be posted, by chunk.
    ready: BTreeMap<u64, Job<'s>>,
    /// PUT: next chunk to post.
    next_read: u64,
    /// Work requests at the NIC, by chunk (= wr_id); a posted slot's token stays here until its
    /// completion (or the QP's end, after a failure).
    posted: BTreeMap<u64, Job<'s>>,
    /// PUT: read chunks waiting for their turn at the sink, by chunk.
    landed: BTreeMap<u64, Job<'s>>,
    /// PUT: next chunk to hand to the sink.
    next_drain: u64,
    /// Chunks the transfer is done with (GET: written; PUT: drained).
    retired: u64,
    /// Work requests posted / completions seen (any status).
    posts: u64,
    completions: u64,
    /// Jobs handed to the local end and not yet back.
    at_local: usize,
    /// The closing SEND_WITH_INV, if any.
    send_inv: SendInv,
}

/// One round of the loop moved something.
type Moved = bool;

impl<'t, Q: RdmaQp> Transfer<'t, Q> {
    /// Check the staging buffer (or file mapping) against the plan; nothing is posted yet.
    pub fn new(
        qp: &'t mut Q,
        staging: &'t Q::Buffer,
        plan: Plan,
        deadlines: Deadlines,
        stats: &'t Stats,
    ) -> Result<Self, TransferError> {
        let memory = staging.memory();
        let shape = plan.shape;
        let (layout, fits) = match memory.is_file_mapping() {
            false => (
                Layout::Ring,
                memory.len() >= shape.staging_len() && shape.slots >= shape.depth,
            ),
            true => (Layout::Linear, memory.len() as u64 >= plan.total),
        };
        if !fits {
            return Err(TransferError::Staging);
        }
        Ok(Transfer {
            qp,
            staging,
            plan,
            layout,
            deadlines,
            stats,
        })
    }

    /// Move every byte between `dir` and the client. Returns only when no work request of this
    /// transfer is outstanding any more (or, after a failure, when the flush wait ran out: the
    /// caller must then destroy the QP before reusing the staging buffer).
    ///
    /// A file mapping moves only with [`Direction::Registered`], a staging buffer only without.
    pub fn run(self, dir: Direction<'_>) -> Result<(), TransferError> {
        let op = match dir {
            Direction::Write(_) | Direction::Registered => RdmaOp::Write,
            Direction::Read(_) => RdmaOp::Read,
        };
        let registered = matches!(dir, Direction::Registered);
        if registered != (self.layout == Layout::Linear) {
            return Err(TransferError::Staging);
        }
        let Plan {
            shape,
            total,
            remote,
            last_imm,
            send_inv,
        } = self.plan;
        let staging: &'t Q::Buffer = self.staging;
        let slots = match self.layout {
            Layout::Ring => Some(
                staging
                    .memory()
                    .slots(shape.chunk as usize, shape.slots)
                    .ok_or(TransferError::Staging)?,
            ),
            Layout::Linear => None,
        };
        let mut pump = Pump {
            qp: self.qp,
            staging,
            shape,
            layout: self.layout,
            op,
            total,
            remote,
            last_imm,
            deadlines: self.deadlines,
            stats: self.stats,
            slots: slots.as_ref(),
            progress: Progress {
                chunks: shape.chunks(total),
                send_inv: send_inv.map_or(SendInv::Done, SendInv::Due),
                ..Progress::default()
            },
        };
        // A registered GET has nothing for a thread to do.
        let result = if pump.progress.chunks <= 1 || registered {
            pump.pump(&mut Inline::new(dir))
        } else {
            std::thread::scope(|scope| match Threaded::start(scope, dir) {
                Ok(mut local) => pump.pump(&mut local),
                Err(e) => Err(TransferError::LocalIo(e)),
            })
        };
        if let Err(e) = &result {
            pump.abort(e);
        }
        result
    }
}

impl<'t, 's, Q: RdmaQp> Pump<'t, 's, Q> {
    /// The loop: local results in, local jobs out, posts, completions, until every chunk retired.
    fn pump(&mut self, local: &mut dyn LocalEnd<'s>) -> Result<(), TransferError> {
        let started = Instant::now();
        let base_deadline = self.deadlines.total_for(self.total);
        let meter = RateMeter::new(&self.stats.completion_ps_per_byte);
        let expected_total = meter.expected(self.total);
        let mut patience = Patience::new(self.deadlines.watchdog, started);
        let mut pace = Pace::default();
        let mut polled: Vec<WorkCompletion> = Vec::with_capacity(self.shape.depth);
        let mut first_post = None;
        let mut last_wc = started;
        loop {
            let stall = patience.turn(Instant::now());
            Stats::add(&self.stats.poller_stalled_ms, stall.as_millis() as u64);
            let mut moved = self.take_local_results(local)?;
            if self.progress.retired == self.progress.chunks
                && self.progress.send_inv == SendInv::Done
            {
                self.log_done(started, first_post, last_wc, local.busy());
                return Ok(());
            }
            self.feed_local(local);
            if self.post_window()? {
                moved = true;
                first_post.get_or_insert_with(Instant::now);
            }
            moved |= self.post_send_inv_when_due()?;
            let in_flight = self.bytes_in_flight();
            if self.poll_completions(&mut polled)? {
                moved = true;
                last_wc = Instant::now();
                let took = patience.progressed(last_wc);
                meter.observe(in_flight.saturating_sub(self.bytes_in_flight()), took);
                pace.completed(last_wc);
            }
            self.hand_landed_to_sink(local);
            let now = Instant::now();
            // The closing SEND_WITH_INV counts as at the NIC: a peer that never takes it trips
            // the watchdog like one that never completes a WRITE or READ.
            let at_nic = self.at_nic();
            if at_nic && patience.inactive(now, meter.expected(self.bytes_in_flight())) {
                Stats::bump(&self.stats.watchdog_fired);
                return Err(TransferError::Watchdog);
            }
            if patience.overdue(now, base_deadline, expected_total) {
                Stats::bump(&self.stats.deadline_fired);
                return Err(TransferError::Deadline(now.duration_since(started)));
            }
            patience.at_nic(at_nic);
            if !at_nic {
                patience.progressed(now);
                if !moved && self.progress.at_local > 0 {
                    // Nothing at the NIC: wait for the local end instead of spinning.
                    if let Some(r) = local.wait_finished(LOCAL_WAIT) {
                        self.local_result(r)?;
                    }
                }
                continue;
            }
            if moved {
                pace.moved();
            } else {
                pace.idle();
            }
        }
    }

    /// Bytes of the work requests at the NIC.
    fn bytes_in_flight(&self) -> u64 {
        self.progress
            .posted
            .values()
            .map(|job| u64::from(job.at.len))
            .sum()
    }

    /// Where a finished transfer's time went (debug log): until the first post, NIC and local end
    /// overlapped, after the last completion; and the local end's own busy time.
    fn log_done(
        &self,
        started: Instant,
        first_post: Option<Instant>,
        last_completion: Instant,
        local_busy: Duration,
    ) {
        let us = |d: Duration| d.as_micros() as u64;
        let first = first_post.unwrap_or(started);
        debug!(
            op = ?self.op,
            bytes = self.total,
            chunks = self.progress.chunks,
            total_us = us(started.elapsed()),
            to_first_post_us = us(first.saturating_duration_since(started)),
            after_last_completion_us = us(last_completion.elapsed()),
            local_busy_us = us(local_busy),
            "transfer done"
        );
    }

    /// Jobs the local end finished: GET slots become ready to post, PUT slots become free.
    fn take_local_results(&mut self, local: &mut dyn LocalEnd<'s>) -> Result<Moved, TransferError> {
        let mut moved = false;
        while let Some(r) = local.try_finished() {
            self.local_result(r)?;
            moved = true;
        }
        Ok(moved)
    }

    /// A job back from the local end: a GET's filled chunk waits to be posted (its slot with
    /// it); a PUT's drained chunk is done (its slot token dropped: the slot is free).
    fn local_result(&mut self, r: io::Result<Job<'s>>) -> Result<(), TransferError> {
        let job = r.map_err(TransferError::LocalIo)?;
        let p = &mut self.progress;
        p.at_local -= 1;
        match self.op {
            RdmaOp::Write => {
                p.ready.insert(job.at.chunk, job);
            }
            RdmaOp::Read => {
                drop(job);
                p.retired += 1;
            }
        }
        Ok(())
    }

    /// GET: give free slots to the local end for the next chunks.
    fn feed_local(&mut self, local: &mut dyn LocalEnd<'s>) {
        if self.op != RdmaOp::Write {
            return;
        }
        while self.progress.next_fill < self.progress.chunks {
            let chunk = self.progress.next_fill;
            let job = match self.layout {
                Layout::Ring => match self.slots.and_then(SlotPool::take) {
                    Some(slot) => self.job(chunk, slot),
                    None => return,
                },
                Layout::Linear => Job {
                    at: SlotJob {
                        chunk,
                        offset: self.shape.linear_offset(chunk),
                        len: self.shape.chunk_len(self.total, chunk),
                    },
                    slot: None,
                },
            };
            self.progress.next_fill += 1;
            self.progress.at_local += 1;
            local.submit(job);
        }
    }

    /// Whether work requests of this transfer are at the NIC.
    fn at_nic(&self) -> bool {
        !self.progress.posted.is_empty() || self.progress.send_inv == SendInv::Posted
    }

    /// Post the SEND_WITH_INV once it is due: after the last WRITE was posted (RC ordering puts
    /// the SEND after it), or after every READ completed (a SEND may pass a READ in flight).
    fn post_send_inv_when_due(&mut self) -> Result<Moved, TransferError> {
        let SendInv::Due(rkey) = self.progress.send_inv else {
            return Ok(false);
        };
        let p = &self.progress;
        let due = match self.op {
            RdmaOp::Write => p.retired + p.posted.len() as u64 == p.chunks,
            RdmaOp::Read => p.next_read == p.chunks && p.posted.is_empty(),
        };
        if !due {
            return Ok(false);
        }
        self.qp
            .post_send_inv(SEND_INV_WR_ID, rkey)
            .map_err(TransferError::Post)?;
        self.progress.send_inv = SendInv::Posted;
        self.progress.posts += 1;
        Stats::bump(&self.stats.remote_invalidations);
        Ok(true)
    }

    /// Post while the window has room: GET posts filled chunks in order, PUT reads into free
    /// slots.
    fn post_window(&mut self) -> Result<Moved, TransferError> {
        let mut moved = false;
        while self.progress.posted.len() < self.shape.depth {
            let Some(job) = self.next_to_post() else {
                break;
            };
            self.post(job)?;
            moved = true;
        }
        Ok(moved)
    }

    fn next_to_post(&mut self) -> Option<Job<'s>> {
        match self.op {
            RdmaOp::Write => self.progress.ready.pop_first().map(|(_, job)| job),
            RdmaOp::Read => {
                if self.progress.next_read == self.progress.chunks {
                    return None;
                }
                let slot = self.slots?.take()?;
                let chunk = self.progress.next_read;
                self.progress.next_read += 1;
                Some(self.job(chunk, slot))
            }
        }
    }

    /// Post `job`'s chunk; its slot token (if any) stays in `posted` until the completion.
    fn post(&mut self, job: Job<'s>) -> Result<(), TransferError> {
        let at = job.at;
        let wr = WorkRequest {
            op: self.op,
            wr_id: at.chunk,
            local_offset: at.offset,
            len: at.len,
            remote_addr: self
                .remote
                .addr
                .wrapping_add(at.chunk * u64::from(self.shape.chunk)),
            rkey: self.remote.rkey,
            imm: self
                .last_imm
                .filter(|_| self.op == RdmaOp::Write && at.chunk + 1 == self.progress.chunks),
        };
        self.qp
            .post(&wr, self.staging)
            .map_err(TransferError::Post)?;
        self.progress.posted.insert(at.chunk, job);
        self.progress.posts += 1;
        Stats::bump(&self.stats.work_requests);
        Ok(())
    }

    /// Account for every completion available now; the first error completion of the batch
    /// fails the transfer, after the whole batch was counted.
    fn poll_completions(
        &mut self,
        polled: &mut Vec<WorkCompletion>,
    ) -> Result<Moved, TransferError> {
        polled.clear();
        self.qp.poll(polled).map_err(TransferError::Poll)?;
        let mut first_error = None;
        for wc in polled.iter() {
            self.progress.completions += 1;
            if wc.status != 0 {
                first_error.get_or_insert(TransferError::Completion {
                    wr_id: wc.wr_id,
                    status: wc.status,
                    vendor_err: wc.vendor_err,
                });
                continue;
            }
            self.completed(wc.wr_id);
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(!polled.is_empty()),
        }
    }

    /// A successful completion: GET frees its slot, PUT queues its chunk for the sink.
    fn completed(&mut self, wr_id: u64) {
        if wr_id == SEND_INV_WR_ID && self.progress.send_inv == SendInv::Posted {
            self.progress.send_inv = SendInv::Done;
            return;
        }
        let Some(job) = self.progress.posted.remove(&wr_id) else {
            warn!(
                wr_id,
                "completion for a work request not in flight; ignored"
            );
            return;
        };
        match self.op {
            RdmaOp::Write => {
                // Written: the slot token goes, and the slot is free for the next chunk.
                drop(job);
                self.progress.retired += 1;
            }
            RdmaOp::Read => {
                self.progress.landed.insert(job.at.chunk, job);
            }
        }
    }

    /// PUT: hand read chunks to the sink, in chunk order.
    fn hand_landed_to_sink(&mut self, local: &mut dyn LocalEnd<'s>) {
        let p = &mut self.progress;
        while let Some(job) = p.landed.remove(&p.next_drain) {
            p.next_drain += 1;
            p.at_local += 1;
            local.submit(job);
        }
    }

    /// Move the QP to ERR and wait for the flushes of what is still posted.
    fn abort(&mut self, e: &TransferError) {
        if matches!(e, TransferError::Completion { .. }) {
            Stats::bump(&self.stats.completion_errors);
        }
        let outstanding = self
            .progress
            .posts
            .saturating_sub(self.progress.completions);
        debug!(error = %e, posted = self.progress.posts, completions = self.progress.completions,
            outstanding, "transfer failed; moving QP to ERR");
        if let Err(e) = self.qp.to_error() {
            warn!(error = %e, "moving the QP to ERR failed");
        }
        if !drain_flushes(self.qp, outstanding, self.deadlines.flush_wait) {
            Stats::bump(&self.stats.flush_timeouts);
            warn!(
                outstanding,
                "flushes did not all arrive in time; the QP will be destroyed"
            );
        }
    }

    /// Chunk `chunk` in `slot`.
    fn job(&self, chunk: u64, slot: super::staging::Slot<'s>) -> Job<'s> {
        Job {
            at: SlotJob {
                chunk,
                offset: slot.offset(),
                len: self.shape.chunk_len(self.total, chunk),
            },
            slot: Some(slot),
        }
    }
}

/// Poll until `outstanding` more completions (flushes) arrived; false if the wait ran out.
fn drain_flushes<Q: RdmaQp>(qp: &mut Q, mut outstanding: u64, wait: Duration) -> bool {
    let started = Instant::now();
    let mut empty_polls = 0u32;
    let mut polled = Vec::new();
    while outstanding > 0 {
        polled.clear();
        if qp.poll(&mut polled).is_err() {
            return false;
        }
        outstanding = outstanding.saturating_sub(polled.len() as u64);
        if polled.is_empty() {
            if started.elapsed() >= wait {
                return false;
            }
            idle(&mut empty_polls);
        }
    }
    true
}

/// How the poller waits while work requests are posted and a round moved nothing: a few yields,
/// then sleeps that double from [`IDLE_SLEEP`] up to a quarter of the recent interval between
/// completions (at most [`MAX_IDLE_SLEEP`]). A slow link (Soft-RoCE, a busy host) is then not
/// polled tens of thousands of times per chunk, which takes the CPU its packets and the file
/// need; a fast one is never slept past a quarter of a completion interval.
#[derive(Debug, Default)]
struct Pace {
    empty_rounds: u32,
    sleep: Duration,
    last_completion: Option<Instant>,
    /// Moving average of the time between completion batches.
    interval: Duration,
}

impl Pace {
    fn completed(&mut self, now: Instant) {
        if let Some(last) = self.last_completion {
            let dt = now.saturating_duration_since(last);
            self.interval = if self.interval.is_zero() {
                dt
            } else {
                (self.interval * 7 + dt) / 8
            };
        }
        self.last_completion = Some(now);
        self.moved();
    }

    fn moved(&mut self) {
        self.empty_rounds = 0;
        self.sleep = IDLE_SLEEP;
    }

    fn idle(&mut self) {
        self.empty_rounds += 1;
        if self.empty_rounds < SPIN_POLLS {
            std::thread::yield_now();
            return;
        }
        std::thread::sleep(self.sleep.max(IDLE_SLEEP));
        self.sleep = (self.sleep * 2).min(self.cap());
    }

    /// The longest sleep now: a quarter of the completion interval, within the bounds.
    fn cap(&self) -> Duration {
        (self.interval / 4).clamp(IDLE_SLEEP, MAX_IDLE_SLEEP)
    }
}

fn idle(empty_polls: &mut u32) {
    *empty_polls += 1;
    if *empty_polls < SPIN_POLLS {
        std::thread::yield_now();
    } else {
        std::thread::sleep(IDLE_SLEEP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::port::{Peer, QpSetup, RdmaPort};
    use crate::rdma::test_double::{Behaviour, DoublePort, QpLog, WC_RETRY_EXC_ERR};
    use std::sync::atomic::Ordering;

    struct VecSink(Vec<u8>);
    impl ChunkSink for VecSink {
        fn drain(&mut self, data: &[u8]) -> io::Result<()> {
            self.0.extend_from_slice(data);
            Ok(())
        }
    }

    const DEADLINES: Deadlines = Deadlines {
        watchdog: Duration::from_millis(500),
        flush_wait: Duration::from_millis(500),
        min_rate: 1 << 20,
    };

    fn qp(port: &DoublePort) -> <DoublePort as RdmaPort>::Qp {
        let setup = QpSetup {
            peer: Peer {
                gid: [1; 16],
                qp_num: 9,
            },
            start_psn: 5,
            max_send_wr: 8,
        };
        port.connect_qp(&setup).expect("qp")
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    fn shape(chunk: u32, depth: usize) -> Shape {
        Shape {
            chunk,
            depth,
            slots: depth * 2,
        }
    }

    /// Run one transfer on a fresh QP of `port`; returns the QP for inspection.
    fn transfer(
        port: &DoublePort,
        shape: Shape,
        dir: Direction<'_>,
        total: u64,
        remote: Remote,
        deadlines: Deadlines,
        stats: &Stats,
    ) -> (Result<(), TransferError>, <DoublePort as RdmaPort>::Qp) {
        let staging = port.alloc_staging(shape.staging_len()).expect("staging");
        let mut q = qp(port);
        let plan = Plan {
            shape,
            total,
            remote,
            last_imm: None,
            send_inv: None,
        };
        let r = Transfer::new(&mut q, &staging, plan, deadlines, stats).and_then(|t| t.run(dir));
        (r, q)
    }

    #[test]
    fn the_poller_sleeps_at_most_a_quarter_of_the_completion_interval() {
        let mut pace = Pace::default();
        assert_eq!(
            pace.cap(),
            IDLE_SLEEP,
            "no completion yet: the shortest sleep"
        );
        let t0 = Instant::now();
        pace.completed(t0);
        pace.completed(t0 + Duration::from_millis(40));
        assert_eq!(pace.cap(), MAX_IDLE_SLEEP, "slow link: capped");
        let mut fast = Pace::default();
        for i in 0..50u32 {
            fast.completed(t0 + Duration::from_micros(400) * i);
        }
        assert_eq!(fast.cap(), Duration::from_micros(100));
        // Sleeps double from the shortest up to the cap, and start over after progress.
        fast.empty_rounds = SPIN_POLLS;
        let mut slept = Vec::new();
        for _ in 0..4 {
            fast.idle();
            slept.push(fast.sleep);
        }
        assert_eq!(slept[0], Duration::from_micros(100));
        assert!(slept.iter().all(|s| *s <= Duration::from_micros(100)));
        fast.moved();
        assert_eq!(fast.sleep, IDLE_SLEEP);
    }

    #[test]
    fn shape_respects_limits() {
        let s = Shape::new(RdmaOp::Write, 1 << 20, 1 << 23, 8, 4);
        assert_eq!(s, shape(1 << 20, 8));
        assert_eq!(s.staging_len(), 16 << 20);
        // READs: at most MAX_READ_CHUNK long, wr_depth of them within max_rd_atomic.
        let s = Shape::new(RdmaOp::Read, 1 << 24, 1 << 23, 8, 4);
        assert_eq!(s, shape(MAX_READ_CHUNK, 4));
        let s = Shape::new(RdmaOp::Read, 1 << 20, 1 << 23, 8, 128);
        assert_eq!(s, shape(MAX_READ_CHUNK, 8));
        assert_eq!(s.staging_len(), 4 << 20);
        let s = Shape::new(RdmaOp::Read, 4096, 1 << 23, 3, 128);
        assert_eq!(s, shape(4096, 3));
        let s = Shape::new(RdmaOp::Write, 1000, 4096, 3, 0);
        assert_eq!(s.chunks(0), 0);
        assert_eq!(s.chunks(1), 1);
        assert_eq!(s.chunks(1000), 1);
        assert_eq!(s.chunks(1001), 2);
        assert_eq!(s.chunk_len(2500, 0), 1000);
        assert_eq!(s.chunk_len(2500, 2), 500);
        assert_eq!(s.staging_len(), 6000);
    }

    #[test]
    fn total_deadline_grows_with_the_size() {
        let d = Deadlines {
            watchdog: Duration::from_secs(2),
            flush_wait: Duration::from_secs(1),
            min_rate: 1 << 20,
        };
        assert_eq!(d.total_for(0), Duration::from_secs(2));
        assert_eq!(d.total_for(8 << 20), Duration::from_secs(10));
        let never = Deadlines { min_rate: 0, ..d };
        assert!(never.total_for(u64::MAX) >= Duration::from_secs(1 << 40));
    }

    #[test]
    fn write_moves_every_byte_in_bounded_chunks_and_window() {
        let port = DoublePort::new();
        let data = pattern(10_000);
        port.add_region(77, 0x1000, vec![0; 12_000]);
        let mut src: &[u8] = &data;
        let stats = Stats::default();
        let remote = Remote {
            addr: 0x1000 + 100,
            rkey: 77,
        };
        let (r, _q) = transfer(
            &port,
            shape(1024, 3),
            Direction::Write(&mut src),
            10_000,
            remote,
            DEADLINES,
            &stats,
        );
        r.expect("transfer");
        let mem = port.region(77);
        assert_eq!(&mem[100..10_100], &data[..]);
        assert!(mem[..100].iter().all(|&b| b == 0) && mem[10_100..].iter().all(|&b| b == 0));
        let posted = port.posted();
        assert_eq!(posted.len(), 10);
        assert!(posted
            .iter()
            .all(|wr| wr.len <= 1024 && wr.op == RdmaOp::Write));
        // Each chunk goes to its own place in the client buffer, in order.
        for (i, wr) in posted.iter().enumerate() {
            assert_eq!(wr.remote_addr, 0x1000 + 100 + 1024 * i as u64);
        }
        assert!(port.max_outstanding() <= 3);
        assert_eq!(stats.work_requests.load(Ordering::Relaxed), 10);
    }

    #[test]
    fn a_registered_file_is_written_from_where_each_chunk_lies() {
        use std::io::Write;
        let port = DoublePort::new();
        let data = pattern(10_000);
        let mut file = tempfile::tempfile().expect("file");
        file.write_all(&data).expect("write");
        port.add_region(77, 0x1000, vec![0; 9_000]);
        let registered = port.register_file(&file, 777, 8_500).expect("registered");
        let stats = Stats::default();
        let plan = Plan {
            shape: shape(1024, 3),
            total: 8_500,
            remote: Remote {
                addr: 0x1000,
                rkey: 77,
            },
            last_imm: None,
            send_inv: None,
        };
        let mut q = qp(&port);
        Transfer::new(&mut q, &registered, plan, DEADLINES, &stats)
            .and_then(|t| t.run(Direction::Registered))
            .expect("transfer");
        assert_eq!(&port.region(77)[..8_500], &data[777..9_277]);
        let posted = port.posted();
        assert_eq!(posted.len(), 9);
        for (i, wr) in posted.iter().enumerate() {
            assert_eq!(
                (wr.local_offset, wr.remote_addr),
                (1024 * i, 0x1000 + 1024 * i as u64)
            );
        }
        assert!(port.max_outstanding() <= 3);

        // A file mapping moves only as Registered, and only bytes it holds; staging never does.
        let mut src: &[u8] = &data;
        for (total, dir) in [
            (8_500, Direction::Write(&mut src)),
            (8_501, Direction::Registered),
        ] {
            let plan = Plan { total, ..plan };
            let r = Transfer::new(&mut q, &registered, plan, DEADLINES, &stats)
                .and_then(|t| t.run(dir));
            assert!(matches!(r, Err(TransferError::Staging)), "{r:?}");
        }
        let staging = port
            .alloc_staging(shape(1024, 3).staging_len())
            .expect("staging");
        let r = Transfer::new(&mut q, &staging, plan, DEADLINES, &stats)
            .and_then(|t| t.run(Direction::Registered));
        assert!(matches!(r, Err(TransferError::Staging)), "{r:?}");
        assert_eq!(port.posted().len(), 9, "nothing more was posted");
    }

    #[test]
    fn read_hands_chunks_to_the_sink_in_order() {
        for batch in [1, 3, 16] {
            let port = DoublePort::new();
            port.set_poll_batch(batch);
            let data = pattern(50_000);
            port.add_region(5, 0x9000, data.clone());
            let mut sink = VecSink(Vec::new());
            let (r, _q) = transfer(
                &port,
                shape(700, 4),
                Direction::Read(&mut sink),
                50_000,
                Remote {
                    addr: 0x9000,
                    rkey: 5,
                },
                DEADLINES,
                &Stats::default(),
            );
            r.expect("transfer");
            assert_eq!(sink.0, data, "poll batch {batch}");
            assert!(port.max_outstanding() <= 4);
        }
    }

    #[test]
    fn one_chunk_runs_inline_both_ways() {
        let port = DoublePort::new();
        let data = pattern(300);
        port.add_region(3, 0, vec![0; 300]);
        let mut src: &[u8] = &data;
        let (r, _q) = transfer(
            &port,
            shape(1024, 2),
            Direction::Write(&mut src),
            300,
            Remote { addr: 0, rkey: 3 },
            DEADLINES,
            &Stats::default(),
        );
        r.expect("write");
        assert_eq!(port.region(3), data);
        let mut sink = VecSink(Vec::new());
        let (r, _q) = transfer(
            &port,
            shape(1024, 2),
            Direction::Read(&mut sink),
            300,
            Remote { addr: 0, rkey: 3 },
            DEADLINES,
            &Stats::default(),
        );
        r.expect("read");
        assert_eq!(sink.0, data);
    }

    #[test]
    fn zero_bytes_posts_nothing() {
        let port = DoublePort::new();
        let mut src: &[u8] = &[];
        let (r, _q) = transfer(
            &port,
            shape(64, 2),
            Direction::Write(&mut src),
            0,
            Remote { addr: 0, rkey: 0 },
            DEADLINES,
            &Stats::default(),
        );
        r.expect("empty transfer");
        assert!(port.posted().is_empty());
    }

    #[test]
    fn staging_smaller_than_the_shape_is_refused_before_posting() {
        let port = DoublePort::new();
        let staging = port.alloc_staging(100).expect("staging");
        let mut q = qp(&port);
        let plan = Plan {
            shape: shape(64, 2),
            total: 1000,
            remote: Remote { addr: 0, rkey: 0 },
            last_imm: None,
            send_inv: None,
        };
        let stats = Stats::default();
        assert!(matches!(
            Transfer::new(&mut q, &staging, plan, DEADLINES, &stats),
            Err(TransferError::Staging)
        ));
        assert!(port.posted().is_empty());
    }

    #[test]
    fn error_completion_moves_qp_to_err_and_drains() {
        let port = DoublePort::new();
        port.set_behaviour(Behaviour::FailWr(2));
        port.add_region(1, 0, vec![0; 8192]);
        let data = pattern(8192);
        let mut src: &[u8] = &data;
        let stats = Stats::default();
        let (r, mut q) = transfer(
            &port,
            shape(512, 4),
            Direction::Write(&mut src),
            8192,
            Remote { addr: 0, rkey: 1 },
            DEADLINES,
            &stats,
        );
        let err = r.expect_err("must fail");
        assert!(
            matches!(
                err,
                TransferError::Completion {
                    wr_id: 2,
                    status: WC_RETRY_EXC_ERR,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(port.log().contains(&QpLog::ToError(q.qp_num())));
        assert_eq!(stats.completion_errors.load(Ordering::Relaxed), 1);
        assert_eq!(stats.flush_timeouts.load(Ordering::Relaxed), 0);
        // Every posted request was accounted for: nothing outstanding is left on the QP.
        let mut rest = Vec::new();
        q.poll(&mut rest).expect("poll");
        assert!(rest.is_empty());
    }

    /// The review finding: completions after an error completion in the same poll batch were
    /// never counted, so the flush wait always ran out. With the whole window in one batch, every
    /// flush is in the batch that carries the error: nothing is left to wait for.
    #[test]
    fn completions_after_an_error_in_the_same_batch_are_counted() {
        let port = DoublePort::new();
        port.set_poll_batch(64);
        port.set_behaviour(Behaviour::FailWr(1));
        port.add_region(1, 0, vec![0; 8192]);
        let data = pattern(8192);
        let mut src: &[u8] = &data;
        let stats = Stats::default();
        let deadlines = Deadlines {
            flush_wait: Duration::from_secs(30),
            ..DEADLINES
        };
        let (r, mut q) = transfer(
            &port,
            shape(512, 4),
            Direction::Write(&mut src),
            8192,
            Remote { addr: 0, rkey: 1 },
            deadlines,
            &stats,
        );
        assert!(matches!(r, Err(TransferError::Completion { wr_id: 1, .. })));
        assert_eq!(stats.flush_timeouts.load(Ordering::Relaxed), 0);
        let mut rest = Vec::new();
        q.poll(&mut rest).expect("poll");
        assert!(rest.is_empty());
    }

    #[test]
    fn watchdog_fires_when_nothing_completes() {
        let port = DoublePort::new();
        port.set_behaviour(Behaviour::Hang);
        port.add_region(1, 0, vec![0; 4096]);
        let data = pattern(4096);
        let mut src: &[u8] = &data;
        let stats = Stats::default();
        let deadlines = Deadlines {
            watchdog: Duration::from_millis(30),
            flush_wait: Duration::from_secs(5),
            min_rate: 1 << 20,
        };
        let (r, mut q) = transfer(
            &port,
            shape(1024, 2),
            Direction::Write(&mut src),
            4096,
            Remote { addr: 0, rkey: 1 },
            deadlines,
            &stats,
        );
        assert!(matches!(r, Err(TransferError::Watchdog)));
        assert_eq!(stats.watchdog_fired.load(Ordering::Relaxed), 1);
        assert!(port.log().contains(&QpLog::ToError(q.qp_num())));
        // Both posted requests flushed before the transfer returned.
        let mut rest = Vec::new();
        q.poll(&mut rest).expect("poll");
        assert!(rest.is_empty());
    }

    /// A peer that completes just often enough to keep the watchdog quiet is stopped by the total
    /// deadline (watchdog + size / min_rate).
    #[test]
    fn total_deadline_stops_a_trickling_peer() {
        let port = DoublePort::new();
        port.set_behaviour(Behaviour::TrickleMs(40));
        port.add_region(1, 0, vec![0; 64 * 100]);
        let mut sink = VecSink(Vec::new());
        let stats = Stats::default();
        let deadlines = Deadlines {
            watchdog: Duration::from_millis(400),
            flush_wait: Duration::from_secs(5),
            // 6400 bytes at 20 000 B/s: 320 ms + 400 ms, where trickling takes 4 s.
            min_rate: 20_000,
        };
        let (r, _q) = transfer(
            &port,
            shape(64, 2),
            Direction::Read(&mut sink),
            64 * 100,
            Remote { addr: 0, rkey: 1 },
            deadlines,
            &stats,
        );
        assert!(matches!(r, Err(TransferError::Deadline(_))), "{r:?}");
        assert_eq!(stats.deadline_fired.load(Ordering::Relaxed), 1);
        assert_eq!(stats.watchdog_fired.load(Ordering::Relaxed), 0);
        assert!(sink.0.len() < 64 * 100);
    }

    /// Issue 22: a peer slower than the configured watchdog, on a machine whose measured rate is
    /// that slow, completes; the same peer with nothing measured yet trips the watchdog floor.
    #[test]
    fn patience_follows_the_measured_rate() {
        let run = |seed_ps_per_byte: u64| {
            let port = DoublePort::new();
            port.set_behaviour(Behaviour::TrickleMs(40));
            port.add_region(1, 0, pattern(64 * 8));
            let mut sink = VecSink(Vec::new());
            let stats = Stats::default();
            stats
                .completion_ps_per_byte
                .store(seed_ps_per_byte, Ordering::Relaxed);
            let deadlines = Deadlines {
                watchdog: Duration::from_millis(20),
                flush_wait: Duration::from_secs(5),
                // 512 bytes at 100 000 B/s: 25 ms in total by size alone.
                min_rate: 100_000,
            };
            let (r, _q) = transfer(
                &port,
                shape(64, 2),
                Direction::Read(&mut sink),
                64 * 8,
                Remote { addr: 0, rkey: 1 },
                deadlines,
                &stats,
            );
            (r, sink.0, stats)
        };
        // 64 bytes per 40 ms measured: 625 000 000 ps per byte.
        let (r, got, stats) = run(625_000_000);
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(got, pattern(64 * 8));
        assert_eq!(stats.watchdog_fired.load(Ordering::Relaxed), 0);
        assert!(stats.completion_ps_per_byte.load(Ordering::Relaxed) > 0);
        let (r, _, stats) = run(0);
        assert!(matches!(r, Err(TransferError::Watchdog)), "{r:?}");
        assert_eq!(stats.watchdog_fired.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn source_error_aborts_after_draining() {
        struct Broken;
        impl ChunkSource for Broken {
            fn fill(&mut self, _: &mut [u8]) -> io::Result<()> {
                Err(io::Error::other("disk on fire"))
            }
        }
        let port = DoublePort::new();
        let (r, _q) = transfer(
            &port,
            shape(64, 2),
            Direction::Write(&mut Broken),
            100,
            Remote { addr: 0, rkey: 1 },
            DEADLINES,
            &Stats::default(),
        );
        assert!(matches!(r, Err(TransferError::LocalIo(_))));
        assert!(port.posted().is_empty(), "nothing unfilled is posted");
    }

    #[test]
    fn sink_error_aborts_and_flushes_what_is_posted() {
        struct FailSecond(u32);
        impl ChunkSink for FailSecond {
            fn drain(&mut self, _: &[u8]) -> io::Result<()> {
                self.0 += 1;
                if self.0 == 2 {
                    return Err(io::Error::other("disk full"));
                }
                Ok(())
            }
        }
        let port = DoublePort::new();
        port.add_region(1, 0, pattern(64 * 50));
        let mut sink = FailSecond(0);
        let stats = Stats::default();
        let (r, mut q) = transfer(
            &port,
            shape(64, 4),
            Direction::Read(&mut sink),
            64 * 50,
            Remote { addr: 0, rkey: 1 },
            DEADLINES,
            &stats,
        );
        assert!(matches!(r, Err(TransferError::LocalIo(_))));
        assert_eq!(sink.0, 2, "nothing drained after the failure");
        assert!(port.log().contains(&QpLog::ToError(q.qp_num())));
        assert_eq!(stats.flush_timeouts.load(Ordering::Relaxed), 0);
        let mut rest = Vec::new();
        q.poll(&mut rest).expect("poll");
        assert!(rest.is_empty());
    }
}
