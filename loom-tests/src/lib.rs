//! loom models of the concurrent core (run with RUSTFLAGS="--cfg hipobj_loom").
