//! The bookkeeping of one batch queue (docs/batch.md): which operations are queued or running,
//! the events waiting to be polled, the depth, and cancellation. The library's queue
//! (`hipobj::batch`) keeps its operations here and runs them on its workers; the loom models
//! (`loom-tests/tests/batch.rs`) drive this same code.
//!
//! - Submit is all or nothing and never blocks: past the depth it is [`SubmitError::Full`].
//! - Every submitted operation ends exactly once, as one event, handed out by one poll.
//! - Cancel of a queued operation ends it at once; of a running one, it asks the worker to stop
//!   (the operation's cancel flag) and returns only once the worker has finished with it: after
//!   that nothing of the operation touches its buffer.
//! - Close ends the queued operations, asks the running ones to stop and waits for them.
//!
//! An operation's payload `P` (its use of the registration, its request) lives here while it is
//! queued and goes to the worker that claims it; an event `E` is made when it ends.

use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::{Arc, Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// The application's tag of an operation, given back untouched in its event. A cookie names one
/// operation from its submit until its event is polled.
pub type Cookie = u64;

/// Why a submit queued nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// The operations submitted and not yet polled, with these, would pass the depth.
    Full { outstanding: usize, depth: usize },
    /// The queue was closed (destroyed, or the library shut down).
    Closed,
    /// This cookie names an operation not yet polled (or comes twice in the submit).
    CookieInUse(Cookie),
}

/// Why a cancel did nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelError {
    /// No operation not yet polled has this cookie.
    Unknown(Cookie),
}

/// What the queue raises while events wait to be polled and lowers when none is left (the
/// eventfd of `hipobj::batch`). Called with the queue's lock held.
pub trait Signal: Send + Sync {
    fn raise(&self);
    fn lower(&self);
}

/// No signal (tests, and queues without an eventfd).
pub struct NoSignal;

impl Signal for NoSignal {
    fn raise(&self) {}
    fn lower(&self) {}
}

/// A submitted operation's number: what a worker claims and finishes it by.
pub type Seq = u64;

enum Phase<P> {
    Queued(P),
    Running,
}

struct Entry<P> {
    cookie: Cookie,
    phase: Phase<P>,
    /// Set by cancel and close; the worker's run of the operation reads it.
    cancel: Arc<AtomicBool>,
}

struct Inner<P, E> {
    /// Queued and running operations.
    ops: HashMap<Seq, Entry<P>>,
    /// Every cookie not yet polled: its operation's number.
    cookies: HashMap<Cookie, Seq>,
    ready: VecDeque<(Cookie, E)>,
    next: Seq,
    closed: bool,
}

impl<P, E> Inner<P, E> {
    fn push_event(&mut self, cookie: Cookie, event: E, signal: &dyn Signal) {
        if self.ready.is_empty() {
            signal.raise();
        }
        self.ready.push_back((cookie, event));
    }
}

/// One queue's operations and events.
pub struct BatchState<P, E> {
    inner: Mutex<Inner<P, E>>,
    /// Notified when an operation ends (poll, cancel and close wait on it).
    ended: Condvar,
    depth: usize,
    signal: Box<dyn Signal>,
}

impl<P, E> BatchState<P, E> {
    /// A queue of `depth` operations at most between submit and poll (at least 1).
    pub fn new(depth: usize, signal: Box<dyn Signal>) -> BatchState<P, E> {
        BatchState {
            inner: Mutex::new(Inner {
                ops: HashMap::new(),
                cookies: HashMap::new(),
                ready: VecDeque::new(),
                next: 0,
                closed: false,
            }),
            ended: Condvar::new(),
            depth: depth.max(1),
            signal,
        }
    }

    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Queue `ops` (all or none): their numbers, in order, for the workers.
    pub fn submit(&self, ops: Vec<(Cookie, P)>) -> Result<Vec<Seq>, SubmitError> {
        let mut inner = self.inner.lock();
        if inner.closed {
            return Err(SubmitError::Closed);
        }
        let outstanding = inner.cookies.len();
        if outstanding + ops.len() > self.depth {
            return Err(SubmitError::Full {
                outstanding,
                depth: self.depth,
            });
        }
        for (i, (cookie, _)) in ops.iter().enumerate() {
            let twice = ops[..i].iter().any(|(c, _)| c == cookie);
            if twice || inner.cookies.contains_key(cookie) {
                return Err(SubmitError::CookieInUse(*cookie));
            }
        }
        let mut seqs = Vec::with_capacity(ops.len());
        for (cookie, payload) in ops {
            let seq = inner.next;
            inner.next += 1;
            inner.cookies.insert(cookie, seq);
            inner.ops.insert(
                seq,
                Entry {
                    cookie,
                    phase: Phase::Queued(payload),
                    cancel: Arc::new(AtomicBool::new(false)),
                },
            );
            seqs.push(seq);
        }
        Ok(seqs)
    }

    /// A worker takes operation `seq` to run: its payload and its cancel flag. `None` when it
    /// ended meanwhile (cancelled while queued, or the queue closed).
    pub fn claim(&self, seq: Seq) -> Option<(P, Arc<AtomicBool>)> {
        let mut inner = self.inner.lock();
        let entry = inner.ops.get_mut(&seq)?;
        match std::mem::replace(&mut entry.phase, Phase::Running) {
            Phase::Queued(payload) => Some((payload, Arc::clone(&entry.cancel))),
            Phase::Running => None,
        }
    }

    /// The worker is done with operation `seq`: its event (`event` is told whether a cancel
    /// asked it to stop). Wakes a cancel or close waiting for it, and pollers.
    pub fn finish(&self, seq: Seq, event: impl FnOnce(bool) -> E) {
        let mut inner = self.inner.lock();
        let Some(entry) = inner.ops.remove(&seq) else {
            return;
        };
        let asked = entry.cancel.load(Ordering::Acquire);
        let closed = inner.closed;
        if closed {
            // A closed queue's events are never polled: its cookies go with it.
            inner.cookies.remove(&entry.cookie);
        } else {
            inner.push_event(entry.cookie, event(asked), self.signal.as_ref());
        }
        drop(inner);
        self.ended.notify_all();
    }

    /// Cancel the operation `cookie` names. Queued: it ends now, as `cancelled()`. Running: its
    /// cancel flag is set and this returns once its worker has finished it (its event is then the
    /// worker's). Already ended, not yet polled: nothing to do.
    pub fn cancel(&self, cookie: Cookie, cancelled: impl FnOnce() -> E) -> Result<(), CancelError> {
        let mut inner = self.inner.lock();
        let seq = *inner
            .cookies
            .get(&cookie)
            .ok_or(CancelError::Unknown(cookie))?;
        let running = match inner.ops.get(&seq) {
            None => return Ok(()),
            Some(entry) => matches!(entry.phase, Phase::Running),
        };
        if !running {
            // Its payload (the registration's use) is dropped with the entry, under the lock:
            // nothing can claim it any more.
            inner.ops.remove(&seq);
            inner.push_event(cookie, cancelled(), self.signal.as_ref());
            drop(inner);
            self.ended.notify_all();
            return Ok(());
        }
        if let Some(entry) = inner.ops.get(&seq) {
            entry.cancel.store(true, Ordering::Release);
        }
        if crate::fault::broken("cancel-waits-for-worker") {
            return Ok(());
        }
        while inner.ops.contains_key(&seq) {
            inner = self.ended.wait(inner);
        }
        Ok(())
    }

    /// Cancel every operation not yet ended (each as [`BatchState::cancel`]).
    pub fn cancel_all(&self, cancelled: impl Fn(Cookie) -> E) {
        let cookies: Vec<Cookie> = {
            let inner = self.inner.lock();
            inner.ops.values().map(|e| e.cookie).collect()
        };
        for cookie in cookies {
            let _ = self.cancel(cookie, || cancelled(cookie));
        }
    }

    /// Up to `max` events, waiting until at least `min` are ready (no more than can still come)
    /// or `timeout` passes (`None`: no limit).
    pub fn poll(&self, min: usize, max: usize, timeout: Option<Duration>) -> Vec<(Cookie, E)> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut inner = self.inner.lock();
        loop {
            let can_come = inner.ready.len() + inner.ops.len();
            if inner.ready.len() >= min.min(can_come) {
                break;
            }
            inner = match deadline {
                None => self.ended.wait(inner),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        break;
                    }
                    self.ended.wait_timeout(inner, d - now)
                }
            };
        }
        let n = max.min(inner.ready.len());
        let events: Vec<(Cookie, E)> = inner.ready.drain(..n).collect();
        for (cookie, _) in &events {
            inner.cookies.remove(cookie);
        }
        if inner.ready.is_empty() && n > 0 {
            self.signal.lower();
        }
        events
    }

    /// Close: no submit is taken any more; queued operations end without events (their
    /// payloads dropped), running ones are asked to stop, and this returns once their workers
    /// have finished them. Events not polled are dropped.
    pub fn close(&self) {
        let mut inner = self.inner.lock();
        inner.closed = true;
        inner.ops.retain(|_, e| {
            e.cancel.store(true, Ordering::Release);
            matches!(e.phase, Phase::Running)
        });
        while !inner.ops.is_empty() {
            inner = self.ended.wait(inner);
        }
        inner.ready.clear();
        inner.cookies.clear();
        self.signal.lower();
    }

    /// Operations queued or running.
    pub fn in_flight(&self) -> usize {
        self.inner.lock().ops.len()
    }
}
