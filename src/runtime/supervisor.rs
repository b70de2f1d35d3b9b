//! The supervisor actor (`hipobj-sup`) of this process: `hipobj_actors::supervisor` run on a named
//! thread, started by the first call that needs it (a failed start is retried by the next call).

use super::Runtime;
use crate::error::{Error, Result};
use crate::registry::Buffer;
use hipobj_actors::registry::Registry;
use hipobj_actors::supervisor::{Fault, Instance, Supervisor};
use hipobj_actors::sync::{ArcCell, StartOnce};
use std::sync::{Arc, LazyLock};

impl Instance for Runtime {
    type Payload = Buffer;

    fn registry(&self) -> &Registry<Buffer> {
        &self.registry
    }

    fn close(&self) {
        for rail in self.rails.all() {
            rail.connections.pool().close();
        }
    }
}

/// Where the current runtime is published (read lock-free by every call).
pub(super) static PUBLISHED: LazyLock<Arc<ArcCell<Runtime>>> =
    LazyLock::new(|| Arc::new(ArcCell::new(None)));

static SUPERVISOR: StartOnce<Supervisor<Runtime>> = StartOnce::new();

/// The supervisor, started now if it is not running.
pub(super) fn supervisor() -> Result<&'static Supervisor<Runtime>> {
    SUPERVISOR
        .get_or_start(|| {
            let (handle, state) = Supervisor::spawn_parts(PUBLISHED.clone());
            std::thread::Builder::new()
                .name("hipobj-sup".into())
                .spawn(move || state.run())
                .map(|_| handle)
        })
        .map_err(|e| Error::internal(format!("cannot start the supervisor thread: {e}")))
}

/// The supervisor if it was started (shutdown never starts it).
pub(super) fn running_supervisor() -> Option<&'static Supervisor<Runtime>> {
    SUPERVISOR.get()
}

pub(super) fn fault(f: Fault) -> Error {
    match f {
        Fault::Stopped => Error::internal("the supervisor has stopped"),
        Fault::Failed => Error::internal("the supervisor failed while handling this call"),
    }
}
