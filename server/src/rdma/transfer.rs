//! One RDMA transfer over a paired QP (PROTOCOL.md section 4, rules 4 and 5): split into work
//! requests no larger than the chunk size, keep several in flight through a ring of staging
//! slots, succeed only when every request completed successfully; on an error completion or
//! when no completion arrived for the watchdog time, move the QP to ERR and wait for the flushes.
//!
//! Bytes enter and leave strictly in order: a GET fills slot after slot from its source; a PUT
//! hands chunk after chunk to its sink, in chunk order even if completions arrived out of order.

use std::io;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::port::{PortError, RdmaOp, RdmaQp, StagingBuffer, WorkCompletion, WorkRequest};
use crate::stats::Stats;

/// How a transfer is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Bytes per work request (never above the port's max_msg_sz).
    pub chunk: u32,
    /// Work requests in flight (never above the staging slots; READs also <= max_rd_atomic).
    pub depth: usize,
}

impl Shape {
    /// The shape for `op` given the settings and the port's limits.
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
        let depth = match op {
            RdmaOp::Write => wr_depth,
            RdmaOp::Read => wr_depth.min(usize::from(max_rd_atomic)),
        };
        Shape {
            chunk,
            depth: depth.max(1),
        }
    }

    /// Staging bytes this shape needs.
    pub fn staging_len(&self) -> usize {
        self.chunk as usize * self.depth
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
}

/// Where a GET's bytes come from, in order.
pub trait ChunkSource {
    fn fill(&mut self, buf: &mut [u8]) -> io::Result<()>;
}

/// Where a PUT's bytes go, in order.
pub trait ChunkSink {
    fn drain(&mut self, data: &[u8]) -> io::Result<()>;
}

impl<R: io::Read> ChunkSource for R {
    fn fill(&mut self, buf: &mut [u8]) -> io::Result<()> {
        self.read_exact(buf)
    }
}

/// The operation and its local end.
pub enum Direction<'a> {
    Write(&'a mut dyn ChunkSource),
    Read(&'a mut dyn ChunkSink),
}

impl Direction<'_> {
    fn op(&self) -> RdmaOp {
        match self {
            Direction::Write(_) => RdmaOp::Write,
            Direction::Read(_) => RdmaOp::Read,
        }
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
    /// Abort when no completion arrived for this long.
    pub watchdog: Duration,
    /// After ERR, wait at most this long for the flushes.
    pub flush_wait: Duration,
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
            TransferError::LocalIo(e) => write!(f, "local i/o failed: {e}"),
            TransferError::Staging => f.write_str("staging buffer too small"),
        }
    }
}

/// Empty polls before the poller starts sleeping between polls.
const SPIN_POLLS: u32 = 64;
const IDLE_SLEEP: Duration = Duration::from_micros(50);

/// Move `total` bytes between `dir`'s local end and `remote` through `qp`. Returns only when no
/// work request of this transfer is outstanding any more (or, after a failure, when the flush
/// wait ran out: the caller must then destroy the QP before reusing `staging`).
#[allow(clippy::too_many_arguments)]
pub fn run<Q: RdmaQp>(
    qp: &mut Q,
    staging: &mut Q::Buffer,
    shape: Shape,
    mut dir: Direction<'_>,
    total: u64,
    remote: Remote,
    deadlines: Deadlines,
    stats: &Stats,
) -> Result<(), TransferError> {
    let op = dir.op();
    let chunk = u64::from(shape.chunk);
    if staging.bytes().len() < shape.staging_len() {
        return Err(TransferError::Staging);
    }
    let n = shape.chunks(total);
    let depth = shape.depth as u64;
    let mut done = vec![false; shape.depth];
    let mut next_post = 0u64; // chunks posted
    let mut next_retire = 0u64; // chunks completed and handed on, in order
    let mut completions = 0u64; // completions seen, any status
    let mut polled: Vec<WorkCompletion> = Vec::with_capacity(shape.depth);
    let mut last_progress = Instant::now();
    let mut empty_polls = 0u32;

    let result: Result<(), TransferError> = 'transfer: loop {
        if next_retire == n {
            break Ok(());
        }
        // Fill the window.
        while next_post < n && next_post - next_retire < depth {
            let slot = (next_post % depth) as usize;
            let offset = slot * shape.chunk as usize;
            let len = shape.chunk_len(total, next_post);
            if let Direction::Write(source) = &mut dir {
                let area = &mut staging.bytes_mut()[offset..offset + len as usize];
                if let Err(e) = source.fill(area) {
                    break 'transfer Err(TransferError::LocalIo(e));
                }
            }
            let wr = WorkRequest {
                op,
                wr_id: next_post,
                local_offset: offset,
                len,
                remote_addr: remote.addr.wrapping_add(next_post * chunk),
                rkey: remote.rkey,
            };
            if let Err(e) = qp.post(&wr, staging) {
                break 'transfer Err(TransferError::Post(e));
            }
            Stats::bump(&stats.work_requests);
            next_post += 1;
        }
        // Collect completions.
        polled.clear();
        if let Err(e) = qp.poll(&mut polled) {
            break 'transfer Err(TransferError::Poll(e));
        }
        for wc in &polled {
            completions += 1;
            if wc.status != 0 {
                break 'transfer Err(TransferError::Completion {
                    wr_id: wc.wr_id,
                    status: wc.status,
                    vendor_err: wc.vendor_err,
                });
            }
            if wc.wr_id < next_retire || wc.wr_id >= next_post {
                warn!(
                    wr_id = wc.wr_id,
                    "completion for a work request not in flight; ignored"
                );
                continue;
            }
            done[(wc.wr_id % depth) as usize] = true;
        }
        // Retire finished chunks in order.
        while next_retire < next_post && done[(next_retire % depth) as usize] {
            let slot = (next_retire % depth) as usize;
            done[slot] = false;
            if let Direction::Read(sink) = &mut dir {
                let offset = slot * shape.chunk as usize;
                let len = shape.chunk_len(total, next_retire) as usize;
                if let Err(e) = sink.drain(&staging.bytes()[offset..offset + len]) {
                    break 'transfer Err(TransferError::LocalIo(e));
                }
            }
            next_retire += 1;
        }
        if polled.is_empty() {
            if last_progress.elapsed() >= deadlines.watchdog {
                Stats::bump(&stats.watchdog_fired);
                break 'transfer Err(TransferError::Watchdog);
            }
            idle(&mut empty_polls);
        } else {
            last_progress = Instant::now();
            empty_polls = 0;
        }
    };

    if let Err(e) = &result {
        if matches!(e, TransferError::Completion { .. }) {
            Stats::bump(&stats.completion_errors);
        }
        debug!(error = %e, posted = next_post, completions, "transfer failed; moving QP to ERR");
        if let Err(e) = qp.to_error() {
            warn!(error = %e, "moving the QP to ERR failed");
        }
        let outstanding = next_post - completions;
        if !drain_flushes(qp, outstanding, deadlines.flush_wait, &mut polled) {
            warn!(
                outstanding,
                "flushes did not all arrive in time; the QP will be destroyed"
            );
        }
    }
    result
}

/// Poll until `outstanding` more completions (flushes) arrived; false if the wait ran out.
fn drain_flushes<Q: RdmaQp>(
    qp: &mut Q,
    mut outstanding: u64,
    wait: Duration,
    polled: &mut Vec<WorkCompletion>,
) -> bool {
    let started = Instant::now();
    let mut empty_polls = 0u32;
    while outstanding > 0 {
        polled.clear();
        if qp.poll(polled).is_err() {
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

    struct VecSink(Vec<u8>);
    impl ChunkSink for VecSink {
        fn drain(&mut self, data: &[u8]) -> io::Result<()> {
            self.0.extend_from_slice(data);
            Ok(())
        }
    }

    const DEADLINES: Deadlines = Deadlines {
        watchdog: Duration::from_millis(200),
        flush_wait: Duration::from_millis(200),
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

    #[test]
    fn shape_respects_limits() {
        let s = Shape::new(RdmaOp::Write, 1 << 20, 1 << 23, 8, 4);
        assert_eq!(
            s,
            Shape {
                chunk: 1 << 20,
                depth: 8
            }
        );
        let s = Shape::new(RdmaOp::Read, 1 << 24, 1 << 23, 8, 4);
        assert_eq!(
            s,
            Shape {
                chunk: 1 << 23,
                depth: 4
            }
        );
        let s = Shape::new(RdmaOp::Write, 1000, 4096, 3, 0);
        assert_eq!(s.chunks(0), 0);
        assert_eq!(s.chunks(1), 1);
        assert_eq!(s.chunks(1000), 1);
        assert_eq!(s.chunks(1001), 2);
        assert_eq!(s.chunk_len(2500, 0), 1000);
        assert_eq!(s.chunk_len(2500, 2), 500);
        assert_eq!(s.staging_len(), 3000);
    }

    #[test]
    fn write_moves_every_byte_in_bounded_chunks_and_window() {
        let port = DoublePort::new();
        let data = pattern(10_000);
        port.add_region(77, 0x1000, vec![0; 12_000]);
        let shape = Shape {
            chunk: 1024,
            depth: 3,
        };
        let mut staging = port.alloc_staging(shape.staging_len()).expect("staging");
        let mut q = qp(&port);
        let mut src: &[u8] = &data;
        let stats = Stats::default();
        run(
            &mut q,
            &mut staging,
            shape,
            Direction::Write(&mut src),
            10_000,
            Remote {
                addr: 0x1000 + 100,
                rkey: 77,
            },
            DEADLINES,
            &stats,
        )
        .expect("transfer");
        let mem = port.region(77);
        assert_eq!(&mem[100..10_100], &data[..]);
        assert!(mem[..100].iter().all(|&b| b == 0) && mem[10_100..].iter().all(|&b| b == 0));
        let posted = port.posted();
        assert_eq!(posted.len(), 10);
        assert!(posted
            .iter()
            .all(|wr| wr.len <= 1024 && wr.op == RdmaOp::Write));
        assert_eq!(port.max_outstanding(), 3);
        assert_eq!(
            stats
                .work_requests
                .load(std::sync::atomic::Ordering::Relaxed),
            10
        );
    }

    #[test]
    fn read_hands_chunks_to_the_sink_in_order() {
        let port = DoublePort::new();
        let data = pattern(5000);
        port.add_region(5, 0x9000, data.clone());
        let shape = Shape {
            chunk: 700,
            depth: 4,
        };
        let mut staging = port.alloc_staging(shape.staging_len()).expect("staging");
        let mut q = qp(&port);
        let mut sink = VecSink(Vec::new());
        let stats = Stats::default();
        run(
            &mut q,
            &mut staging,
            shape,
            Direction::Read(&mut sink),
            5000,
            Remote {
                addr: 0x9000,
                rkey: 5,
            },
            DEADLINES,
            &stats,
        )
        .expect("transfer");
        assert_eq!(sink.0, data);
        assert!(port.max_outstanding() <= 4);
    }

    #[test]
    fn zero_bytes_posts_nothing() {
        let port = DoublePort::new();
        let shape = Shape {
            chunk: 64,
            depth: 2,
        };
        let mut staging = port.alloc_staging(shape.staging_len()).expect("staging");
        let mut q = qp(&port);
        let mut src: &[u8] = &[];
        run(
            &mut q,
            &mut staging,
            shape,
            Direction::Write(&mut src),
            0,
            Remote { addr: 0, rkey: 0 },
            DEADLINES,
            &Stats::default(),
        )
        .expect("empty transfer");
        assert!(port.posted().is_empty());
    }

    #[test]
    fn error_completion_moves_qp_to_err_and_drains() {
        let port = DoublePort::new();
        port.set_behaviour(Behaviour::FailWr(2));
        port.add_region(1, 0, vec![0; 8192]);
        let shape = Shape {
            chunk: 512,
            depth: 4,
        };
        let mut staging = port.alloc_staging(shape.staging_len()).expect("staging");
        let mut q = qp(&port);
        let data = pattern(8192);
        let mut src: &[u8] = &data;
        let stats = Stats::default();
        let err = run(
            &mut q,
            &mut staging,
            shape,
            Direction::Write(&mut src),
            8192,
            Remote { addr: 0, rkey: 1 },
            DEADLINES,
            &stats,
        )
        .expect_err("must fail");
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
        assert_eq!(
            stats
                .completion_errors
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        // Every posted request was accounted for: nothing outstanding is left on the QP.
        let mut rest = Vec::new();
        q.poll(&mut rest).expect("poll");
        assert!(rest.is_empty());
    }

    #[test]
    fn watchdog_fires_when_nothing_completes() {
        let port = DoublePort::new();
        port.set_behaviour(Behaviour::Hang);
        port.add_region(1, 0, vec![0; 4096]);
        let shape = Shape {
            chunk: 1024,
            depth: 2,
        };
        let mut staging = port.alloc_staging(shape.staging_len()).expect("staging");
        let mut q = qp(&port);
        let data = pattern(4096);
        let mut src: &[u8] = &data;
        let stats = Stats::default();
        let deadlines = Deadlines {
            watchdog: Duration::from_millis(30),
            flush_wait: Duration::from_secs(5),
        };
        let err = run(
            &mut q,
            &mut staging,
            shape,
            Direction::Write(&mut src),
            4096,
            Remote { addr: 0, rkey: 1 },
            deadlines,
            &stats,
        )
        .expect_err("must fail");
        assert!(matches!(err, TransferError::Watchdog));
        assert_eq!(
            stats
                .watchdog_fired
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        assert!(port.log().contains(&QpLog::ToError(q.qp_num())));
        // Both posted requests flushed before `run` returned.
        let mut rest = Vec::new();
        q.poll(&mut rest).expect("poll");
        assert!(rest.is_empty());
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
        let shape = Shape {
            chunk: 64,
            depth: 2,
        };
        let mut staging = port.alloc_staging(shape.staging_len()).expect("staging");
        let mut q = qp(&port);
        let err = run(
            &mut q,
            &mut staging,
            shape,
            Direction::Write(&mut Broken),
            100,
            Remote { addr: 0, rkey: 1 },
            DEADLINES,
            &Stats::default(),
        )
        .expect_err("must fail");
        assert!(matches!(err, TransferError::LocalIo(_)));
    }
}
