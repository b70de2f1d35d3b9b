//! The library under the models: the real composition of `hipobj_actors` (the supervisor actor,
//! its registry writer and snapshots, the pool, [`transfer::run`], the staging ticket), with doubles
//! only at the edges that need RDMA or a GPU:
//!
//! - [`Runtime`]: an instance whose pool holds [`Resource`]s by value (a QP the exchange writes) and
//!   whose registrations hold the application's memory, an MR and staging memory, each a
//!   [`Resource`]. It implements the supervisor's [`Instance`] and the transfer's
//!   [`TransferParts`] the way `hipobj::runtime::Runtime` does, with the exchange reduced to "write
//!   the connection, read the memory and the MR, run the application's callback, and have the
//!   server read (PUT) or write (GET) the staging memory".
//! - The MR and the staging memory are released by the registration's `Drop`, i.e. when its last
//!   reference goes (the library's `ibv_dereg_mr` and staging free). The application's memory is
//!   released by the model as soon as deregister returns `Ok` (what an application may do).
//! - A staging copy is a [`CopyJob`] that a model's copier thread runs (the GPU edge), with the real
//!   [`Ticket`].
//!
//! The instance's `Drop` releases the connections and counts itself released; it asserts no call is
//! in flight.

use hipobj_actors::callback::CallbackGuard;
use hipobj_actors::pool::{Lease, Pool};
use hipobj_actors::registry::{Entry, Registry, UseGuard};
use hipobj_actors::staging::{Outcome, Ticket};
use hipobj_actors::supervisor::{DeregisterError, InitError, Instance, RegisterError, Supervisor};
use hipobj_actors::sync::channel::Sender;
use hipobj_actors::sync::{thread, Arc, ArcCell};
use hipobj_actors::transfer::{self, Direction, Refused as Why, TransferHost, TransferParts};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc as StdArc;
use std::time::{Duration, Instant};

use crate::resource::Resource;

/// The C API's answers that the models can see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiError {
    NotInitialized,
    AlreadyInitialized,
    BufNotRegistered,
    BufAlreadyRegistered,
    InvalidValue,
    Busy,
    /// The staging copy did not finish in time (hipObjInternalError in the C API).
    StagingTimedOut,
    /// The supervisor or the copier failed, or the copy failed (hipObjInternalError).
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
    /// The application's memory: the model releases it when deregister returns `Ok`.
    pub memory: StdArc<Resource>,
    /// The NIC registration: released with the registration's last reference.
    pub mr: StdArc<Resource>,
    /// Host staging memory: released with the registration's last reference.
    pub staging: StdArc<Resource>,
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.mr.free();
        self.staging.free();
    }
}

/// One initialised instance.
pub struct Runtime {
    pub generation: u32,
    /// Each leased connection moves to the transfer that leased it.
    pub pool: Arc<Pool<StdArc<Resource>>>,
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
        self.releases.fetch_add(1, Ordering::SeqCst);
    }
}

impl Instance for Runtime {
    type Payload = Buffer;

    fn registry(&self) -> &Registry<Buffer> {
        &self.registry
    }

    fn close(&self) {
        self.pool.close();
    }
}

/// The application's callback during the exchange.
pub type Callback<'a> = dyn FnMut() + 'a;

/// What the exchange gets: the direction and the application's callback.
pub type Exchange<'x, 'a> = (Direction, &'x mut Callback<'a>);

impl TransferHost for Runtime {
    type Payload = Buffer;
    type Error = Refused;
    type Connection = StdArc<Resource>;

    fn registry(&self) -> &Registry<Buffer> {
        &self.registry
    }

    fn pool(&self) -> &Arc<Pool<StdArc<Resource>>> {
        &self.pool
    }

    fn refused(&self, why: Why, _base: usize, _size: usize, _offset: u64) -> Refused {
        match why {
            Why::NotRegistered => Refused::at(Stage::Buffer)(ApiError::BufNotRegistered),
            Why::OutOfRange => Refused::at(Stage::Buffer)(ApiError::InvalidValue),
            Why::Pending => Refused::at(Stage::Buffer)(ApiError::Busy),
            Why::Busy => Refused::at(Stage::Connection)(ApiError::Busy),
            Why::Closed => Refused::at(Stage::Connection)(ApiError::NotInitialized),
        }
    }

    fn stage_out(
        &self,
        guard: UseGuard<Buffer>,
        _offset: usize,
        _size: usize,
    ) -> Result<UseGuard<Buffer>, Refused> {
        Ok(guard)
    }

    fn stage_in(
        &self,
        _guard: UseGuard<Buffer>,
        _offset: usize,
        _size: usize,
    ) -> Result<(), Refused> {
        Ok(())
    }
}

impl<'x, 'a> TransferParts<Exchange<'x, 'a>> for Runtime {
    /// The connection exclusively, the registration shared; the buffer must be live throughout,
    /// the application's callback runs in the middle (with the callback marker raised).
    fn exchange(
        &self,
        connection: &mut StdArc<Resource>,
        direction: Direction,
        buffer: &Entry<Buffer>,
        _offset: usize,
        _size: usize,
        (_, callback): &mut (Direction, &mut Callback<'a>),
    ) -> Result<(), Refused> {
        assert!(!buffer.is_retired(), "a transfer runs on a retired buffer");
        connection.write();
        buffer.payload().memory.read();
        buffer.payload().mr.read();
        {
            let _in_callback = CallbackGuard::enter();
            callback();
        }
        // The server's RDMA READ (PUT) or WRITE (GET) of the staging memory.
        match direction {
            Direction::Put => drop(buffer.payload().staging.read()),
            Direction::Get => buffer.payload().staging.write(),
        }
        buffer.payload().memory.read();
        assert!(
            !buffer.is_retired(),
            "the buffer was retired under a transfer"
        );
        Ok(())
    }

    fn release(&self, lease: Lease<StdArc<Resource>>, _outcome: &Result<(), Refused>) {
        drop(lease);
    }
}

/// The library of one model: its supervisor (on its own loom thread) and where it publishes.
pub struct Library {
    supervisor: Supervisor<Runtime>,
}

impl Default for Library {
    fn default() -> Self {
        Library::new()
    }
}

impl Library {
    /// Start the supervisor; it stops when the library is dropped.
    pub fn new() -> Library {
        let (supervisor, state) = Supervisor::spawn_parts(Arc::new(ArcCell::new(None)));
        thread::spawn(move || state.run());
        Library { supervisor }
    }

    pub fn current(&self) -> Option<Arc<Runtime>> {
        self.supervisor.current()
    }
}

/// What a model asks `init` for.
pub struct Spec {
    pub generation: u32,
    pub connections: usize,
    pub buffers: &'static [usize],
}

/// A buffer's base and its application memory, MR and staging memory.
pub type BufferProbe = (usize, StdArc<Resource>, StdArc<Resource>, StdArc<Resource>);

/// Handles on an instance's resources that outlive it, for the assertions at the end of a model.
pub struct Probe {
    pub generation: u32,
    releases: StdArc<AtomicUsize>,
    pub connections: Vec<StdArc<Resource>>,
    pub buffers: Vec<BufferProbe>,
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
        for (base, _memory, mr, staging) in &self.buffers {
            assert_eq!(mr.frees(), 1, "MR releases of buffer {base:#x}");
            assert_eq!(staging.frees(), 1, "staging releases of buffer {base:#x}");
        }
    }
}

/// `hipObjInit`, then `hipObjBufRegister` of each buffer of the spec.
pub fn init(lib: &Library, spec: &Spec) -> Result<Probe, ApiError> {
    init_with(lib, spec, || {})
}

/// As [`init`], with `during_build` run inside the build (on this thread, holding the build
/// permit), as a slow `hipObjInit` opens its device and starts its threads there.
pub fn init_with(
    lib: &Library,
    spec: &Spec,
    during_build: impl FnOnce(),
) -> Result<Probe, ApiError> {
    let releases = StdArc::new(AtomicUsize::new(0));
    let connections: Vec<_> = (0..spec.connections)
        .map(|_| Resource::new("connection"))
        .collect();
    let buffers: Vec<_> = spec
        .buffers
        .iter()
        .map(|&base| {
            (
                base,
                Resource::new("application memory"),
                Resource::new("MR"),
                Resource::new("staging memory"),
            )
        })
        .collect();
    let probe = Probe {
        generation: spec.generation,
        releases: releases.clone(),
        connections: connections.clone(),
        buffers: buffers.clone(),
    };
    let built = lib.supervisor.init(|| {
        during_build();
        Ok::<_, ()>(Arc::new(Runtime {
            generation: spec.generation,
            pool: Pool::new(connections.clone()),
            registry: Registry::new(),
            connections,
            calls_in_flight: AtomicUsize::new(0),
            releases,
        }))
    });
    let runtime = match built {
        Ok(runtime) => runtime,
        Err(InitError::AlreadyInitialized) => return Err(ApiError::AlreadyInitialized),
        Err(InitError::Failed(())) | Err(InitError::Supervisor(_)) => {
            return Err(ApiError::Internal)
        }
    };
    for (base, memory, mr, staging) in buffers {
        register_on(lib, &runtime, base, memory, mr, staging)?;
    }
    Ok(probe)
}

fn register_on(
    lib: &Library,
    runtime: &Arc<Runtime>,
    base: usize,
    memory: StdArc<Resource>,
    mr: StdArc<Resource>,
    staging: StdArc<Resource>,
) -> Result<(), ApiError> {
    lib.supervisor
        .register(runtime, base, 64, || {
            Ok::<_, ()>(Buffer {
                memory,
                mr,
                staging,
            })
        })
        .map_err(|e| match e {
            RegisterError::AlreadyRegistered => ApiError::BufAlreadyRegistered,
            RegisterError::NotInitialized => ApiError::NotInitialized,
            RegisterError::Pin(()) | RegisterError::Supervisor(_) => ApiError::Internal,
        })
}

/// `hipObjBufRegister` of a new buffer at `base` with its own resources (returned for checks).
pub fn register(
    lib: &Library,
    base: usize,
) -> Result<(StdArc<Resource>, StdArc<Resource>), ApiError> {
    let scope = CallScope::enter(lib)?;
    let (mr, staging) = (Resource::new("MR"), Resource::new("staging memory"));
    register_on(
        lib,
        &scope.runtime,
        base,
        Resource::new("application memory"),
        mr.clone(),
        staging.clone(),
    )?;
    Ok((mr, staging))
}

/// `hipObjShutdown`: whether an instance was published. The instance handed back is dropped
/// here; it is released here or by the last call in flight.
pub fn shutdown(lib: &Library) -> bool {
    match lib.supervisor.shutdown() {
        Ok(Some(retired)) => {
            drop(retired);
            true
        }
        Ok(None) => false,
        Err(fault) => panic!("shutdown: the supervisor failed: {fault:?}"),
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
}

impl Drop for CallScope {
    fn drop(&mut self) {
        self.runtime.calls_in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A whole `hipObjPut`: the instance's generation on success.
pub fn transfer(lib: &Library, base: usize) -> Result<u32, ApiError> {
    transfer_explained(lib, base).map_err(|r| r.answer)
}

/// A whole `hipObjGet` (the server writes the staging memory).
pub fn get(lib: &Library, base: usize) -> Result<u32, ApiError> {
    run(lib, base, Direction::Get, &mut || {}).map_err(|r| r.answer)
}

/// [`transfer`], saying which step refused it.
pub fn transfer_explained(lib: &Library, base: usize) -> Result<u32, Refused> {
    transfer_with(lib, base, &mut || {})
}

/// [`transfer_explained`] whose exchange runs `callback` as the application's S3 callback.
pub fn transfer_with(
    lib: &Library,
    base: usize,
    callback: &mut Callback<'_>,
) -> Result<u32, Refused> {
    run(lib, base, Direction::Put, callback)
}

fn run(
    lib: &Library,
    base: usize,
    direction: Direction,
    callback: &mut Callback<'_>,
) -> Result<u32, Refused> {
    let scope = CallScope::enter(lib).map_err(Refused::at(Stage::Instance))?;
    transfer::run(
        &*scope.runtime,
        direction,
        base,
        8,
        0,
        &mut (direction, callback),
    )?;
    Ok(scope.runtime.generation)
}

/// `hipObjBufDeregister`; on `Ok` the application releases the buffer's memory at once.
pub fn deregister(lib: &Library, base: usize) -> Result<(), ApiError> {
    let scope = CallScope::enter(lib)?;
    match lib.supervisor.deregister(&scope.runtime, base) {
        Ok(entry) => {
            let memory = entry.payload().memory.clone();
            drop(entry);
            memory.free();
            Ok(())
        }
        Err(DeregisterError::NotRegistered) => Err(ApiError::BufNotRegistered),
        Err(DeregisterError::Busy) => Err(ApiError::Busy),
        Err(DeregisterError::NotInitialized) => Err(ApiError::NotInitialized),
        Err(DeregisterError::Supervisor(_)) => Err(ApiError::Internal),
    }
}

/// A staging copy handed to the copier thread: the ticket and the memory the copy touches (the
/// job does not keep the registration alive; the use or pending mark on it does).
pub struct CopyJob {
    ticket: Arc<Ticket<Buffer>>,
    memory: StdArc<Resource>,
    staging: StdArc<Resource>,
}

impl CopyJob {
    /// The copier: copy, then report the end of the copy.
    pub fn run(self) {
        self.copy();
        self.finish();
    }

    /// The copy itself: reads the application's device memory, writes the staging memory.
    pub fn copy(&self) {
        self.memory.read();
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
    let use_guard = transfer::use_range(&*scope.runtime, base, 8, 0).map_err(|r| r.answer)?;
    let ticket = Ticket::new();
    let job = CopyJob {
        ticket: ticket.clone(),
        memory: use_guard.entry().payload().memory.clone(),
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
    send::<CopyJob>();
    send::<Refused>();
    send_sync::<Runtime>();
    send_sync::<Library>();
}
