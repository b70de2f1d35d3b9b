//! The one place the concurrent core gets its primitives from: std (plus crossbeam-channel and
//! arc-swap) normally, loom with small stand-ins under `--cfg hipobj_loom`.

#[cfg(hipobj_loom)]
pub use loom::sync::Arc;
#[cfg(not(hipobj_loom))]
pub use std::sync::Arc;

#[cfg(hipobj_loom)]
pub use loom::sync::atomic;
#[cfg(not(hipobj_loom))]
pub use std::sync::atomic;

#[cfg(hipobj_loom)]
pub use loom::thread;
#[cfg(not(hipobj_loom))]
pub use std::thread;

use std::time::Duration;

/// A mutex whose `lock` ignores poisoning: a panic in one caller must not spread to all later ones.
#[derive(Debug, Default)]
pub struct Mutex<T> {
    #[cfg(not(hipobj_loom))]
    inner: std::sync::Mutex<T>,
    #[cfg(hipobj_loom)]
    inner: loom::sync::Mutex<T>,
}

#[cfg(not(hipobj_loom))]
pub type MutexGuard<'a, T> = std::sync::MutexGuard<'a, T>;
#[cfg(hipobj_loom)]
pub type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    pub fn new(value: T) -> Mutex<T> {
        Mutex {
            #[cfg(not(hipobj_loom))]
            inner: std::sync::Mutex::new(value),
            #[cfg(hipobj_loom)]
            inner: loom::sync::Mutex::new(value),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, T> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// A condition variable matching [`Mutex`].
#[derive(Debug, Default)]
pub struct Condvar {
    #[cfg(not(hipobj_loom))]
    inner: std::sync::Condvar,
    #[cfg(hipobj_loom)]
    inner: loom::sync::Condvar,
}

impl Condvar {
    pub fn new() -> Condvar {
        Condvar::default()
    }

    pub fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        match self.inner.wait(guard) {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Waits at most `dur`; may wake early (callers re-check their condition). Under loom there is
    /// no time: this is a plain wait that a notification or a spurious wake-up ends.
    pub fn wait_timeout<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        dur: Duration,
    ) -> MutexGuard<'a, T> {
        #[cfg(not(hipobj_loom))]
        {
            match self.inner.wait_timeout(guard, dur) {
                Ok((g, _)) => g,
                Err(poisoned) => poisoned.into_inner().0,
            }
        }
        #[cfg(hipobj_loom)]
        {
            let _ = dur;
            self.wait(guard)
        }
    }

    pub fn notify_one(&self) {
        self.inner.notify_one();
    }

    pub fn notify_all(&self) {
        self.inner.notify_all();
    }
}

/// An atomically replaceable `Option<Arc<T>>` whose loads take no lock (arc-swap); under loom a
/// mutex stand-in with the same API.
pub struct ArcCell<T> {
    #[cfg(not(hipobj_loom))]
    inner: arc_swap::ArcSwapOption<T>,
    #[cfg(hipobj_loom)]
    inner: Mutex<Option<Arc<T>>>,
}

impl<T> ArcCell<T> {
    pub fn new(value: Option<Arc<T>>) -> ArcCell<T> {
        ArcCell {
            #[cfg(not(hipobj_loom))]
            inner: arc_swap::ArcSwapOption::new(value),
            #[cfg(hipobj_loom)]
            inner: Mutex::new(value),
        }
    }

    #[cfg(not(hipobj_loom))]
    pub const fn empty() -> ArcCell<T> {
        ArcCell {
            inner: arc_swap::ArcSwapOption::const_empty(),
        }
    }

    /// A counted reference to the current value.
    pub fn load(&self) -> Option<Arc<T>> {
        #[cfg(not(hipobj_loom))]
        {
            self.inner.load_full()
        }
        #[cfg(hipobj_loom)]
        {
            self.inner.lock().clone()
        }
    }

    /// Replace the value, returning the old one.
    pub fn swap(&self, value: Option<Arc<T>>) -> Option<Arc<T>> {
        #[cfg(not(hipobj_loom))]
        {
            self.inner.swap(value)
        }
        #[cfg(hipobj_loom)]
        {
            std::mem::replace(&mut *self.inner.lock(), value)
        }
    }
}

impl<T> Default for ArcCell<T> {
    fn default() -> Self {
        ArcCell::new(None)
    }
}

/// Multi-producer channels: crossbeam-channel normally, a mutex/condvar stand-in under loom.
pub mod channel {
    #[cfg(not(hipobj_loom))]
    pub use crossbeam_channel::{
        bounded, unbounded, Receiver, RecvError, RecvTimeoutError, SendError, Sender, TryRecvError,
    };

    #[cfg(hipobj_loom)]
    pub use super::loom_channel::{
        bounded, unbounded, Receiver, RecvError, RecvTimeoutError, SendError, Sender, TryRecvError,
    };
}

#[cfg(hipobj_loom)]
mod loom_channel {
    use super::{Arc, Condvar, Mutex};
    use std::collections::VecDeque;
    use std::time::Duration;

    #[derive(Debug, PartialEq, Eq)]
    pub struct SendError<T>(pub T);
    #[derive(Debug, PartialEq, Eq)]
    pub struct RecvError;
    #[derive(Debug, PartialEq, Eq)]
    pub enum RecvTimeoutError {
        Timeout,
        Disconnected,
    }
    #[derive(Debug, PartialEq, Eq)]
    pub enum TryRecvError {
        Empty,
        Disconnected,
    }

    struct State<T> {
        queue: VecDeque<T>,
        senders: usize,
        receivers: usize,
    }
    struct Shared<T> {
        state: Mutex<State<T>>,
        ready: Condvar,
    }
    pub struct Sender<T>(Arc<Shared<T>>);
    pub struct Receiver<T>(Arc<Shared<T>>);

    pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                senders: 1,
                receivers: 1,
            }),
            ready: Condvar::new(),
        });
        (Sender(shared.clone()), Receiver(shared))
    }

    /// The stand-in does not bound its queue; the models never rely on back-pressure.
    pub fn bounded<T>(_cap: usize) -> (Sender<T>, Receiver<T>) {
        unbounded()
    }

    impl<T> Sender<T> {
        pub fn send(&self, value: T) -> Result<(), SendError<T>> {
            let mut st = self.0.state.lock();
            if st.receivers == 0 {
                return Err(SendError(value));
            }
            st.queue.push_back(value);
            drop(st);
            self.0.ready.notify_all();
            Ok(())
        }
    }
    impl<T> Clone for Sender<T> {
        fn clone(&self) -> Self {
            self.0.state.lock().senders += 1;
            Sender(self.0.clone())
        }
    }
    impl<T> Drop for Sender<T> {
        fn drop(&mut self) {
            self.0.state.lock().senders -= 1;
            self.0.ready.notify_all();
        }
    }
    impl<T> Receiver<T> {
        pub fn recv(&self) -> Result<T, RecvError> {
            let mut st = self.0.state.lock();
            loop {
                if let Some(v) = st.queue.pop_front() {
                    return Ok(v);
                }
                if st.senders == 0 {
                    return Err(RecvError);
                }
                st = self.0.ready.wait(st);
            }
        }
        pub fn try_recv(&self) -> Result<T, TryRecvError> {
            let mut st = self.0.state.lock();
            match st.queue.pop_front() {
                Some(v) => Ok(v),
                None if st.senders == 0 => Err(TryRecvError::Disconnected),
                None => Err(TryRecvError::Empty),
            }
        }
        /// No time under loom: either a value, a disconnect, or (nondeterministically) a timeout.
        pub fn recv_timeout(&self, _dur: Duration) -> Result<T, RecvTimeoutError> {
            match self.try_recv() {
                Ok(v) => Ok(v),
                Err(TryRecvError::Disconnected) => Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => Err(RecvTimeoutError::Timeout),
            }
        }
    }
    impl<T> Drop for Receiver<T> {
        fn drop(&mut self) {
            self.0.state.lock().receivers -= 1;
        }
    }
}

/// A process-wide value started once on first use and shared after (a loaded library, the
/// supervisor): starts are serialised, and a failed start is not remembered, so the next call
/// tries again. For statics (std only: loom models never start one).
#[cfg(not(hipobj_loom))]
pub struct StartOnce<T> {
    value: std::sync::OnceLock<T>,
    starting: std::sync::Mutex<()>,
}

#[cfg(not(hipobj_loom))]
impl<T> Default for StartOnce<T> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(hipobj_loom))]
impl<T> StartOnce<T> {
    pub const fn new() -> StartOnce<T> {
        StartOnce {
            value: std::sync::OnceLock::new(),
            starting: std::sync::Mutex::new(()),
        }
    }

    /// The value, if a start succeeded.
    pub fn get(&self) -> Option<&T> {
        self.value.get()
    }

    /// The value, started by `start` unless a start already succeeded.
    pub fn get_or_start<E>(&self, start: impl FnOnce() -> Result<T, E>) -> Result<&T, E> {
        if let Some(v) = self.value.get() {
            return Ok(v);
        }
        let _one_at_a_time = self.starting.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = self.value.get() {
            return Ok(v);
        }
        let v = start()?;
        Ok(self.value.get_or_init(|| v))
    }
}

#[cfg(all(test, not(hipobj_loom)))]
mod tests {
    use super::StartOnce;

    #[test]
    fn a_failed_start_is_retried() {
        let once: StartOnce<u32> = StartOnce::new();
        assert!(once.get().is_none());
        assert_eq!(once.get_or_start(|| Err("no thread")), Err("no thread"));
        assert!(once.get().is_none(), "the failure is not cached");
        assert_eq!(once.get_or_start(|| Ok::<_, &str>(7)), Ok(&7));
        assert_eq!(
            once.get_or_start(|| -> Result<u32, &str> { panic!("started twice") }),
            Ok(&7)
        );
    }
}
