//! A pool of registered staging buffers, one per running transfer, registered once and reused.

use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

use super::port::{PortError, RdmaPort, StagingBuffer};

pub struct StagingPool<B: StagingBuffer> {
    free: Mutex<Vec<B>>,
    buf_len: usize,
}

impl<B: StagingBuffer> StagingPool<B> {
    /// Buffers of `buf_len` bytes, allocated (and registered) on first use.
    pub fn new(buf_len: usize) -> Self {
        StagingPool {
            free: Mutex::new(Vec::new()),
            buf_len,
        }
    }

    pub fn buf_len(&self) -> usize {
        self.buf_len
    }

    /// A free buffer, or a newly registered one.
    pub fn acquire<P: RdmaPort<Buffer = B>>(&self, port: &P) -> Result<Staged<'_, B>, PortError> {
        let reused = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let buf = match reused {
            Some(b) => b,
            None => port.alloc_staging(self.buf_len)?,
        };
        Ok(Staged {
            pool: self,
            buf: ManuallyDrop::new(buf),
        })
    }

    /// Register `n` buffers now, so the first transfers do not pay for the registration.
    pub fn prefill<P: RdmaPort<Buffer = B>>(&self, port: &P, n: usize) -> Result<(), PortError> {
        let mut fresh = Vec::with_capacity(n);
        for _ in 0..n {
            fresh.push(port.alloc_staging(self.buf_len)?);
        }
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(fresh);
        Ok(())
    }

    /// Buffers waiting for reuse.
    pub fn idle(&self) -> usize {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// A buffer on loan; it goes back to the pool when dropped.
pub struct Staged<'p, B: StagingBuffer> {
    pool: &'p StagingPool<B>,
    buf: ManuallyDrop<B>,
}

impl<B: StagingBuffer> Deref for Staged<'_, B> {
    type Target = B;
    fn deref(&self) -> &B {
        &self.buf
    }
}

impl<B: StagingBuffer> DerefMut for Staged<'_, B> {
    fn deref_mut(&mut self) -> &mut B {
        &mut self.buf
    }
}

impl<B: StagingBuffer> Drop for Staged<'_, B> {
    fn drop(&mut self) {
        // SAFETY: `buf` is taken exactly once, here, and never used afterwards.
        let buf = unsafe { ManuallyDrop::take(&mut self.buf) };
        self.pool
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::test_double::DoublePort;

    #[test]
    fn buffers_are_reused() {
        let port = DoublePort::new();
        let pool = StagingPool::new(4096);
        {
            let a = pool.acquire(&port).expect("a");
            let b = pool.acquire(&port).expect("b");
            assert_eq!(a.bytes().len(), 4096);
            assert_eq!(b.bytes().len(), 4096);
        }
        assert_eq!(pool.idle(), 2);
        let _c = pool.acquire(&port).expect("c");
        assert_eq!(pool.idle(), 1);
        pool.prefill(&port, 3).expect("prefill");
        assert_eq!(pool.idle(), 4);
    }
}
