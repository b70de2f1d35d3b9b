//! The stager actor: runs every host<->device staging copy.
//!
//! A call hands a copy to the stager (`hipobj-stager`) with a [`Ticket`] and waits for it until the
//! staging deadline (`HIPOBJ_STAGE_TIMEOUT_MS`). The stager starts the copy on the GPU runtime and
//! polls it; when it ends, the ticket learns the result. A copy whose caller gave up keeps running:
//! the stager keeps the buffer's registry entry (and so its staging memory) alive until the copy ends,
//! and the ticket keeps the buffer busy until then. If a copy never ends, neither does that.

use crate::error::{Error, Result};
use crate::hip::{CopyDirection, CopyInFlight, CopyStatus, GpuRuntime};
use crate::registry::Buffer;
use hipobj_actors::registry::{Entry, UseGuard};
use hipobj_actors::staging::{Outcome, Ticket};
use hipobj_actors::sync::channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the stager needs from a registration: where its device memory and its staging memory are.
/// The registry's [`Buffer`] is the one the library uses; tests of the stager on a GPU without an
/// RDMA device use their own.
pub trait Staged: Send + Sync + 'static {
    /// (device address, staging address) at `offset`, or `None` when the buffer is not staged.
    fn staging_pair(&self, offset: usize) -> Option<(usize, usize)>;
}

impl Staged for Buffer {
    fn staging_pair(&self, offset: usize) -> Option<(usize, usize)> {
        Buffer::staging_pair(self, offset)
    }
}

struct CopyJob<B> {
    entry: Arc<Entry<B>>,
    direction: CopyDirection,
    offset: usize,
    len: usize,
    ticket: Arc<Ticket<B>>,
}

struct Running<B> {
    copy: CopyInFlight,
    ticket: Arc<Ticket<B>>,
    // Keeps the staging memory alive while the copy may touch it.
    _entry: Arc<Entry<B>>,
}

/// The stager's handle. Dropping it closes the inbox; the stager thread then exits once every copy
/// it runs has ended (it is detached, never joined: a copy may never end).
pub struct StagerHandle<B: Staged = Buffer> {
    inbox: Sender<CopyJob<B>>,
}

impl<B: Staged> StagerHandle<B> {
    pub fn spawn(gpu: Arc<dyn GpuRuntime>, device: i32) -> Result<StagerHandle<B>> {
        let (tx, rx) = unbounded();
        std::thread::Builder::new()
            .name("hipobj-stager".into())
            .spawn(move || {
                Stager {
                    gpu,
                    device,
                    running: Vec::new(),
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
        use_guard: UseGuard<B>,
        direction: CopyDirection,
        offset: usize,
        len: usize,
        timeout: Duration,
    ) -> Result<UseGuard<B>> {
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

struct Stager<B> {
    gpu: Arc<dyn GpuRuntime>,
    device: i32,
    running: Vec<Running<B>>,
}

impl<B: Staged> Stager<B> {
    fn run(mut self, inbox: Receiver<CopyJob<B>>) {
        if let Err(e) = self.gpu.set_device(self.device) {
            tracing::warn!(device = self.device, "stager could not select the GPU: {e}");
        }
        let mut open = true;
        while open || !self.running.is_empty() {
            let next = if self.running.is_empty() {
                inbox.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else if open {
                inbox.recv_timeout(Duration::from_micros(200))
            } else {
                std::thread::sleep(Duration::from_micros(200));
                Err(RecvTimeoutError::Timeout)
            };
            match next {
                Ok(job) => self.start(job),
                Err(RecvTimeoutError::Disconnected) => open = false,
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.poll();
        }
    }

    fn start(&mut self, job: CopyJob<B>) {
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
            Ok(copy) => self.running.push(Running {
                copy,
                ticket: job.ticket,
                _entry: job.entry,
            }),
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
