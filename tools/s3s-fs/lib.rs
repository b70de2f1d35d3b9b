//! Empty on purpose: this package only puts s3s-fs 0.14.1 (with its `binary` feature) into the
//! workspace, for `cargo build -p s3s-fs` (scripts/install-s3s-fs). See Cargo.toml.
