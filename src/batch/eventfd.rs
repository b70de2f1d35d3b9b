//! The queue's eventfd: readable while events wait to be polled (epoll, io_uring, asyncio's
//! `add_reader`). Raised and lowered by the queue's bookkeeping under its lock, so its state
//! follows the events exactly; closed when the queue goes.

use crate::error::{Error, Result};
use hipobj_actors::batch::Signal;

pub(super) struct EventFd {
    fd: i32,
}

impl EventFd {
    pub(super) fn new() -> Result<EventFd> {
        // SAFETY: eventfd(2) takes no pointer; a negative result is an error, checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(Error::internal(format!(
                "eventfd: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(EventFd { fd })
    }

    pub(super) fn fd(&self) -> i32 {
        self.fd
    }
}

impl Signal for EventFd {
    /// Make it readable (its counter 1).
    fn raise(&self) {
        let one: u64 = 1;
        // SAFETY: `fd` is this value's open eventfd; the buffer is 8 readable bytes, as
        // eventfd(2) requires. Non-blocking: a full counter (never reached: it is 0 or 1) fails.
        let n = unsafe { libc::write(self.fd, (&one as *const u64).cast(), 8) };
        if n != 8 {
            tracing::warn!("eventfd write: {}", std::io::Error::last_os_error());
        }
    }

    /// Make it unreadable (its counter back to 0).
    fn lower(&self) {
        let mut count: u64 = 0;
        // SAFETY: `fd` is this value's open eventfd; the buffer is 8 writable bytes. Non-blocking:
        // a counter already 0 answers EAGAIN, which is the state wanted.
        let _ = unsafe { libc::read(self.fd, (&mut count as *mut u64).cast(), 8) };
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: `fd` is open and owned by this value alone; nothing uses it after drop.
        unsafe { libc::close(self.fd) };
    }
}
