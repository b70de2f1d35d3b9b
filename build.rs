//! Gives `libhipobj.so` its SONAME and keeps the dependencies' symbols out of its exports. Rust
//! limits a cdylib's dynamic exports to the `#[no_mangle]` functions of the crate and of its
//! dependencies; `tests/c/run` checks that only the `hipObj*` ones appear.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".to_string());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhipobj.so.{major}");
    // Symbols of the dependencies (rlibs are archives) are not exported: crc-fast, for one, has C
    // functions of its own, exported when a build that includes the server turns its `ffi`
    // feature on (s3s asks for its defaults).
    println!("cargo:rustc-cdylib-link-arg=-Wl,--exclude-libs,ALL");
    println!("cargo:rerun-if-changed=build.rs");
}
