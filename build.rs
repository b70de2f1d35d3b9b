//! Gives `libhipobj.so` its SONAME. Rust already limits a cdylib's dynamic exports to its
//! `#[no_mangle]` functions; `tests/c/run` checks that only the `hipObj*` ones appear.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".to_string());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhipobj.so.{major}");
    println!("cargo:rerun-if-changed=build.rs");
}
