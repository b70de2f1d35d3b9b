//! hipObject's concurrent core, free of RDMA and GPU code so that it runs under loom.
//!
//! Everything here imports its primitives from [`sync`], which switches to loom under
//! `--cfg hipobj_loom`. The pieces:
//! - [`supervisor`]: the actor that owns the lifecycle and the registrations and publishes them.
//! - [`pool`]: connection leases that move the connection itself; waiting for a free one, or
//!   `Busy` from a callback.
//! - [`recovery`]: the worker that renews a failed connection and only then returns it.
//! - [`registry`]: the snapshot of registered buffers and each buffer's use/pending/retired word.
//! - [`staging`]: the ticket shared by a staging copy and the call that waits for it.
//! - [`slots`]: numbered slots held by one ticket at a time (hipobj-server's staging slots).
//! - [`keyed`]: keys held by one lease at a time (hipobj-server's pairing table).
//! - [`handoff`]: a worker's loop over handed-off jobs, freeing a job's place before its answer
//!   (hipobj-server's RDMA workers).
//! - [`callback`]: the per-thread "inside a callback" depth.
//! - [`answer`]: one-shot answers to actor requests.
//! - [`batch`]: one batch queue's operations, events, depth and cancellation.
//! - [`transfer`]: the composition of one transfer (buffer use, staging, lease, exchange, recovery).
//! - [`stages`]: per-stage timing of a transfer (feature `stage-timing`, benchmarks only).
//! - [`fault`]: guard removal for the loom models' break-guards script (loom builds only).

pub mod answer;
pub mod batch;
pub mod callback;
pub mod fault;
pub mod handoff;
pub mod keyed;
pub mod pool;
pub mod recovery;
pub mod registry;
pub mod slots;
pub mod stages;
pub mod staging;
pub mod supervisor;
pub mod sync;
pub mod transfer;
