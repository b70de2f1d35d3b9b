//! Leases on a fixed set of connections, held by value.
//!
//! The pool owns its idle items (`free: Vec<T>`). A transfer takes a [`Lease`] for its whole
//! duration: the lease moves the item to the caller's thread, the caller uses it directly
//! (through `Deref`/`DerefMut`: no lock, no thread hop), and dropping the lease moves the item
//! back. A lease may also be sent to another thread (the item's recovery worker,
//! [`crate::recovery`]), which drops it once the item is usable again: until then the item is
//! out of the pool. With none free, a caller either waits ([`Wait::Block`]) or, from inside a
//! callback, gets [`AcquireError::Busy`] at once ([`Wait::No`]). [`Pool::close`] wakes every
//! waiter with [`AcquireError::Closed`]; leases already out keep working and still come back, so
//! every item is dropped with the pool, once.

use crate::sync::{Arc, Condvar, Mutex};
use std::ops::{Deref, DerefMut};

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

struct PoolState<T> {
    free: Vec<T>,
    closed: bool,
    /// Callers blocked in `acquire` (so that a give-back wakes someone only when someone waits:
    /// a condition variable's notify is a futex syscall even with nobody waiting).
    waiters: usize,
}

/// A fixed set of items, each either idle here or moved out in one [`Lease`].
pub struct Pool<T> {
    state: Mutex<PoolState<T>>,
    freed: Condvar,
    size: usize,
}

impl<T> Pool<T> {
    /// A pool of `items`; the first one is leased first.
    pub fn new(mut items: Vec<T>) -> Arc<Pool<T>> {
        items.reverse();
        let size = items.len();
        Arc::new(Pool {
            state: Mutex::new(PoolState {
                free: items,
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

    /// Lease a free item.
    pub fn acquire(this: &Arc<Pool<T>>, wait: Wait) -> Result<Lease<T>, AcquireError> {
        let mut st = this.state.lock();
        loop {
            if st.closed && !crate::fault::broken("lease-checks-close") {
                return Err(AcquireError::Closed);
            }
            if let Some(item) = st.free.pop() {
                return Ok(Lease {
                    pool: this.clone(),
                    item: Some(item),
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

    /// Items not leased now.
    pub fn free_count(&self) -> usize {
        self.state.lock().free.len()
    }

    /// Callers blocked in `acquire` now (tests wait on it to know a caller is blocked).
    pub fn waiters(&self) -> usize {
        self.state.lock().waiters
    }

    /// Take `item` back (also after `close`: it is dropped with the pool).
    fn give_back(&self, item: T) {
        let someone_waits = {
            let mut st = self.state.lock();
            st.free.push(item);
            st.waiters > 0
        };
        if someone_waits && !crate::fault::broken("give-back-wakes-a-waiter") {
            self.freed.notify_one();
        }
    }
}

/// A leased item, owned by the lease holder; moved back into the pool on drop.
pub struct Lease<T> {
    pool: Arc<Pool<T>>,
    /// `Some` for the lease's whole life: taken only by `Drop`.
    item: Option<T>,
}

impl<T> Deref for Lease<T> {
    type Target = T;

    fn deref(&self) -> &T {
        match &self.item {
            Some(item) => item,
            None => unreachable!("a lease holds its item until it is dropped"),
        }
    }
}

impl<T> DerefMut for Lease<T> {
    fn deref_mut(&mut self) -> &mut T {
        match &mut self.item {
            Some(item) => item,
            None => unreachable!("a lease holds its item until it is dropped"),
        }
    }
}

impl<T> Drop for Lease<T> {
    fn drop(&mut self) {
        if let Some(item) = self.item.take() {
            self.pool.give_back(item);
        }
    }
}

#[cfg(all(test, not(hipobj_loom)))]
mod tests {
    use super::*;
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    /// A thread blocked in `acquire`: returns once the pool counts it as waiting (and it has not
    /// returned), so that what the test does next happens while it waits.
    fn blocked_waiter(pool: &Arc<Pool<u32>>) -> JoinHandle<Result<u32, AcquireError>> {
        let p = pool.clone();
        let waiter = std::thread::spawn(move || Pool::acquire(&p, Wait::Block).map(|l| *l));
        let deadline = Instant::now() + Duration::from_secs(10);
        while pool.waiters() == 0 {
            assert!(!waiter.is_finished(), "acquire returned instead of waiting");
            assert!(Instant::now() < deadline, "the waiter never blocked");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!waiter.is_finished(), "the waiter is blocked");
        waiter
    }

    #[test]
    fn leases_wait_and_close() {
        let pool = Pool::new(vec![10, 11]);
        let a = Pool::acquire(&pool, Wait::Block).unwrap();
        assert_eq!(*a, 10, "the first item is leased first");
        let b = Pool::acquire(&pool, Wait::No).unwrap();
        assert_ne!(*a, *b);
        assert_eq!(
            Pool::acquire(&pool, Wait::No).err(),
            Some(AcquireError::Busy)
        );
        let waiter = blocked_waiter(&pool);
        let freed = *a;
        drop(a);
        assert_eq!(waiter.join().unwrap(), Ok(freed));
        assert_eq!(pool.waiters(), 0);
        let _c = Pool::acquire(&pool, Wait::Block).unwrap();
        let waiter = blocked_waiter(&pool);
        pool.close();
        assert_eq!(waiter.join().unwrap(), Err(AcquireError::Closed));
        assert_eq!(pool.waiters(), 0);
        drop(b);
        assert_eq!(pool.free_count(), 1);
    }

    /// The holder changes its item in place; the change comes back with it.
    #[test]
    fn a_lease_moves_its_item_out_and_back() {
        let pool = Pool::new(vec![String::from("fresh")]);
        let mut lease = Pool::acquire(&pool, Wait::No).unwrap();
        lease.push_str(" then used");
        assert_eq!(pool.free_count(), 0);
        let elsewhere = std::thread::spawn(move || drop(lease));
        elsewhere.join().unwrap();
        assert_eq!(*Pool::acquire(&pool, Wait::No).unwrap(), "fresh then used");
    }
}
