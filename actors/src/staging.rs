//! The ticket a staging copy shares with the call that waits for it.
//!
//! The call waits until the copy finishes or its deadline passes. On a timeout the call returns
//! while the copy keeps running: the call's use of the buffer becomes a pending copy, held by the
//! ticket, so the buffer stays busy (and its staging memory alive) until the copy ends. Whichever of
//! "copy finished" and "caller gave up" happens first decides, under the ticket's lock.

use crate::registry::{PendingGuard, UseGuard};
use crate::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How a copy ended: `Ok` or the runtime's error code.
pub type CopyResult = Result<(), i32>;

enum State<E> {
    Running,
    Finished(CopyResult),
    /// The caller gave up; the buffer is pending until the copy ends.
    Abandoned(Option<PendingGuard<E>>),
}

/// What the waiting call learns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Finished(CopyResult),
    TimedOut,
}

pub struct Ticket<E> {
    state: Mutex<State<E>>,
    done: Condvar,
}

impl<E> Ticket<E> {
    pub fn new() -> Arc<Ticket<E>> {
        Arc::new(Ticket {
            state: Mutex::new(State::Running),
            done: Condvar::new(),
        })
    }

    /// The copier reports the end of the copy. If the caller already gave up, this releases the
    /// buffer's pending mark.
    pub fn finish(&self, result: CopyResult) {
        let released = {
            let mut st = self.state.lock();
            match std::mem::replace(&mut *st, State::Finished(result)) {
                State::Running => None,
                State::Abandoned(pending) if crate::fault::broken("finish-releases-abandoned") => {
                    std::mem::forget(pending);
                    None
                }
                State::Abandoned(pending) => pending,
                State::Finished(first) => {
                    *st = State::Finished(first);
                    None
                }
            }
        };
        self.done.notify_all();
        drop(released);
    }

    /// The caller gives up now unless the copy already finished; `use_guard` becomes the pending
    /// mark on a timeout, or is handed back with the result.
    pub fn abandon(&self, use_guard: UseGuard<E>) -> (Outcome, Option<UseGuard<E>>) {
        let mut st = self.state.lock();
        match &*st {
            State::Finished(r) => (Outcome::Finished(*r), Some(use_guard)),
            State::Running => {
                *st = State::Abandoned(Some(use_guard.into_pending()));
                (Outcome::TimedOut, None)
            }
            State::Abandoned(_) => (Outcome::TimedOut, Some(use_guard)),
        }
    }

    /// The result, if the copy finished.
    pub fn result(&self) -> Option<CopyResult> {
        match &*self.state.lock() {
            State::Finished(r) => Some(*r),
            _ => None,
        }
    }

    /// Wait until the copy finishes or `deadline` passes, then decide as [`Ticket::abandon`].
    pub fn wait_until(
        &self,
        deadline: Instant,
        use_guard: UseGuard<E>,
    ) -> (Outcome, Option<UseGuard<E>>) {
        {
            let mut st = self.state.lock();
            loop {
                if matches!(&*st, State::Finished(_)) {
                    break;
                }
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                st = self
                    .done
                    .wait_timeout(st, (deadline - now).min(Duration::from_millis(50)));
            }
        }
        self.abandon(use_guard)
    }
}

#[cfg(all(test, not(hipobj_loom)))]
mod tests {
    use super::*;
    use crate::registry::{Entry, UseError};

    #[test]
    fn timeout_then_finish_releases() {
        let e = Entry::new(1, 1, ());
        let t: Arc<Ticket<()>> = Ticket::new();
        let g = Entry::try_use(&e).unwrap();
        let (o, back) = t.wait_until(Instant::now() + Duration::from_millis(5), g);
        assert_eq!(o, Outcome::TimedOut);
        assert!(back.is_none());
        assert_eq!(Entry::try_use(&e).err(), Some(UseError::Pending));
        t.finish(Ok(()));
        assert!(Entry::try_use(&e).is_ok());
    }

    #[test]
    fn finish_before_deadline() {
        let e = Entry::new(1, 1, ());
        let t: Arc<Ticket<()>> = Ticket::new();
        let t2 = t.clone();
        let h = std::thread::spawn(move || t2.finish(Err(3)));
        let (o, back) = t.wait_until(
            Instant::now() + Duration::from_secs(5),
            Entry::try_use(&e).unwrap(),
        );
        h.join().unwrap();
        assert_eq!(o, Outcome::Finished(Err(3)));
        drop(back);
        assert_eq!(e.uses(), 0);
    }
}
