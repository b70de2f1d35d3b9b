//! The worker that makes a failed pool item usable again off the caller's thread.
//!
//! After a transfer that left its connection unusable, the caller hands the [`Lease`] (the
//! connection itself, by value, with its way back to the pool) to the connection's worker with
//! [`RecoveryHandle::release`] and returns at once. The worker renews the item ([`Renew`]: for a
//! connection, a fresh QP and window, docs/protocol.md rule 5.5), retrying every `retry` until that
//! succeeds, and only then drops the lease: the item rejoins the pool fresh, and stays out of it
//! meanwhile. A usable item goes straight back to the pool on the caller's thread.
//!
//! The shape of every actor here: a handle (sender, then join handle) and a private actor whose
//! `run` consumes it on its own named thread; it stops when the handle drops its sender. Leases
//! still waiting then go back to the pool as they are; the pool is being dropped with its owner.

use crate::pool::Lease;
use crate::sync::channel::{unbounded, Receiver, RecvTimeoutError, SendError, Sender};
use crate::sync::thread;
use std::collections::VecDeque;
use std::fmt::Display;
use std::time::Duration;

/// An item that a failure can leave unusable, and that can be made usable again in place.
pub trait Renew {
    type Error: Display;

    /// Make the item usable again (for a connection: replace its QP); on error it stays unusable.
    fn renew(&mut self) -> Result<(), Self::Error>;
}

/// Messages to the worker.
enum Msg<T> {
    /// Renew the leased item, then let the lease go.
    Renew(Lease<T>),
}

/// What the worker reacts to.
enum Event<T> {
    Msg(Msg<T>),
    /// The pause after a failed renewal is over.
    RetryDue,
}

/// The worker of one or more pool items. Dropping it stops the worker and joins its thread; it
/// is never dropped on the worker's own thread (the worker holds no handle).
pub struct RecoveryHandle<T> {
    // Order matters: the sender drops first, so the worker's `recv` fails and it returns before
    // the join below.
    inbox: Option<Sender<Msg<T>>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl<T: Renew + Send + 'static> RecoveryHandle<T> {
    /// Start the worker on a thread named `name`, retrying a failed renewal every `retry`.
    pub fn spawn(name: String, retry: Duration) -> std::io::Result<RecoveryHandle<T>> {
        let (tx, rx) = unbounded();
        let actor = RecoveryActor {
            waiting: VecDeque::new(),
            retry,
        };
        let thread = thread::Builder::new()
            .name(name)
            .stack_size(256 * 1024)
            .spawn(move || actor.run(rx))?;
        Ok(RecoveryHandle {
            inbox: Some(tx),
            thread: Some(thread),
        })
    }

    /// Give a lease back after use: to the pool at once when its item is `usable`, else to the
    /// worker, which returns it to the pool once renewed. Never waits for a renewal.
    pub fn release(&self, lease: Lease<T>, usable: bool) {
        if usable {
            drop(lease);
            return;
        }
        let Some(inbox) = &self.inbox else { return };
        if let Err(SendError(Msg::Renew(mut lease))) = inbox.send(Msg::Renew(lease)) {
            // The worker is gone (it panicked): renew here, once.
            if let Err(e) = lease.renew() {
                tracing::warn!("cannot renew a failed connection, its worker is gone: {e}");
            }
        }
    }
}

impl<T> Drop for RecoveryHandle<T> {
    fn drop(&mut self) {
        drop(self.inbox.take());
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("a connection's recovery worker panicked");
            }
        }
    }
}

/// The worker's state: leases whose items are not renewed yet, oldest first.
struct RecoveryActor<T> {
    waiting: VecDeque<Lease<T>>,
    retry: Duration,
}

impl<T: Renew> RecoveryActor<T> {
    fn run(mut self, inbox: Receiver<Msg<T>>) {
        while let Some(event) = self.next_event(&inbox) {
            match event {
                Event::Msg(Msg::Renew(lease)) => self.waiting.push_back(lease),
                Event::RetryDue => {}
            }
            self.renew_waiting();
        }
    }

    /// The next message; while renewals are pending, a retry once `retry` has passed without
    /// one. `None` once the handle is gone.
    fn next_event(&self, inbox: &Receiver<Msg<T>>) -> Option<Event<T>> {
        if self.waiting.is_empty() {
            return inbox.recv().ok().map(Event::Msg);
        }
        match inbox.recv_timeout(self.retry) {
            Ok(msg) => Some(Event::Msg(msg)),
            Err(RecvTimeoutError::Timeout) => Some(Event::RetryDue),
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Renew every waiting item; each renewed one goes back to the pool (its lease is dropped),
    /// the others wait for the next retry.
    fn renew_waiting(&mut self) {
        self.waiting.retain_mut(|lease| match lease.renew() {
            Ok(()) => false,
            Err(e) => {
                tracing::warn!(
                    "cannot renew a failed connection ({e}); retrying, it stays out of the pool"
                );
                !crate::fault::broken("recovery-returns-only-fresh")
            }
        });
    }
}
