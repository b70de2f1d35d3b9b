//! The open queues of the C API, by handle: a handle is a number never reused, so a queue used
//! after destroy (or after `hipObjShutdown` closed it) is found missing and refused, never
//! dereferenced. Shutdown closes every queue still open before the runtime goes.

use super::Queue;
use crate::error::{Error, OpError, Result};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

struct Table {
    queues: BTreeMap<u64, Arc<Queue>>,
    next: u64,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    queues: BTreeMap::new(),
    next: 1,
});

fn table() -> MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Keep `queue`: its handle.
pub fn insert(queue: Queue) -> u64 {
    let mut t = table();
    let handle = t.next;
    t.next += 1;
    t.queues.insert(handle, Arc::new(queue));
    handle
}

/// The queue of `handle`, if it is open.
pub fn get(handle: u64) -> Result<Arc<Queue>> {
    table().queues.get(&handle).cloned().ok_or_else(gone)
}

/// Take the queue of `handle` out (destroy): it closes when the last call using it returns.
pub fn remove(handle: u64) -> Result<Arc<Queue>> {
    table().queues.remove(&handle).ok_or_else(gone)
}

/// Close every open queue (`hipObjShutdown`): each cancels what is left and waits for its
/// workers before this returns.
pub fn close_all() {
    let queues: Vec<Arc<Queue>> = std::mem::take(&mut table().queues).into_values().collect();
    for q in queues {
        q.close_now();
    }
}

fn gone() -> Error {
    Error::new(
        OpError::InvalidValue,
        "not an open queue (destroyed, or closed by hipObjShutdown)",
    )
}
