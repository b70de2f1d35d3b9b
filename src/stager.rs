//! The stager actor: runs every host<->device staging copy.
//!
//! A call hands a copy to the stager (`hipobj-stager`) with a [`Ticket`] and waits for it until the
//! staging deadline (`HIPOBJ_STAGE_TIMEOUT_MS`). The stager starts the copy on the GPU runtime and,
//! since the runtime only offers a query (`hipEventQuery`), asks it again after a wait that grows
//! with the age of the youngest copy ([`next_poll`]: a quarter of it, at least 10 us, at most 5 ms;
//! at most 1 s once the handle is dropped): no busy polling, and a copy's end is seen within 25 % of
//! its duration. While nothing runs, the stager sleeps on its inbox. When a copy ends, the ticket
//! learns the result. A copy whose caller gave up keeps running: the stager keeps the buffer's
//! registry entry (and so its staging memory) alive until the copy ends, and the ticket keeps the
//! buffer busy until then, even across shutdown; the thread ends when its handle is gone and its last
//! copy has ended (a copy that never ends costs one query a second).

use crate::error::{Error, Result};
use crate::hip::{CopyDirection, CopyInFlight, CopyStatus, GpuRuntime};
use crate::registry::Buffer;
use hipobj_actors::registry::{Entry, UseGuard};
use hipobj_actors::staging::{Outcome, Ticket};
use hipobj_actors::sync::channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A registration payload that may have a host staging buffer.
pub trait Staged: Send + Sync + 'static {
    /// For a staged buffer: (device address, staging address) at `offset`; `None` when not staged.
    fn staging_pair(&self, offset: usize) -> Option<(usize, usize)>;
}

impl Staged for Buffer {
    fn staging_pair(&self, offset: usize) -> Option<(usize, usize)> {
        Buffer::staging_pair(self, offset)
    }
}

/// Shortest and longest waits between two queries of the running copies.
const MIN_POLL: Duration = Duration::from_micros(10);
const MAX_POLL: Duration = Duration::from_millis(5);
/// Longest wait once the handle is gone (only copies whose callers gave up are left).
const MAX_POLL_CLOSED: Duration = Duration::from_secs(1);

/// How long to wait before querying again, given the age of the youngest running copy: a quarter
/// of it, within [`MIN_POLL`] and the cap.
pub fn next_poll(youngest_age: Duration, inbox_open: bool) -> Duration {
    let cap = if inbox_open {
        MAX_POLL
    } else {
        MAX_POLL_CLOSED
    };
    (youngest_age / 4).clamp(MIN_POLL, cap)
}

struct CopyJob<P> {
    entry: Arc<Entry<P>>,
    direction: CopyDirection,
    offset: usize,
    len: usize,
    ticket: Arc<Ticket<P>>,
}

struct Running<P> {
    copy: CopyInFlight,
    ticket: Arc<Ticket<P>>,
    // Keeps the staging memory alive while the copy may touch it.
    _entry: Arc<Entry<P>>,
}

/// The stager's handle. Dropping it closes the inbox; the stager thread then exits once every copy
/// it runs has ended (it is detached, never joined: a copy may never end).
pub struct StagerHandle<P: Staged = Buffer> {
    inbox: Sender<CopyJob<P>>,
}

impl<P: Staged> StagerHandle<P> {
    pub fn spawn(gpu: Arc<dyn GpuRuntime>, device: i32) -> Result<StagerHandle<P>> {
        let (tx, rx) = unbounded();
        std::thread::Builder::new()
            .name("hipobj-stager".into())
            .spawn(move || {
                Stager {
                    gpu,
                    device,
                    running: Vec::new(),
                    youngest: Instant::now(),
                }
                .run(rx)
            })
            .map_err(|e| Error::internal(format!("cannot start the stager thread: {e}")))?;
        Ok(StagerHandle { inbox: tx })
    }

    /// Copy `len` bytes at `offset` of the buffer between its device memory and its staging buffer,
    /// waiting at most `timeout`. On a timeout the copy keeps running, the buffer stays busy until it
    /// ends, and the call gets `hipObjInternalError`. The use guard comes back on success.
    pub fn copy(
        &self,
        use_guard: UseGuard<P>,
        direction: CopyDirection,
        offset: usize,
        len: usize,
        timeout: Duration,
    ) -> Result<UseGuard<P>> {
        let ticket = Ticket::new();
        let deadline = Instant::now() + timeout;
        let job = CopyJob {
            entry: use_guard.entry().clone(),
            direction,
            offset,
            len,
            ticket: ticket.clone(),
        };
        self.inbox
            .send(job)
            .map_err(|_| Error::internal("the stager has stopped"))?;
        match ticket.wait_until(deadline, use_guard) {
            (Outcome::Finished(Ok(())), Some(guard)) => Ok(guard),
            (Outcome::Finished(Err(code)), _) => Err(Error::internal(format!(
                "staging copy of {len} bytes failed (hipError {code})"
            ))),
            (Outcome::TimedOut, _) | (Outcome::Finished(Ok(())), None) => {
                tracing::warn!(
                    len,
                    timeout_ms = timeout.as_millis() as u64,
                    "staging copy did not complete in time; it keeps running and the buffer stays busy until it ends"
                );
                Err(Error::internal(format!(
                    "staging copy of {len} bytes did not complete within {} ms",
                    timeout.as_millis()
                )))
            }
        }
    }
}

struct Stager<P> {
    gpu: Arc<dyn GpuRuntime>,
    device: i32,
    running: Vec<Running<P>>,
    /// When the youngest running copy started.
    youngest: Instant,
}

impl<P: Staged> Stager<P> {
    fn run(mut self, inbox: Receiver<CopyJob<P>>) {
        if let Err(e) = self.gpu.set_device(self.device) {
            tracing::warn!(device = self.device, "stager could not select the GPU: {e}");
        }
        let mut open = true;
        while open || !self.running.is_empty() {
            let next = if self.running.is_empty() {
                // Nothing to query: sleep until a job comes or the handle goes.
                inbox.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                let wait = next_poll(self.youngest.elapsed(), open);
                if open {
                    inbox.recv_timeout(wait)
                } else {
                    std::thread::sleep(wait);
                    Err(RecvTimeoutError::Timeout)
                }
            };
            match next {
                Ok(job) => self.start(job),
                Err(RecvTimeoutError::Disconnected) => open = false,
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.poll();
        }
    }

    fn start(&mut self, job: CopyJob<P>) {
        let buf = job.entry.payload();
        let started = match buf.staging_pair(job.offset) {
            Some((device_ptr, host_ptr)) => {
                let (dst, src) = match job.direction {
                    CopyDirection::DeviceToHost => (host_ptr, device_ptr),
                    CopyDirection::HostToDevice => (device_ptr, host_ptr),
                };
                // SAFETY: both ranges lie inside the registration (checked by the caller against its
                // length, which is also the staging buffer's length); the staging memory lives in the
                // registry entry that `Running` keeps until the copy ends; the device memory is the
                // application's, which it keeps allocated while the buffer is registered, and a
                // buffer with a copy running cannot be deregistered.
                unsafe {
                    self.gpu
                        .start_copy(self.device, dst, src, job.len, job.direction)
                }
            }
            None => {
                job.ticket.finish(Ok(()));
                return;
            }
        };
        match started {
            Ok(copy) => {
                self.youngest = Instant::now();
                self.running.push(Running {
                    copy,
                    ticket: job.ticket,
                    _entry: job.entry,
                })
            }
            Err(e) => job.ticket.finish(Err(e.code)),
        }
    }

    fn poll(&mut self) {
        self.running.retain_mut(|r| match r.copy.poll() {
            CopyStatus::Pending => true,
            CopyStatus::Done => {
                r.ticket.finish(Ok(()));
                false
            }
            CopyStatus::Failed(code) => {
                r.ticket.finish(Err(code));
                false
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_back_off_with_the_copy_age_and_never_spin() {
        assert_eq!(next_poll(Duration::ZERO, true), MIN_POLL);
        assert_eq!(
            next_poll(Duration::from_micros(400), true),
            Duration::from_micros(100)
        );
        assert_eq!(next_poll(Duration::from_secs(30), true), MAX_POLL);
        assert_eq!(next_poll(Duration::from_secs(30), false), MAX_POLL_CLOSED);
        // A copy that runs for a minute is queried at most 60 s / 5 ms + log steps times.
        let (mut t, mut queries) = (Duration::ZERO, 0u32);
        while t < Duration::from_secs(60) {
            t += next_poll(t, true);
            queries += 1;
        }
        assert!(queries <= 12_100, "{queries} queries in 60 s");
    }
}

#[cfg(all(test, feature = "sim-gpu"))]
mod sim_tests {
    use super::*;
    use crate::error::OpError;
    use crate::hip::{HostBuffer, SimGpu};
    use hipobj_actors::registry::UseError;

    /// A staged registration without a NIC: device memory of the sim and its host staging buffer.
    struct SimStaged {
        device: usize,
        staging: HostBuffer,
    }

    impl Staged for SimStaged {
        fn staging_pair(&self, offset: usize) -> Option<(usize, usize)> {
            Some((self.device + offset, self.staging.addr() + offset))
        }
    }

    fn staged(sim: &SimGpu, len: usize) -> Arc<Entry<SimStaged>> {
        let device = sim.alloc_device(0, len).expect("device memory");
        let staging = sim.alloc_host(len).expect("staging memory");
        Entry::new(device, len, SimStaged { device, staging })
    }

    #[test]
    fn a_copy_completes_and_hands_the_use_back() {
        let sim = SimGpu::new(1);
        sim.set_device(0).unwrap();
        let stager: StagerHandle<SimStaged> =
            StagerHandle::spawn(sim.clone() as Arc<dyn GpuRuntime>, 0).unwrap();
        let entry = staged(&sim, 4096);
        sim.write(entry.payload().device, &[7u8; 4096]).unwrap();
        let guard = Entry::try_use(&entry).unwrap();
        let guard = stager
            .copy(
                guard,
                CopyDirection::DeviceToHost,
                0,
                4096,
                Duration::from_secs(10),
            )
            .expect("copy");
        drop(guard);
        assert_eq!(
            sim.read(entry.payload().staging.addr(), 4096).unwrap(),
            vec![7u8; 4096]
        );
        assert_eq!(entry.uses(), 0);
    }

    /// A stalled copy: InternalError at the deadline, then Busy until it ends, its staging memory
    /// alive across the handle's drop (shutdown); meanwhile the stager queries it at most a few
    /// times a second and its thread ends once the copy has ended.
    #[test]
    fn a_stalled_copy_is_busy_until_it_ends_and_is_not_spun_on_after_shutdown() {
        let sim = SimGpu::new(1);
        sim.set_device(0).unwrap();
        let stager: StagerHandle<SimStaged> =
            StagerHandle::spawn(sim.clone() as Arc<dyn GpuRuntime>, 0).unwrap();
        let entry = staged(&sim, 4096);
        sim.stall_copies();
        let guard = Entry::try_use(&entry).unwrap();
        let err = stager
            .copy(
                guard,
                CopyDirection::DeviceToHost,
                0,
                4096,
                Duration::from_millis(50),
            )
            .err()
            .expect("timed out");
        assert_eq!(err.code, OpError::InternalError);
        assert_eq!(Entry::try_use(&entry).err(), Some(UseError::Pending));
        drop(stager); // shutdown: the copy still runs
        let before = sim.calls().copy_queries;
        std::thread::sleep(Duration::from_millis(1500));
        let queries = sim.calls().copy_queries - before;
        assert!(
            queries <= 20,
            "{queries} queries of a stalled copy in 1.5 s after shutdown"
        );
        assert_eq!(Entry::try_use(&entry).err(), Some(UseError::Pending));
        assert!(
            Arc::strong_count(&entry) > 1,
            "the stager keeps the registration alive"
        );
        sim.release_copies();
        let deadline = Instant::now() + Duration::from_secs(10);
        while (Arc::strong_count(&sim) > 1 || entry.pending() > 0) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(entry.pending(), 0, "the ended copy freed the buffer");
        assert_eq!(
            Arc::strong_count(&entry),
            1,
            "the stager let the registration go"
        );
        assert_eq!(Arc::strong_count(&sim), 1, "the stager thread ended");
        assert!(Entry::try_use(&entry).is_ok());
    }
}
