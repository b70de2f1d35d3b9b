//! Ctrl-C during a copy: the first SIGINT asks the engine to stop (no new part starts, a
//! multipart upload is aborted); a second one ends the process at once.

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
    // SAFETY: signal(2) is async-signal-safe; SIG_DFL makes the next Ctrl-C end the process.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
}

/// Install the handler; the flag the engine watches.
pub fn install() -> &'static AtomicBool {
    let handler = on_sigint as extern "C" fn(libc::c_int);
    // SAFETY: the handler only stores to an atomic and calls signal(2), both async-signal-safe.
    unsafe { libc::signal(libc::SIGINT, handler as libc::sighandler_t) };
    &INTERRUPTED
}
