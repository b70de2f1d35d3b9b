//! The library version: one source, `Cargo.toml`; the header's macros are checked against it.

pub const MAJOR: u32 = parse(env!("CARGO_PKG_VERSION_MAJOR"));
pub const MINOR: u32 = parse(env!("CARGO_PKG_VERSION_MINOR"));
pub const PATCH: u32 = parse(env!("CARGO_PKG_VERSION_PATCH"));
/// NUL-terminated for the C API.
pub const VERSION_CSTR: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

const fn parse(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut v = 0u32;
    while i < b.len() {
        v = v * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    v
}
