//! The supervisor: the one owner of the lifecycle and of the current instance's registrations.
//!
//! One actor thread owns the state (down, building, or up with its [`RegistryWriter`]) and
//! publishes what calls read without a lock: the current instance ([`ArcCell`]) and each instance's
//! registry snapshot. Only fast metadata changes pass through it. The slow work happens on the
//! caller's thread, between two messages:
//! - init: [`Supervisor::init`] takes a build permit, builds the instance on the caller's thread
//!   (QPs, threads), then publishes it; an init or shutdown that arrives meanwhile waits for the build
//!   to end (init then answers AlreadyInitialized, shutdown shuts the new instance down);
//! - register: a reservation of the base, the pinning on the caller's thread, then the publication
//!   (or the cancellation if pinning failed);
//! - deregister: the registration is retired and unpublished, then handed back so that its last
//!   reference (the unpinning) goes on the caller's thread;
//! - shutdown: the instance is unpublished, closed (its waiters woken) and handed back to the
//!   caller, whose drop releases it when the last call in flight returns.
//!
//! A panic in a handler is caught: that one call gets [`Fault::Failed`], the supervisor carries on.

use crate::registry::{AlreadyRegistered, Entry, Registry, RegistryWriter, RemoveError};
use crate::sync::channel::{bounded, unbounded, Receiver, Sender};
use crate::sync::{Arc, ArcCell};
use std::collections::VecDeque;

/// What the supervisor needs from an instance.
pub trait Instance: Send + Sync + 'static {
    /// What a registration holds (the pinned memory).
    type Payload: Send + Sync + 'static;

    /// The instance's registry snapshot, which the supervisor alone writes.
    fn registry(&self) -> &Registry<Self::Payload>;

    /// The instance was unpublished: wake every call waiting on it. Runs on the supervisor thread,
    /// so it must be fast.
    fn close(&self);
}

/// The supervisor could not answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Its thread is gone.
    Stopped,
    /// It failed (a panic, caught) while handling this call.
    Failed,
}

/// Why an init did not publish an instance.
#[derive(Debug, PartialEq, Eq)]
pub enum InitError<E> {
    AlreadyInitialized,
    /// Building the instance failed (nothing was published).
    Failed(E),
    Supervisor(Fault),
}

/// Why a registration was not published. Nothing is left registered or pinned in any case.
#[derive(Debug, PartialEq, Eq)]
pub enum RegisterError<E> {
    AlreadyRegistered,
    /// The instance is no longer the current one (a shutdown came first).
    NotInitialized,
    /// Pinning failed.
    Pin(E),
    Supervisor(Fault),
}

/// Why a deregistration did not happen. The registration is left as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeregisterError {
    NotRegistered,
    /// A call uses the buffer, or a timed-out staging copy of it still runs.
    Busy,
    NotInitialized,
    Supervisor(Fault),
}

/// A shut-down instance and its registrations, handed back to the shutdown caller to drop.
pub struct Retired<R: Instance> {
    pub instance: Arc<R>,
    _registrations: RegistryWriter<R::Payload>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    AlreadyInitialized,
    NotInitialized,
    AlreadyRegistered,
    NotRegistered,
    Busy,
}

type Entries<R> = Arc<Entry<<R as Instance>::Payload>>;
type Reply<T> = Sender<T>;

enum Msg<R: Instance> {
    BeginInit(Reply<Result<(), Refusal>>),
    /// The build ended: `Some` publishes it; `None` (failed or abandoned) lets the next init try.
    EndInit(Option<Arc<R>>, Option<Reply<()>>),
    Shutdown(Reply<Option<Retired<R>>>),
    Reserve(Arc<R>, usize, Reply<Result<usize, Refusal>>),
    Publish(
        Arc<R>,
        usize,
        Entries<R>,
        Reply<Result<(), (Refusal, Entries<R>)>>,
    ),
    Cancel(Arc<R>, usize, Reply<()>),
    Retire(Arc<R>, usize, Reply<Result<Entries<R>, Refusal>>),
}

enum Life<R: Instance> {
    Down,
    Building,
    Up {
        instance: Arc<R>,
        registrations: RegistryWriter<R::Payload>,
    },
}

/// The actor's state; [`Supervisor::spawn_parts`] hands it out to run on its own thread.
pub struct SupervisorLoop<R: Instance> {
    inbox: Receiver<Msg<R>>,
    published: Arc<ArcCell<R>>,
    life: Life<R>,
    /// Inits and shutdowns that arrived while a build ran, in arrival order.
    deferred: VecDeque<Msg<R>>,
}

/// The handle calls use. Cloneable; the supervisor stops when every handle is gone.
pub struct Supervisor<R: Instance> {
    inbox: Sender<Msg<R>>,
    published: Arc<ArcCell<R>>,
}

impl<R: Instance> Clone for Supervisor<R> {
    fn clone(&self) -> Self {
        Supervisor {
            inbox: self.inbox.clone(),
            published: self.published.clone(),
        }
    }
}

impl<R: Instance> Supervisor<R> {
    /// A handle and the loop to run on the supervisor's thread; `published` is where the current
    /// instance is published for lock-free readers.
    pub fn spawn_parts(published: Arc<ArcCell<R>>) -> (Supervisor<R>, SupervisorLoop<R>) {
        let (tx, rx) = unbounded();
        let handle = Supervisor {
            inbox: tx,
            published: published.clone(),
        };
        let state = SupervisorLoop {
            inbox: rx,
            published,
            life: Life::Down,
            deferred: VecDeque::new(),
        };
        (handle, state)
    }

    /// The published instance (no lock, no message).
    pub fn current(&self) -> Option<Arc<R>> {
        self.published.load()
    }

    fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Msg<R>) -> Result<T, Fault> {
        let (tx, rx) = bounded(1);
        self.inbox.send(make(tx)).map_err(|_| Fault::Stopped)?;
        // The request was queued: no answer now means its handler failed.
        rx.recv().map_err(|_| Fault::Failed)
    }

    /// Build an instance on this thread and publish it, unless one is published or being built
    /// (this call then waits for that build: AlreadyInitialized if it succeeded, else it builds).
    pub fn init<E>(
        &self,
        build: impl FnOnce() -> Result<Arc<R>, E>,
    ) -> Result<Arc<R>, InitError<E>> {
        match self.ask(Msg::BeginInit) {
            Err(f) => return Err(InitError::Supervisor(f)),
            Ok(Err(_)) => return Err(InitError::AlreadyInitialized),
            Ok(Ok(())) => {}
        }
        let mut permit = BuildPermit {
            inbox: &self.inbox,
            open: true,
        };
        let instance = build().map_err(InitError::Failed)?;
        permit.open = false;
        let published = instance.clone();
        self.ask(|tx| Msg::EndInit(Some(published), Some(tx)))
            .map_err(InitError::Supervisor)?;
        Ok(instance)
    }

    /// Unpublish and close the current instance and hand it back (`None` when not initialised).
    /// Its resources go when the caller drops it and the last call in flight returns.
    pub fn shutdown(&self) -> Result<Option<Retired<R>>, Fault> {
        self.ask(Msg::Shutdown)
    }

    /// Register `[base, base + len)` on `instance`: reserve the base, `pin` on this thread, publish.
    pub fn register<E>(
        &self,
        instance: &Arc<R>,
        base: usize,
        len: usize,
        pin: impl FnOnce() -> Result<R::Payload, E>,
    ) -> Result<(), RegisterError<E>> {
        let key = match self.ask(|tx| Msg::Reserve(instance.clone(), base, tx)) {
            Err(f) => return Err(RegisterError::Supervisor(f)),
            Ok(Err(refusal)) => return Err(register_refusal(refusal)),
            Ok(Ok(key)) => key,
        };
        let mut reservation = Reservation {
            supervisor: self,
            instance,
            key,
            open: true,
        };
        let entry = Entry::new(base, len, pin().map_err(RegisterError::Pin)?);
        reservation.open = false;
        match self.ask(|tx| Msg::Publish(instance.clone(), key, entry, tx)) {
            Err(f) => Err(RegisterError::Supervisor(f)),
            // The entry comes back to be dropped (unpinned) here, not on the supervisor.
            Ok(Err((refusal, entry))) => {
                drop(entry);
                Err(register_refusal(refusal))
            }
            Ok(Ok(())) => Ok(()),
        }
    }

    /// Retire and unpublish the registration based at `base` and hand it back: the caller's drop
    /// of it is the unpinning (when no old snapshot still holds it).
    pub fn deregister(
        &self,
        instance: &Arc<R>,
        base: usize,
    ) -> Result<Arc<Entry<R::Payload>>, DeregisterError> {
        match self.ask(|tx| Msg::Retire(instance.clone(), base, tx)) {
            Err(f) => Err(DeregisterError::Supervisor(f)),
            Ok(Ok(entry)) => Ok(entry),
            Ok(Err(Refusal::Busy)) => Err(DeregisterError::Busy),
            Ok(Err(Refusal::NotInitialized)) => Err(DeregisterError::NotInitialized),
            Ok(Err(_)) => Err(DeregisterError::NotRegistered),
        }
    }
}

fn register_refusal<E>(refusal: Refusal) -> RegisterError<E> {
    match refusal {
        Refusal::AlreadyRegistered => RegisterError::AlreadyRegistered,
        _ => RegisterError::NotInitialized,
    }
}

/// Held while an init builds; dropping it unused (the build failed or panicked) tells the
/// supervisor that the next init may build.
struct BuildPermit<'a, R: Instance> {
    inbox: &'a Sender<Msg<R>>,
    open: bool,
}

impl<R: Instance> Drop for BuildPermit<'_, R> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.inbox.send(Msg::EndInit(None, None));
        }
    }
}

/// Held while a registration pins; dropping it unused gives the base back.
struct Reservation<'a, R: Instance> {
    supervisor: &'a Supervisor<R>,
    instance: &'a Arc<R>,
    key: usize,
    open: bool,
}

impl<R: Instance> Drop for Reservation<'_, R> {
    fn drop(&mut self) {
        if self.open {
            // Waits for the answer: the message's instance reference must not be the last one
            // (the supervisor would release the instance on its own thread).
            let _ = self
                .supervisor
                .ask(|tx| Msg::Cancel(self.instance.clone(), self.key, tx));
        }
    }
}

impl<R: Instance> SupervisorLoop<R> {
    /// Handle messages until every handle is gone.
    pub fn run(mut self) {
        while let Ok(msg) = self.inbox.recv() {
            self.dispatch(msg);
        }
    }

    fn dispatch(&mut self, msg: Msg<R>) {
        #[cfg(not(hipobj_loom))]
        {
            let handled =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.handle(msg)));
            if handled.is_err() {
                // The message (and its reply channel) was dropped while unwinding: its caller gets
                // Fault::Failed. The state changes of every handler are made before anything that
                // can panic, so the state stays consistent.
                tracing::error!("the supervisor caught a panic; that call fails, others go on");
            }
        }
        #[cfg(hipobj_loom)]
        self.handle(msg);
    }

    fn handle(&mut self, msg: Msg<R>) {
        match msg {
            Msg::BeginInit(reply) => self.begin_init(reply),
            Msg::EndInit(built, reply) => self.end_init(built, reply),
            Msg::Shutdown(reply) => self.shutdown(reply),
            Msg::Reserve(instance, base, reply) => {
                let answer = match self.registrations_of(&instance) {
                    Some(w) => w
                        .reserve(base)
                        .map_err(|AlreadyRegistered| Refusal::AlreadyRegistered),
                    None => Err(Refusal::NotInitialized),
                };
                drop(instance);
                let _ = reply.send(answer);
            }
            Msg::Publish(instance, key, entry, reply) => {
                let answer = match self.up_with(&instance) {
                    Some((inst, w)) => w
                        .publish(key, entry, inst.registry())
                        .map_err(|e| (Refusal::AlreadyRegistered, e)),
                    None => Err((Refusal::NotInitialized, entry)),
                };
                drop(instance);
                let _ = reply.send(answer);
            }
            Msg::Cancel(instance, key, reply) => {
                if let Some(w) = self.registrations_of(&instance) {
                    w.cancel(key);
                }
                drop(instance);
                let _ = reply.send(());
            }
            Msg::Retire(instance, base, reply) => {
                let answer = match self.up_with(&instance) {
                    Some((inst, w)) => w.retire(base, inst.registry()).map_err(|e| match e {
                        RemoveError::NotRegistered => Refusal::NotRegistered,
                        RemoveError::Busy => Refusal::Busy,
                    }),
                    None => Err(Refusal::NotInitialized),
                };
                drop(instance);
                let _ = reply.send(answer);
            }
        }
    }

    fn begin_init(&mut self, reply: Reply<Result<(), Refusal>>) {
        match self.life {
            Life::Down => {
                self.life = Life::Building;
                let _ = reply.send(Ok(()));
            }
            Life::Building if crate::fault::broken("one-build-at-a-time") => {
                let _ = reply.send(Ok(()));
            }
            Life::Building => self.deferred.push_back(Msg::BeginInit(reply)),
            Life::Up { .. } => {
                let _ = reply.send(Err(Refusal::AlreadyInitialized));
            }
        }
    }

    fn end_init(&mut self, built: Option<Arc<R>>, reply: Option<Reply<()>>) {
        if !matches!(self.life, Life::Building) {
            return; // not ours to end (cannot happen: only a permit holder sends it)
        }
        self.life = match built {
            Some(instance) => {
                self.published.swap(Some(instance.clone()));
                Life::Up {
                    instance,
                    registrations: RegistryWriter::new(),
                }
            }
            None => Life::Down,
        };
        if let Some(reply) = reply {
            let _ = reply.send(());
        }
        // What waited for the build, in order (an init may take the next permit and defer the rest).
        for msg in std::mem::take(&mut self.deferred) {
            self.dispatch(msg);
        }
    }

    fn shutdown(&mut self, reply: Reply<Option<Retired<R>>>) {
        match std::mem::replace(&mut self.life, Life::Down) {
            Life::Building if !crate::fault::broken("shutdown-waits-for-build") => {
                self.life = Life::Building;
                self.deferred.push_back(Msg::Shutdown(reply));
            }
            Life::Building => {
                self.life = Life::Building;
                let _ = reply.send(None);
            }
            Life::Down => {
                let _ = reply.send(None);
            }
            Life::Up {
                instance,
                registrations,
            } => {
                self.published.swap(None);
                if !crate::fault::broken("shutdown-closes") {
                    instance.close();
                }
                let _ = reply.send(Some(Retired {
                    instance,
                    _registrations: registrations,
                }));
            }
        }
    }

    fn registrations_of(&mut self, instance: &Arc<R>) -> Option<&mut RegistryWriter<R::Payload>> {
        self.up_with(instance).map(|(_, w)| w)
    }

    /// The current instance and its registrations, if `instance` is it.
    fn up_with(&mut self, instance: &Arc<R>) -> Option<(&Arc<R>, &mut RegistryWriter<R::Payload>)> {
        match &mut self.life {
            Life::Up {
                instance: current,
                registrations,
            } if Arc::ptr_eq(current, instance) => Some((current, registrations)),
            _ => None,
        }
    }
}

#[cfg(all(test, not(hipobj_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    #[derive(Default)]
    struct Inst {
        registry: Registry<u32>,
        closed: AtomicUsize,
        panic_on_close: AtomicBool,
    }

    impl Instance for Inst {
        type Payload = u32;
        fn registry(&self) -> &Registry<u32> {
            &self.registry
        }
        fn close(&self) {
            self.closed.fetch_add(1, Ordering::SeqCst);
            if self.panic_on_close.swap(false, Ordering::SeqCst) {
                panic!("close failed");
            }
        }
    }

    fn spawn() -> Supervisor<Inst> {
        let (handle, state) = Supervisor::spawn_parts(Arc::new(ArcCell::new(None)));
        std::thread::spawn(move || state.run());
        handle
    }

    #[test]
    fn lifecycle_and_registrations() {
        let sup = spawn();
        assert!(sup.shutdown().unwrap().is_none(), "shutdown when down");
        let inst = sup.init(|| Ok::<_, ()>(Arc::new(Inst::default()))).unwrap();
        assert!(Arc::ptr_eq(&sup.current().unwrap(), &inst));
        assert_eq!(
            sup.init(|| Ok::<_, ()>(Arc::new(Inst::default()))).err(),
            Some(InitError::AlreadyInitialized)
        );
        sup.register(&inst, 0x1000, 8, || Ok::<_, ()>(7)).unwrap();
        assert_eq!(
            sup.register(&inst, 0x1000, 8, || -> Result<u32, ()> {
                panic!("must not pin a registered base")
            }),
            Err(RegisterError::AlreadyRegistered)
        );
        assert_eq!(
            sup.register(&inst, 0x2000, 8, || Err::<u32, _>("pin failed")),
            Err(RegisterError::Pin("pin failed"))
        );
        sup.register(&inst, 0x2000, 8, || Ok::<_, ()>(8))
            .expect("a failed pin gave its base back");
        let entry = sup.deregister(&inst, 0x1000).unwrap();
        assert_eq!(*entry.payload(), 7);
        assert_eq!(
            sup.deregister(&inst, 0x1000).err(),
            Some(DeregisterError::NotRegistered)
        );
        let retired = sup.shutdown().unwrap().unwrap();
        assert!(Arc::ptr_eq(&retired.instance, &inst));
        assert_eq!(inst.closed.load(Ordering::SeqCst), 1);
        assert!(sup.current().is_none());
        assert_eq!(
            sup.register(&inst, 0x3000, 8, || Ok::<_, ()>(9)),
            Err(RegisterError::NotInitialized),
            "a stale instance"
        );
        assert_eq!(
            sup.deregister(&inst, 0x2000).err(),
            Some(DeregisterError::NotInitialized)
        );
    }

    #[test]
    fn failed_and_panicking_builds_let_the_next_init_build() {
        let sup = spawn();
        assert_eq!(
            sup.init(|| Err::<Arc<Inst>, _>("no device")).err(),
            Some(InitError::Failed("no device"))
        );
        let s2 = sup.clone();
        let panicked = std::thread::spawn(move || {
            s2.init(|| -> Result<Arc<Inst>, ()> { panic!("build panicked") })
        })
        .join();
        assert!(panicked.is_err());
        assert!(sup.init(|| Ok::<_, ()>(Arc::new(Inst::default()))).is_ok());
    }

    #[test]
    fn a_panic_in_a_handler_fails_that_call_only() {
        let sup = spawn();
        let inst = sup.init(|| Ok::<_, ()>(Arc::new(Inst::default()))).unwrap();
        inst.panic_on_close.store(true, Ordering::SeqCst);
        assert_eq!(sup.shutdown().err(), Some(Fault::Failed));
        assert!(sup.current().is_none(), "unpublished before the panic");
        let again = sup.init(|| Ok::<_, ()>(Arc::new(Inst::default()))).unwrap();
        sup.register(&again, 0x1000, 8, || Ok::<_, ()>(1)).unwrap();
        assert!(sup.shutdown().unwrap().is_some());
    }
}
