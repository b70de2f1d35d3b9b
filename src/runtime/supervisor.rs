//! The supervisor actor (`hipobj-sup`) of this process: `hipobj_actors::supervisor` run on a named
//! thread, started by the first call that needs it (a failed start is retried by the next call).

use super::Runtime;
use crate::error::{Error, Result};
use crate::registry::Buffer;
use hipobj_actors::registry::Registry;
use hipobj_actors::supervisor::{Fault, Instance, Supervisor};
use hipobj_actors::sync::ArcCell;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

impl Instance for Runtime {
    type Payload = Buffer;

    fn registry(&self) -> &Registry<Buffer> {
        &self.registry
    }

    fn close(&self) {
        self.connections.pool().close();
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

/// A value started once on first use; a failed start is not remembered, so the next call retries.
struct StartOnce<T> {
    value: OnceLock<T>,
    starting: Mutex<()>,
}

impl<T> StartOnce<T> {
    const fn new() -> StartOnce<T> {
        StartOnce {
            value: OnceLock::new(),
            starting: Mutex::new(()),
        }
    }

    fn get(&self) -> Option<&T> {
        self.value.get()
    }

    fn get_or_start<E>(
        &self,
        start: impl FnOnce() -> std::result::Result<T, E>,
    ) -> std::result::Result<&T, E> {
        if let Some(v) = self.value.get() {
            return Ok(v);
        }
        let _one_at_a_time = self.starting.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = self.value.get() {
            return Ok(v);
        }
        let v = start()?;
        Ok(self.value.get_or_init(|| v))
    }
}

#[cfg(test)]
mod tests {
    use super::StartOnce;

    #[test]
    fn a_failed_start_is_retried() {
        let once: StartOnce<u32> = StartOnce::new();
        assert!(once.get().is_none());
        assert_eq!(once.get_or_start(|| Err("no thread")), Err("no thread"));
        assert!(once.get().is_none(), "the failure is not cached");
        assert_eq!(once.get_or_start(|| Ok::<_, &str>(7)), Ok(&7));
        assert_eq!(
            once.get_or_start(|| -> Result<u32, &str> { panic!("started twice") }),
            Ok(&7)
        );
    }
}
