//! Leases on a fixed set of connections.
//!
//! A transfer takes a [`Lease`] on a free connection for its whole duration; the lease returns the
//! connection when dropped. With none free, a caller either waits ([`Wait::Block`]) or, from inside a
//! callback, gets [`AcquireError::Busy`] at once ([`Wait::No`]). [`Pool::close`] wakes every waiter
//! with [`AcquireError::Closed`]; leases already out keep working and still come back.

use crate::sync::{Arc, Condvar, Mutex};

/// Whether an acquire may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    Block,
    No,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcquireError {
    /// Every connection is leased and the caller may not wait.
    Busy,
    /// The pool was closed (the instance is shutting down).
    Closed,
}

struct PoolState {
    free: Vec<usize>,
    closed: bool,
    /// Callers blocked in `acquire` (so that a give-back wakes someone only when someone waits:
    /// a condition variable's notify is a futex syscall even with nobody waiting).
    waiters: usize,
}

pub struct Pool {
    state: Mutex<PoolState>,
    freed: Condvar,
    size: usize,
}

impl Pool {
    /// A pool of connections `0..size`.
    pub fn new(size: usize) -> Arc<Pool> {
        Arc::new(Pool {
            state: Mutex::new(PoolState {
                free: (0..size).rev().collect(),
                closed: false,
                waiters: 0,
            }),
            freed: Condvar::new(),
            size,
        })
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Lease a free connection.
    pub fn acquire(this: &Arc<Pool>, wait: Wait) -> Result<Lease, AcquireError> {
        let mut st = this.state.lock();
        loop {
            if st.closed && !crate::fault::broken("lease-checks-close") {
                return Err(AcquireError::Closed);
            }
            if let Some(slot) = st.free.pop() {
                return Ok(Lease {
                    pool: this.clone(),
                    slot,
                });
            }
            if wait == Wait::No {
                return Err(AcquireError::Busy);
            }
            st.waiters += 1;
            st = this.freed.wait(st);
            st.waiters -= 1;
        }
    }

    /// Refuse new leases and wake every waiter.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.freed.notify_all();
    }

    /// Connections not leased now.
    pub fn free_count(&self) -> usize {
        self.state.lock().free.len()
    }

    /// Callers blocked in `acquire` now.
    #[cfg(all(test, not(hipobj_loom)))]
    fn waiting(&self) -> usize {
        self.state.lock().waiters
    }

    fn give_back(&self, slot: usize) {
        let someone_waits = {
            let mut st = self.state.lock();
            st.free.push(slot);
            st.waiters > 0
        };
        if someone_waits && !crate::fault::broken("give-back-wakes-a-waiter") {
            self.freed.notify_one();
        }
    }
}

/// A leased connection; returned to the pool on drop.
pub struct Lease {
    pool: Arc<Pool>,
    slot: usize,
}

impl Lease {
    /// Which connection this is.
    pub fn slot(&self) -> usize {
        self.slot
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.pool.give_back(self.slot);
    }
}

#[cfg(all(test, not(hipobj_loom)))]
mod tests {
    use super::*;
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    /// A thread blocked in `acquire`: returns once the pool counts it as waiting (and it has not
    /// returned), so that what the test does next happens while it waits.
    fn blocked_waiter(pool: &Arc<Pool>) -> JoinHandle<Result<usize, AcquireError>> {
        let p = pool.clone();
        let waiter = std::thread::spawn(move || Pool::acquire(&p, Wait::Block).map(|l| l.slot()));
        let deadline = Instant::now() + Duration::from_secs(10);
        while pool.waiting() == 0 {
            assert!(!waiter.is_finished(), "acquire returned instead of waiting");
            assert!(Instant::now() < deadline, "the waiter never blocked");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!waiter.is_finished(), "the waiter is blocked");
        waiter
    }

    #[test]
    fn leases_wait_and_close() {
        let pool = Pool::new(2);
        let a = Pool::acquire(&pool, Wait::Block).unwrap();
        let b = Pool::acquire(&pool, Wait::No).unwrap();
        assert_ne!(a.slot(), b.slot());
        assert_eq!(
            Pool::acquire(&pool, Wait::No).err(),
            Some(AcquireError::Busy)
        );
        let waiter = blocked_waiter(&pool);
        let freed = a.slot();
        drop(a);
        assert_eq!(waiter.join().unwrap(), Ok(freed));
        assert_eq!(pool.waiting(), 0);
        let _c = Pool::acquire(&pool, Wait::Block).unwrap();
        let waiter = blocked_waiter(&pool);
        pool.close();
        assert_eq!(waiter.join().unwrap(), Err(AcquireError::Closed));
        assert_eq!(pool.waiting(), 0);
        drop(b);
        assert_eq!(pool.free_count(), 1);
    }
}
