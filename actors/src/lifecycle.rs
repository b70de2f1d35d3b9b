//! The current library instance.
//!
//! Every API call takes a counted reference with [`Lifecycle::current`] (no lock) and keeps it until
//! it returns, so resources stay alive for calls in progress. Init and shutdown are serialised with
//! each other by a gate; shutdown only unpublishes the instance and hands it back, so it never waits
//! for calls in progress, and a new init may publish a fresh instance while old calls drain.

use crate::sync::{Arc, ArcCell, Mutex};

/// Why an init did not publish an instance.
#[derive(Debug, PartialEq, Eq)]
pub enum InitError<E> {
    /// An instance is already published.
    AlreadyInitialized,
    /// Building the instance failed.
    Failed(E),
}

pub struct Lifecycle<R> {
    current: ArcCell<R>,
    gate: Mutex<()>,
}

impl<R> Default for Lifecycle<R> {
    fn default() -> Self {
        Lifecycle::new()
    }
}

impl<R> Lifecycle<R> {
    pub fn new() -> Lifecycle<R> {
        Lifecycle {
            current: ArcCell::new(None),
            gate: Mutex::new(()),
        }
    }

    /// The published instance, if any.
    pub fn current(&self) -> Option<Arc<R>> {
        self.current.load()
    }

    /// Build and publish an instance unless one is published. `build` runs with the gate held, so
    /// two inits never both build.
    pub fn init<E>(
        &self,
        build: impl FnOnce() -> Result<Arc<R>, E>,
    ) -> Result<Arc<R>, InitError<E>> {
        let _gate = self.gate.lock();
        if self.current.load().is_some() {
            return Err(InitError::AlreadyInitialized);
        }
        let instance = build().map_err(InitError::Failed)?;
        self.current.swap(Some(instance.clone()));
        Ok(instance)
    }

    /// Unpublish the instance and return it (the caller wakes its waiters); `None` when not
    /// initialised.
    pub fn shutdown(&self) -> Option<Arc<R>> {
        let _gate = self.gate.lock();
        self.current.swap(None)
    }
}
