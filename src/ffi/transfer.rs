//! Transfers: `hipObjGet`, `hipObjPut`, `hipObjBufSync`, and the adapter that presents the C
//! callbacks of `hipObjOps_t` to the core as [`S3Ops`].

use super::types::{hipObjError_t, hipObjHandle_t, hipObjOps_t, RecvReplyFn, SendRequestFn};
use super::{args, boundary};
use crate::runtime::{S3Ops, TransferKind};
use crate::token::TOKEN_HEX_LEN;
use std::ffi::{c_char, c_int, c_void};

/// The application's C callbacks and their context pointer.
pub struct CallbackOps {
    send: SendRequestFn,
    recv: RecvReplyFn,
    ctx: *mut c_void,
}

impl CallbackOps {
    /// # Safety
    /// `send` and `recv` may be called with `ctx` on this thread for as long as the value lives,
    /// as `hipObjGet`/`hipObjPut` promise the application.
    pub unsafe fn new(send: SendRequestFn, recv: RecvReplyFn, ctx: *mut c_void) -> CallbackOps {
        CallbackOps { send, recv, ctx }
    }
}

/// Status the adapter reports for a callback that broke its contract (a token that cannot be
/// passed as a C string, or a reply length larger than the buffer it was given).
pub const CALLBACK_CONTRACT_VIOLATION: i32 = -1;

impl S3Ops for CallbackOps {
    /// Calls `sendRequest` with the token NUL-terminated and `tokenLen` = its length (88).
    fn send_request(&mut self, token: &str) -> i32 {
        let mut buf = [0u8; TOKEN_HEX_LEN + 1];
        let bytes = token.as_bytes();
        if bytes.len() > TOKEN_HEX_LEN || bytes.contains(&0) {
            tracing::error!(
                len = bytes.len(),
                "refusing to pass a malformed token to sendRequest"
            );
            return CALLBACK_CONTRACT_VIOLATION;
        }
        buf[..bytes.len()].copy_from_slice(bytes);
        // SAFETY: `buf` holds the token and a NUL and outlives the call; `send` and `ctx` are
        // the application's, valid per `CallbackOps::new`.
        unsafe { (self.send)(self.ctx, buf.as_ptr().cast::<c_char>(), bytes.len()) }
    }

    /// Calls `recvReply` with `buf` and `*replyLen` = its size; a returned length above that
    /// size is refused.
    fn recv_reply(&mut self, buf: &mut [u8]) -> Result<usize, i32> {
        let capacity = buf.len();
        let mut len = capacity;
        // SAFETY: `buf` is writable for `capacity` bytes and `len` is a live usize for the
        // duration of the call; `recv` and `ctx` are valid per `CallbackOps::new`.
        let status: c_int =
            unsafe { (self.recv)(self.ctx, buf.as_mut_ptr().cast::<c_char>(), &mut len) };
        if status != 0 {
            return Err(status);
        }
        if len > capacity {
            tracing::error!(
                len,
                capacity,
                "recvReply reported more bytes than its buffer holds"
            );
            return Err(CALLBACK_CONTRACT_VIOLATION);
        }
        Ok(len)
    }
}

/// # Safety
/// `ops` is NULL or points at a readable `hipObjOps_t`; its callbacks may be called with `ctx`.
unsafe fn transfer(
    name: &'static str,
    kind: TransferKind,
    devPtr: *const c_void,
    size: usize,
    offset: libc::off_t,
    ops: *const hipObjOps_t,
    ctx: *mut c_void,
) -> hipObjError_t {
    boundary::call(name, || {
        let rt = args::runtime()?;
        // SAFETY: forwarded from this function's contract.
        let (send, recv, span) = unsafe { args::transfer_request(ops, devPtr, size, offset) }?;
        // SAFETY: the application hands over these callbacks and ctx for this call.
        let mut callbacks = unsafe { CallbackOps::new(send, recv, ctx) };
        rt.transfer(kind, span.ptr, span.size, span.offset, &mut callbacks)
    })
}

/// `hipObjGet`: not initialised; ops/callbacks NULL; devPtr NULL, size 0, offset < 0; then the
/// core. `handle` is not used.
///
/// # Safety
/// `ops` is NULL or points at a readable `hipObjOps_t` whose callbacks may be called with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn hipObjGet(
    handle: hipObjHandle_t,
    devPtr: *mut c_void,
    size: usize,
    offset: libc::off_t,
    ops: *mut hipObjOps_t,
    ctx: *mut c_void,
) -> hipObjError_t {
    let _ = handle;
    // SAFETY: forwarded from this function's contract.
    unsafe {
        transfer(
            "hipObjGet",
            TransferKind::Get,
            devPtr,
            size,
            offset,
            ops,
            ctx,
        )
    }
}

/// `hipObjPut`: as `hipObjGet`, with the server reading the buffer.
///
/// # Safety
/// As `hipObjGet`.
#[no_mangle]
pub unsafe extern "C" fn hipObjPut(
    handle: hipObjHandle_t,
    devPtr: *const c_void,
    size: usize,
    offset: libc::off_t,
    ops: *mut hipObjOps_t,
    ctx: *mut c_void,
) -> hipObjError_t {
    let _ = handle;
    // SAFETY: forwarded from this function's contract.
    unsafe {
        transfer(
            "hipObjPut",
            TransferKind::Put,
            devPtr,
            size,
            offset,
            ops,
            ctx,
        )
    }
}

/// `hipObjBufSync`: not initialised; direction not 0/1; devPtr NULL, size 0, offset < 0; then
/// the core.
#[no_mangle]
pub extern "C" fn hipObjBufSync(
    devPtr: *mut c_void,
    size: usize,
    offset: libc::off_t,
    direction: c_int,
) -> hipObjError_t {
    boundary::call("hipObjBufSync", || {
        let rt = args::runtime()?;
        let (span, dir) = args::sync_request(devPtr, size, offset, direction)?;
        rt.sync(span.ptr, span.size, span.offset, dir)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::REPLY_BUFFER_LEN;
    use std::ffi::CStr;

    struct Seen {
        token: Vec<u8>,
        token_len: usize,
        nul_after: bool,
        reply_len_in: usize,
        reply_len_out: usize,
        status: c_int,
    }

    unsafe extern "C" fn send(ctx: *mut c_void, token: *const c_char, len: usize) -> c_int {
        // SAFETY: ctx is the test's Seen; token is NUL-terminated per the adapter.
        let seen = unsafe { &mut *ctx.cast::<Seen>() };
        // SAFETY: the adapter passes a NUL-terminated token.
        seen.token = unsafe { CStr::from_ptr(token) }.to_bytes().to_vec();
        seen.token_len = len;
        // SAFETY: the adapter's buffer holds len + 1 bytes.
        seen.nul_after = unsafe { *token.add(len) } == 0;
        seen.status
    }

    unsafe extern "C" fn recv(ctx: *mut c_void, reply: *mut c_char, len: *mut usize) -> c_int {
        // SAFETY: ctx is the test's Seen; reply/len are the adapter's.
        let seen = unsafe { &mut *ctx.cast::<Seen>() };
        // SAFETY: len points at the adapter's length and reply at its buffer of *len bytes.
        unsafe {
            seen.reply_len_in = *len;
            let n = seen.reply_len_out.min(*len);
            std::ptr::write_bytes(reply, b'7', n);
            *len = seen.reply_len_out;
        }
        seen.status
    }

    fn seen(status: c_int, reply_len_out: usize) -> Seen {
        Seen {
            token: vec![],
            token_len: 0,
            nul_after: false,
            reply_len_in: 0,
            reply_len_out,
            status,
        }
    }

    #[test]
    fn send_passes_88_chars_and_a_nul() {
        let mut s = seen(0, 0);
        // SAFETY: the callbacks above accept a Seen as ctx, which outlives `ops`.
        let mut ops = unsafe { CallbackOps::new(send, recv, (&mut s as *mut Seen).cast()) };
        let token = "ab".repeat(44);
        assert_eq!(ops.send_request(&token), 0);
        assert_eq!(s.token, token.as_bytes());
        assert_eq!(s.token_len, 88);
        assert!(s.nul_after);
    }

    #[test]
    fn send_returns_the_callback_status() {
        let mut s = seen(-5, 0);
        // SAFETY: as above.
        let mut ops = unsafe { CallbackOps::new(send, recv, (&mut s as *mut Seen).cast()) };
        assert_eq!(ops.send_request(&"0".repeat(88)), -5);
        assert_eq!(
            ops.send_request(&"0".repeat(89)),
            CALLBACK_CONTRACT_VIOLATION
        );
        assert_eq!(ops.send_request("ab\0cd"), CALLBACK_CONTRACT_VIOLATION);
    }

    #[test]
    fn recv_gets_buffer_size_and_length_is_bounded() {
        let mut buf = [0u8; REPLY_BUFFER_LEN];
        let mut s = seen(0, 3);
        // SAFETY: as above.
        let mut ops = unsafe { CallbackOps::new(send, recv, (&mut s as *mut Seen).cast()) };
        assert_eq!(ops.recv_reply(&mut buf), Ok(3));
        assert_eq!(s.reply_len_in, 512);
        assert_eq!(&buf[..4], b"777\0");
        s.reply_len_out = 512;
        // SAFETY: as above.
        let mut ops = unsafe { CallbackOps::new(send, recv, (&mut s as *mut Seen).cast()) };
        assert_eq!(ops.recv_reply(&mut buf), Ok(512));
        s.reply_len_out = 513;
        // SAFETY: as above.
        let mut ops = unsafe { CallbackOps::new(send, recv, (&mut s as *mut Seen).cast()) };
        assert_eq!(ops.recv_reply(&mut buf), Err(CALLBACK_CONTRACT_VIOLATION));
        s.reply_len_out = 2;
        s.status = -3;
        // SAFETY: as above.
        let mut ops = unsafe { CallbackOps::new(send, recv, (&mut s as *mut Seen).cast()) };
        assert_eq!(ops.recv_reply(&mut buf), Err(-3));
    }
}
