//! An in-memory runtime double composed from the actors pieces the way the real runtime composes
//! them, and the API calls the models make on it.
//!
//! - A call: [`Lifecycle::current`] (none: `NotInitialized`), the registry lookup and
//!   [`Entry::try_use`] (retired: `BufNotRegistered`, pending: `Busy`), a pool lease ([`Wait::No`]
//!   inside a callback, else [`Wait::Block`]; busy: `Busy`, closed: `NotInitialized`), the work,
//!   then lease, use and instance are given back in that order.
//! - Shutdown: [`Lifecycle::shutdown`], [`Pool::close`] on the instance it returns, drop.
//! - Deregister: [`Registry::remove`], then the registration (the MR double) is released at once.
//! - A staging copy: a [`Ticket`] shared with the copier thread; the caller gives up at an arbitrary
//!   point ([`Ticket::abandon`]), its use of the buffer then stays pending until the copy finishes.
//!
//! The [`Runtime`]'s `Drop` releases the connections and the registrations still registered and
//! counts itself released; it asserts no call is in flight. A registration's staging memory is
//! released by the [`Buffer`]'s `Drop`, i.e. when the last reference to the registration goes.

use hipobj_actors::callback;
use hipobj_actors::lifecycle::{InitError, Lifecycle};
use hipobj_actors::pool::{AcquireError, Lease, Pool, Wait};
use hipobj_actors::registry::{Entry, Registry, RemoveError, UseError, UseGuard};
use hipobj_actors::staging::{Outcome, Ticket};
use hipobj_actors::sync::channel::Sender;
use hipobj_actors::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc as StdArc;
use std::time::{Duration, Instant};

use crate::resource::Resource;

/// The library state of one model: what the real library keeps in a process-wide static.
pub type Library = Lifecycle<Runtime>;

/// The C API's answers that the models can see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiError {
    NotInitialized,
    AlreadyInitialized,
    BufNotRegistered,
    Busy,
    /// The staging copy did not finish in time (hipObjInternalError in the C API).
    StagingTimedOut,
    /// The copier is gone or the copy failed (hipObjInternalError).
    Internal,
}

/// Which step of a call refused it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// No published instance.
    Instance,
    /// The registry: not registered, retired or pending.
    Buffer,
    /// The pool: busy or closed.
    Connection,
}

/// A refused call: the API's answer and the step that gave it (for the models' coverage).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    pub answer: ApiError,
    pub stage: Stage,
}

impl Refused {
    fn at(stage: Stage) -> impl FnOnce(ApiError) -> Refused {
        move |answer| Refused { answer, stage }
    }
}

/// A registration's payload.
pub struct Buffer {
    /// The NIC registration: released by deregister, or by the runtime's drop (shutdown).
    pub mr: StdArc<Resource>,
    /// Host staging memory: released when the registration's last reference goes.
    pub staging: StdArc<Resource>,
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.staging.free();
    }
}

/// One initialised instance.
pub struct Runtime {
    pub generation: u32,
    pub pool: Arc<Pool>,
    pub registry: Registry<Buffer>,
    connections: Vec<StdArc<Resource>>,
    calls_in_flight: AtomicUsize,
    releases: StdArc<AtomicUsize>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        assert_eq!(
            self.calls_in_flight.load(Ordering::SeqCst),
            0,
            "runtime {} released while a call still runs",
            self.generation
        );
        for connection in &self.connections {
            connection.free();
        }
        for entry in self.registry.entries() {
            entry.payload().mr.free();
        }
        self.releases.fetch_add(1, Ordering::SeqCst);
    }
}

/// What a model asks `init` for.
pub struct Spec {
    pub generation: u32,
    pub connections: usize,
    pub buffers: &'static [usize],
}

/// Handles on an instance's resources that outlive it, for the assertions at the end of a model.
pub struct Probe {
    pub generation: u32,
    releases: StdArc<AtomicUsize>,
    pub connections: Vec<StdArc<Resource>>,
    pub buffers: Vec<(usize, StdArc<Resource>, StdArc<Resource>)>,
}

impl Probe {
    /// How many times the instance was released.
    pub fn releases(&self) -> usize {
        self.releases.load(Ordering::SeqCst)
    }

    /// The instance was released once, and with it every connection and every registration's
    /// MR and staging memory exactly once.
    pub fn assert_all_released_once(&self) {
        assert_eq!(self.releases(), 1, "runtime {} releases", self.generation);
        for c in &self.connections {
            assert_eq!(c.frees(), 1, "connection releases");
        }
        for (base, mr, staging) in &self.buffers {
            assert_eq!(mr.frees(), 1, "MR releases of buffer {base:#x}");
            assert_eq!(staging.frees(), 1, "staging releases of buffer {base:#x}");
        }
    }
}

/// `hipObjInit`: build and publish an instance.
pub fn init(lib: &Library, spec: &Spec) -> Result<Probe, ApiError> {
    let releases = StdArc::new(AtomicUsize::new(0));
    let connections: Vec<_> = (0..spec.connections)
        .map(|_| Resource::new("connection"))
        .collect();
    let buffers: Vec<_> = spec
        .buffers
        .iter()
        .map(|&base| (base, Resource::new("MR"), Resource::new("staging memory")))
        .collect();
    let probe = Probe {
        generation: spec.generation,
        releases: releases.clone(),
        connections: connections.clone(),
        buffers: buffers.clone(),
    };
    let built = lib.init(|| {
        let registry = Registry::new();
        for (base, mr, staging) in buffers {
            let payload = Buffer { mr, staging };
            if registry.insert(Entry::new(base, 64, payload)).is_err() {
                return Err(());
            }
        }
        Ok::<_, ()>(Arc::new(Runtime {
            generation: spec.generation,
            pool: Pool::new(spec.connections),
            registry,
            connections,
            calls_in_flight: AtomicUsize::new(0),
            releases,
        }))
    });
    match built {
        Ok(_instance) => Ok(probe),
        Err(InitError::AlreadyInitialized) => Err(ApiError::AlreadyInitialized),
        Err(InitError::Failed(())) => Err(ApiError::Internal),
    }
}

/// `hipObjShutdown`: unpublish, wake the waiters, let the last call release the instance.
/// Whether an instance was published.
pub fn shutdown(lib: &Library) -> bool {
    match lib.shutdown() {
        Some(instance) => {
            instance.pool.close();
            true
        }
        None => false,
    }
}

/// One API call's hold on the instance; counted in the runtime's calls in flight.
struct CallScope {
    runtime: Arc<Runtime>,
}

impl CallScope {
    fn enter(lib: &Library) -> Result<CallScope, ApiError> {
        let runtime = lib.current().ok_or(ApiError::NotInitialized)?;
        runtime.calls_in_flight.fetch_add(1, Ordering::SeqCst);
        Ok(CallScope { runtime })
    }

    fn use_buffer(&self, base: usize) -> Result<UseGuard<Buffer>, ApiError> {
        let entry = self
            .runtime
            .registry
            .lookup(base)
            .ok_or(ApiError::BufNotRegistered)?;
        Entry::try_use(&entry).map_err(|e| match e {
            UseError::Retired => ApiError::BufNotRegistered,
            UseError::Pending => ApiError::Busy,
        })
    }
}

impl Drop for CallScope {
    fn drop(&mut self) {
        self.runtime.calls_in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A transfer in progress: instance, use of the buffer, leased connection.
pub struct Transfer {
    lease: Option<Lease>,
    use_guard: Option<UseGuard<Buffer>>,
    scope: CallScope,
}

impl Transfer {
    /// Start a transfer on the buffer based at `base`, as `hipObjGet`/`hipObjPut` do.
    pub fn begin(lib: &Library, base: usize) -> Result<Transfer, Refused> {
        let scope = CallScope::enter(lib).map_err(Refused::at(Stage::Instance))?;
        let use_guard = scope.use_buffer(base).map_err(Refused::at(Stage::Buffer))?;
        let wait = if callback::in_callback() {
            Wait::No
        } else {
            Wait::Block
        };
        let lease = Pool::acquire(&scope.runtime.pool, wait)
            .map_err(|e| match e {
                AcquireError::Busy => ApiError::Busy,
                AcquireError::Closed => ApiError::NotInitialized,
            })
            .map_err(Refused::at(Stage::Connection))?;
        Ok(Transfer {
            lease: Some(lease),
            use_guard: Some(use_guard),
            scope,
        })
    }

    /// Move data: the connection exclusively, the registration shared; the buffer must be live.
    pub fn run(&self) {
        let runtime = &self.scope.runtime;
        if let (Some(lease), Some(use_guard)) = (&self.lease, &self.use_guard) {
            let entry = use_guard.entry();
            assert!(!entry.is_retired(), "a transfer runs on a retired buffer");
            runtime.connections[lease.slot()].write();
            entry.payload().mr.read();
            assert!(
                !entry.is_retired(),
                "the buffer was retired under a transfer"
            );
        }
    }

    pub fn generation(&self) -> u32 {
        self.scope.runtime.generation
    }

    pub fn slot(&self) -> Option<usize> {
        self.lease.as_ref().map(Lease::slot)
    }
}

impl Drop for Transfer {
    fn drop(&mut self) {
        // The connection goes back first, then the buffer, then (with `scope`) the instance.
        self.lease.take();
        self.use_guard.take();
    }
}

/// A whole `hipObjGet`/`hipObjPut`: the instance's generation on success.
pub fn transfer(lib: &Library, base: usize) -> Result<u32, ApiError> {
    transfer_explained(lib, base).map_err(|r| r.answer)
}

/// [`transfer`], saying which step refused it.
pub fn transfer_explained(lib: &Library, base: usize) -> Result<u32, Refused> {
    let call = Transfer::begin(lib, base)?;
    call.run();
    Ok(call.generation())
}

/// `hipObjBufDeregister`.
pub fn deregister(lib: &Library, base: usize) -> Result<(), ApiError> {
    let scope = CallScope::enter(lib)?;
    match scope.runtime.registry.remove(base) {
        Ok(entry) => {
            entry.payload().mr.free();
            Ok(())
        }
        Err(RemoveError::NotRegistered) => Err(ApiError::BufNotRegistered),
        Err(RemoveError::Busy) => Err(ApiError::Busy),
    }
}

/// A staging copy handed to the copier thread: the ticket and the staging memory's address (the
/// job does not keep the memory alive; the use or pending mark on the registration does).
pub struct CopyJob {
    ticket: Arc<Ticket<Buffer>>,
    staging: StdArc<Resource>,
}

impl CopyJob {
    /// The copier: write the staging memory, then report the end of the copy.
    pub fn run(self) {
        self.copy();
        self.finish();
    }

    /// The copy itself: writes the staging memory.
    pub fn copy(&self) {
        self.staging.write();
    }

    /// Report the end of the copy (after which the staging memory may go).
    pub fn finish(self) {
        self.ticket.finish(Ok(()));
    }
}

/// When a staging call's deadline passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deadline {
    /// At an arbitrary point (loom picks): the copy may or may not have finished by then.
    AnyTime,
    /// Not before the copy finishes: the call waits in [`Ticket::wait_until`].
    AfterTheCopy,
}

/// `hipObjBufSync` on a staged buffer: `Ok` if the copy finished by the deadline, else
/// `StagingTimedOut` and the copy keeps running.
pub fn buf_sync(
    lib: &Library,
    base: usize,
    copier: &Sender<CopyJob>,
    deadline: Deadline,
) -> Result<(), ApiError> {
    let scope = CallScope::enter(lib)?;
    let use_guard = scope.use_buffer(base)?;
    let ticket = Ticket::new();
    let job = CopyJob {
        ticket: ticket.clone(),
        staging: use_guard.entry().payload().staging.clone(),
    };
    if copier.send(job).is_err() {
        return Err(ApiError::Internal);
    }
    let (outcome, _use_guard_back) = match deadline {
        Deadline::AnyTime => ticket.abandon(use_guard),
        Deadline::AfterTheCopy => {
            // Far enough that it never passes in a model; loom has no time, so the wait ends only
            // when `finish` notifies.
            let far = Instant::now() + Duration::from_secs(3600);
            ticket.wait_until(far, use_guard)
        }
    };
    match outcome {
        Outcome::Finished(Ok(())) => Ok(()),
        Outcome::Finished(Err(_)) => Err(ApiError::Internal),
        Outcome::TimedOut => Err(ApiError::StagingTimedOut),
    }
}

/// loom's `thread::spawn` does not require `Send`, so the compiler checks here what the models
/// move between threads and share.
#[allow(dead_code)]
fn shared_between_threads() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<Transfer>();
    send::<CopyJob>();
    send::<Refused>();
    send_sync::<Runtime>();
    send_sync::<Library>();
}
