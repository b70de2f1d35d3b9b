//! loom models of the concurrent core (run with RUSTFLAGS="--cfg hipobj_loom"; see `run`).
//!
//! The models in `tests/` drive the real concurrent composition of `hipobj_actors` (the supervisor
//! actor on its own thread, the registry, the pool, `transfer::run`, the staging ticket) through
//! [`library`], which supplies doubles only at the RDMA and GPU edges; [`resource`] is memory and
//! connections whose use after release loom can see, and [`harness`] a model runner that counts the
//! executions loom explores; [`connection`] a pool connection that fails and is renewed, for the
//! hand-back and recovery models, which drive `hipobj_actors::pool` and `hipobj_actors::recovery`
//! directly. The `server_*` models drive hipobj-server's hand-offs, whose concurrent cores live in
//! `hipobj_actors` too: `slots` (staging slots), `keyed` (the pairing table's key leases) and
//! `handoff` (the RDMA workers' loop). `break-guards` removes each guard of `hipobj_actors::fault`
//! in turn and shows its model fail.
//!
//! Without `--cfg hipobj_loom` this crate is empty, so ordinary workspace builds skip it.

#[cfg(hipobj_loom)]
pub mod connection;
#[cfg(hipobj_loom)]
pub mod harness;
#[cfg(hipobj_loom)]
pub mod library;
#[cfg(hipobj_loom)]
pub mod resource;
