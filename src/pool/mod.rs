//! RDMA connections: the QP of each connection, its memory window, its state, and the worker
//! that recovers it.
//!
//! - `protection`: memory windows per request, or the registration's rkey (docs/protocol.md 9.6).
//! - `state`: what a QP is to the protocol (pairing, the state tokens are minted from, how a
//!   request's window ends).
//! - `connection`: one QP and its window over their life (pair, bind, end a window, fence,
//!   replace).
//! - `workers`: a runtime's pool of connections and the recovery worker of each.
//! - `app`: the application connection of `hipObjGetRdmaToken`.
//!
//! **Owned by value, used on the caller's thread.** Idle connections sit in the pool
//! (`hipobj_actors::pool::Pool<Connection>`). A transfer's lease moves its connection to the
//! caller's thread, which binds and invalidates the connection's window, pairs its QP on a `428`
//! and reads its state to mint tokens and check `200` replies, all directly: no lock, no message
//! and no thread hop per request (the header keeps callbacks on the caller's thread). Dropping the
//! lease moves the connection back.
//!
//! **Recovery on the worker.** After a transfer that did not end in success, or whose window could
//! not be confirmed invalid, the caller hands its lease (the connection, by value) to the
//! connection's worker thread (`hipobj-qp-NN`) and returns at once. The worker replaces the QP
//! (and window) by fresh ones (docs/protocol.md rule 5.5) and only then drops the lease, so the
//! connection rejoins the pool with a never-paired QP; if creating the fresh QP fails, it retries
//! and the connection stays out of the pool.

mod app;
mod connection;
mod protection;
mod state;
mod workers;

pub use app::AppConnection;
pub use connection::{Connection, PostedBind, Role, LIVE_QPS};
pub use hipobj_actors::pool::{AcquireError, Wait};
pub use protection::Protection;
pub use state::{ConnState, PairOutcome, Pairing, WindowEnd};
pub use workers::{Lease, Pool, PoolConnections};
