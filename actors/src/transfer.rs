//! The composition of one transfer (`hipObjGet`/`hipObjPut`), generic over its connection and
//! GPU parts so that the library and the loom models run the same sequence:
//!
//! 1. find the registration and start using it (Retired: not registered; a timed-out staging copy
//!    still running: Busy);
//! 2. for a PUT, stage device -> host ([`TransferHost::stage_out`]) before any connection is
//!    leased, so a slow copy never holds one;
//! 3. lease a connection: wait for one, or Busy at once from inside a callback (a callback's own
//!    transfer may hold the only one); Closed after shutdown. The lease moves the connection to
//!    this thread;
//! 4. the request/reply exchange on the leased connection, owned here ([`TransferParts::exchange`]);
//! 5. the lease is handed to [`TransferParts::release`] with the outcome: it returns the connection
//!    to the pool, or after a failure hands the lease to whoever recovers the connection (e.g. the
//!    connection's worker replaces its QP, [`crate::recovery`]), which returns it only once
//!    recovered;
//! 6. then, for a GET, the data is made visible on the device ([`TransferHost::stage_in`]) with
//!    only the buffer in use; the caller never waits for a recovery.

use crate::callback::in_callback;
use crate::pool::{AcquireError, Lease, Pool, Wait};
use crate::registry::{Entry, Registry, UseError, UseGuard};
use crate::stages::{self, Stage};
use crate::sync::Arc;

/// Which way a transfer moves data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The server writes into the buffer.
    Get,
    /// The server reads the buffer.
    Put,
}

/// Why the composition refused a transfer before its exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// No registration is based at the pointer (or it was just deregistered).
    NotRegistered,
    /// `[offset, offset + size)` is not inside the registration.
    OutOfRange,
    /// A staging copy of the buffer that timed out is still running.
    Pending,
    /// Every connection is leased and the caller is inside a callback.
    Busy,
    /// The pool was closed: the instance is shutting down.
    Closed,
}

/// What every transfer of an instance shares, whatever its exchange: the registry and pool (the
/// shared core), the refusal errors and the staging through the GPU runtime.
pub trait TransferHost {
    /// What a registration holds.
    type Payload;
    type Error;
    /// What the pool leases: the connection itself, moved to the transfer's thread.
    type Connection;

    fn registry(&self) -> &Registry<Self::Payload>;
    fn pool(&self) -> &Arc<Pool<Self::Connection>>;
    /// The error of a refused transfer.
    fn refused(&self, why: Refused, base: usize, size: usize, offset: u64) -> Self::Error;
    /// Before a PUT: copy device -> host if the buffer is staged (no connection is held).
    fn stage_out(
        &self,
        guard: UseGuard<Self::Payload>,
        offset: usize,
        size: usize,
    ) -> Result<UseGuard<Self::Payload>, Self::Error>;
    /// After a GET (the lease is given back): copy host -> device if staged, or make the RDMA
    /// write visible to the device.
    fn stage_in(
        &self,
        guard: UseGuard<Self::Payload>,
        offset: usize,
        size: usize,
    ) -> Result<(), Self::Error>;
}

/// What one kind of transfer adds to its instance's [`TransferHost`]: the exchange over a
/// connection and the connection's release (or recovery). `Ops` is what the exchange is handed
/// (the application's S3 client).
pub trait TransferParts<Ops: ?Sized>: TransferHost {
    /// The request/reply exchange on the leased connection.
    fn exchange(
        &self,
        connection: &mut Self::Connection,
        direction: Direction,
        buffer: &Entry<Self::Payload>,
        offset: usize,
        size: usize,
        ops: &mut Ops,
    ) -> Result<(), Self::Error>;
    /// Give the connection back: drop the lease when it is reusable, or hand it to its recovery
    /// (after a failure), which returns it to the pool once the connection is usable again.
    fn release(&self, lease: Lease<Self::Connection>, outcome: &Result<(), Self::Error>);
}

/// Start using `[base + offset, + size)` of the registration based at `base`.
pub fn use_range<P: TransferHost + ?Sized>(
    parts: &P,
    base: usize,
    size: usize,
    offset: u64,
) -> Result<UseGuard<P::Payload>, P::Error> {
    let refused = |why| parts.refused(why, base, size, offset);
    let entry = parts
        .registry()
        .lookup(base)
        .ok_or_else(|| refused(Refused::NotRegistered))?;
    let fits = usize::try_from(offset)
        .ok()
        .and_then(|o| o.checked_add(size))
        .is_some_and(|end| end <= entry.len());
    if !fits {
        return Err(refused(Refused::OutOfRange));
    }
    Entry::try_use(&entry).map_err(|e| match e {
        UseError::Retired => refused(Refused::NotRegistered),
        UseError::Pending => refused(Refused::Pending),
    })
}

/// One whole transfer (see the module documentation for the order of its steps).
pub fn run<O: ?Sized, P: TransferParts<O> + ?Sized>(
    parts: &P,
    direction: Direction,
    base: usize,
    size: usize,
    offset: u64,
    ops: &mut O,
) -> Result<(), P::Error> {
    stages::start();
    let guard = use_range(parts, base, size, offset)?;
    stages::mark(Stage::Lookup);
    let at = offset as usize; // fits: use_range checked offset + size <= len
    let guard = match direction {
        Direction::Put => parts.stage_out(guard, at, size)?,
        Direction::Get => guard,
    };
    let wait = if in_callback() && !crate::fault::broken("callback-never-waits") {
        Wait::No
    } else {
        Wait::Block
    };
    let mut lease = Pool::acquire(parts.pool(), wait).map_err(|e| {
        let why = match e {
            AcquireError::Busy => Refused::Busy,
            AcquireError::Closed => Refused::Closed,
        };
        parts.refused(why, base, size, offset)
    })?;
    stages::mark(Stage::Lease);
    let exchanged = parts.exchange(&mut lease, direction, guard.entry(), at, size, ops);
    parts.release(lease, &exchanged);
    stages::mark(Stage::Release);
    exchanged?;
    let finished = match direction {
        Direction::Get => parts.stage_in(guard, at, size),
        Direction::Put => Ok(()),
    };
    stages::mark(Stage::Finish);
    finished
}
