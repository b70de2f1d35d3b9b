//! `hipObjParseRdmaReply` called through the C ABI with arbitrary bytes and lengths.
//!
//! Input: byte 0 picks `replyLen` (high bit set: `(byte & 0x7f) % (rest + 1)`, else all of the
//! rest); the rest is the reply buffer. Properties, for the buffer placed flush against a guard
//! page after it (so a read past `replyLen` crashes) and against one before it (a read before
//! the start crashes; the bytes after `replyLen` are present and must be ignored):
//! success exactly when the model accepts the first `replyLen` bytes, `*httpCode` = the model's
//! code on success and untouched on failure, failure is `{hipObjInvalidValue, 0}`. NULL reply,
//! NULL httpCode and a length beyond `isize::MAX` are `hipObjInvalidValue` with nothing written.
#![no_main]

use hipobj::error::OpError;
use hipobj::ffi::{hipObjError_t, hipObjParseRdmaReply};
use hipobj_fuzz::guarded::GuardedPages;
use hipobj_fuzz::model;
use libfuzzer_sys::fuzz_target;
use std::ffi::{c_char, c_int};
use std::sync::OnceLock;

const UNTOUCHED: c_int = 0x5a5a_5a5a;
const INVALID: hipObjError_t = hipObjError_t {
    opError: OpError::InvalidValue,
    hipError: 0,
};

static REGION: OnceLock<GuardedPages> = OnceLock::new();

fn parse(reply: *const c_char, len: usize) -> (hipObjError_t, c_int) {
    let mut code = UNTOUCHED;
    // SAFETY: `reply` is readable for `len` bytes (or NULL), `code` is a live c_int.
    let status = unsafe { hipObjParseRdmaReply(reply, len, &mut code) };
    (status, code)
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, buffer)) = data.split_first() else {
        return;
    };
    let region = REGION.get_or_init(|| GuardedPages::new(64 * 1024));
    if buffer.len() > region.capacity() {
        return;
    }
    let len = if mode & 0x80 != 0 {
        usize::from(mode & 0x7f) % (buffer.len() + 1)
    } else {
        buffer.len()
    };
    let want = model::parse_reply(&buffer[..len]);
    let expect = |(status, code): (hipObjError_t, c_int), placement: &str| match want {
        Some(m) => {
            assert_eq!(
                status,
                hipObjError_t::SUCCESS,
                "{placement}: {buffer:?}[..{len}]"
            );
            assert_eq!(code, m.http_code(), "{placement}: {buffer:?}[..{len}]");
        }
        None => {
            assert_eq!(status, INVALID, "{placement}: {buffer:?}[..{len}]");
            assert_eq!(code, UNTOUCHED, "{placement}: code written on failure");
        }
    };

    // Exactly `len` bytes, the next byte inaccessible.
    let at_end = region.at_end(&buffer[..len]);
    expect(parse(at_end.cast(), len), "before the trailing guard");
    // The whole buffer, the byte before it inaccessible, only `len` bytes of it count.
    let at_start = region.at_start(buffer);
    expect(parse(at_start.cast(), len), "after the leading guard");

    // Argument checks: nothing is read or written.
    let (status, code) = parse(std::ptr::null(), len);
    assert_eq!((status, code), (INVALID, UNTOUCHED), "NULL reply");
    // SAFETY: the reply is readable for `len` bytes; httpCode NULL is a documented input.
    let status = unsafe { hipObjParseRdmaReply(at_start.cast(), len, std::ptr::null_mut()) };
    assert_eq!(status, INVALID, "NULL httpCode");
    let huge = (isize::MAX as usize).wrapping_add(1 + len);
    let (status, code) = parse(at_end.cast(), huge);
    assert_eq!((status, code), (INVALID, UNTOUCHED), "replyLen {huge}");
});
