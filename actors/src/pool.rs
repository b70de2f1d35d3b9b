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
    use std::time::Duration;

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
        let p2 = pool.clone();
        let waiter = std::thread::spawn(move || Pool::acquire(&p2, Wait::Block).map(|l| l.slot()));
        std::thread::sleep(Duration::from_millis(20));
        let freed = a.slot();
        drop(a);
        assert_eq!(waiter.join().unwrap(), Ok(freed));
        let p3 = pool.clone();
        let _c = Pool::acquire(&pool, Wait::Block).unwrap();
        let waiter = std::thread::spawn(move || Pool::acquire(&p3, Wait::Block).map(|l| l.slot()));
        std::thread::sleep(Duration::from_millis(20));
        pool.close();
        assert_eq!(waiter.join().unwrap(), Err(AcquireError::Closed));
        drop(b);
        assert_eq!(pool.free_count(), 1);
    }
}
