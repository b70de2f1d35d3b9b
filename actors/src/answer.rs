//! One-shot answers to actor requests (named so they are not confused with the reply codec).
//!
//! A request carries an [`Answer`]; the actor calls [`Answer::send`], which never blocks and ignores a
//! requester that has gone. The requester waits on the [`Awaiting`] half and can tell an answer from
//! a disconnect (the actor is gone) and, with a deadline, from a timeout.

use crate::sync::channel::{bounded, Receiver, RecvTimeoutError, Sender};

use std::time::Duration;

/// The actor's half: send the answer once.
pub struct Answer<T>(Sender<T>);

/// The requester's half.
pub struct Awaiting<T>(Receiver<T>);

/// Why no answer came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoAnswer {
    /// The actor dropped the request (it stopped).
    Disconnected,
    /// The deadline passed first.
    TimedOut,
}

/// A new answer pair.
pub fn answer<T>() -> (Answer<T>, Awaiting<T>) {
    let (tx, rx) = bounded(1);
    (Answer(tx), Awaiting(rx))
}

impl<T> Answer<T> {
    /// Deliver the answer; a requester that left is ignored.
    pub fn send(self, value: T) {
        let _ = self.0.send(value);
    }
}

impl<T> Awaiting<T> {
    /// Wait for the answer.
    pub fn wait(self) -> Result<T, NoAnswer> {
        self.0.recv().map_err(|_| NoAnswer::Disconnected)
    }

    /// Wait at most `limit`.
    pub fn wait_for(&self, limit: Duration) -> Result<T, NoAnswer> {
        self.0.recv_timeout(limit).map_err(|e| match e {
            RecvTimeoutError::Timeout => NoAnswer::TimedOut,
            RecvTimeoutError::Disconnected => NoAnswer::Disconnected,
        })
    }
}

/// Send the message that `make` builds around a fresh [`Answer`] to an actor's `inbox` and wait for
/// the answer. `Err(NoAnswer::Disconnected)` when the actor has stopped (its inbox or the request
/// was dropped).
pub fn request<T, M>(inbox: &Sender<M>, make: impl FnOnce(Answer<T>) -> M) -> Result<T, NoAnswer> {
    let (tx, rx) = answer();
    inbox.send(make(tx)).map_err(|_| NoAnswer::Disconnected)?;
    rx.wait()
}
