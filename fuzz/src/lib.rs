//! Shared pieces of the fuzz targets:
//!
//! * [`model`]: a reference model of the token and reply formats, written straight from the
//!   spec tables (docs/protocol.md sections 2 and 3) and sharing no code with the
//!   library, so a target can compare the library's answer with an independent one;
//! * [`guarded`]: memory with inaccessible pages on both sides, so an input placed flush
//!   against a guard page turns any read or write past its end into a crash libFuzzer reports
//!   (the targets run without a sanitizer runtime, see fuzz/README.md).

pub mod guarded;
pub mod model;
