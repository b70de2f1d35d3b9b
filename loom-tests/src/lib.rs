//! loom models of the concurrent core (run with RUSTFLAGS="--cfg hipobj_loom"; see `run`).
//!
//! The models in `tests/` drive a small in-memory runtime double composed from the actors pieces the
//! way the real runtime composes them: [`runtime_double`] (the instance, its pool, its registry and
//! the API calls), [`resource`] (memory and connections whose use after release loom can see), and
//! [`harness`] (a model runner that counts the executions loom explores).
//!
//! Without `--cfg hipobj_loom` this crate is empty, so ordinary workspace builds skip it.

#[cfg(hipobj_loom)]
pub mod harness;
#[cfg(hipobj_loom)]
pub mod resource;
#[cfg(hipobj_loom)]
pub mod runtime_double;
