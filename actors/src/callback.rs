//! Which threads are inside an application callback.
//!
//! A transfer started from a callback must not wait for a connection (it could be waiting for the
//! one its own outer transfer holds), so the pool asks [`in_callback`]. The marker is a per-thread
//! depth, raised by [`CallbackGuard`] for exactly as long as a callback runs, on every exit path.

use std::cell::Cell;

#[cfg(not(hipobj_loom))]
std::thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}
#[cfg(hipobj_loom)]
loom::thread_local! {
    static DEPTH: Cell<u32> = Cell::new(0);
}

/// Marks the current thread as running a callback until dropped.
#[must_use = "the marker lasts only while the guard lives"]
pub struct CallbackGuard {
    // Not Send: the guard must be dropped on the thread that raised the depth.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl CallbackGuard {
    pub fn enter() -> CallbackGuard {
        DEPTH.with(|d| d.set(d.get().saturating_add(1)));
        CallbackGuard {
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for CallbackGuard {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Whether the current thread is inside a callback.
pub fn in_callback() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

#[cfg(all(test, not(hipobj_loom)))]
mod tests {
    use super::*;

    #[test]
    fn nests_and_unwinds() {
        assert!(!in_callback());
        {
            let _a = CallbackGuard::enter();
            assert!(in_callback());
            {
                let _b = CallbackGuard::enter();
                assert!(in_callback());
            }
            assert!(in_callback());
        }
        assert!(!in_callback());
        let r = std::panic::catch_unwind(|| {
            let _g = CallbackGuard::enter();
            panic!("callback panicked");
        });
        assert!(r.is_err());
        assert!(!in_callback());
    }
}
