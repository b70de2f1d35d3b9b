//! The supervisor actor (`hipobj-sup`): lifecycle changes and the registry's only writer.

use super::registration::{already_registered, not_registered};
use super::{Gpu, InitConfig, Runtime, LIFECYCLE};
use crate::error::{Error, OpError, Result};
use crate::registry::Buffer;
use crate::verbs;
use hipobj_actors::answer::{request, Answer};
use hipobj_actors::lifecycle::InitError;
use hipobj_actors::registry::{Entry, RemoveError};
use hipobj_actors::sync::channel::{unbounded, Receiver, Sender};
use std::sync::{Arc, OnceLock};

pub(super) enum SupMsg {
    Init {
        cfg: InitConfig,
        lib: Arc<verbs::Lib>,
        gpu: Option<Gpu>,
        answer: Answer<Result<()>>,
    },
    Shutdown {
        answer: Answer<()>,
    },
    Publish {
        runtime: Arc<Runtime>,
        entry: Arc<Entry<Buffer>>,
        answer: Answer<Result<()>>,
    },
    Retire {
        runtime: Arc<Runtime>,
        base: usize,
        answer: Answer<Result<()>>,
    },
}

pub(super) struct SupervisorHandle {
    inbox: Sender<SupMsg>,
}

impl SupervisorHandle {
    pub(super) fn ask<T>(&self, make: impl FnOnce(Answer<T>) -> SupMsg) -> Result<T> {
        request(&self.inbox, make).map_err(|_| Error::internal("the supervisor has stopped"))
    }
}

pub(super) fn supervisor() -> Result<&'static SupervisorHandle> {
    static SUPERVISOR: OnceLock<std::result::Result<SupervisorHandle, String>> = OnceLock::new();
    SUPERVISOR
        .get_or_init(|| {
            let (tx, rx) = unbounded();
            std::thread::Builder::new()
                .name("hipobj-sup".into())
                .spawn(move || Supervisor.run(rx))
                .map(|_| SupervisorHandle { inbox: tx })
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::internal(format!("cannot start the supervisor thread: {e}")))
}

struct Supervisor;

impl Supervisor {
    fn run(self, inbox: Receiver<SupMsg>) {
        while let Ok(msg) = inbox.recv() {
            match msg {
                SupMsg::Init {
                    cfg,
                    lib,
                    gpu,
                    answer,
                } => {
                    let r = LIFECYCLE
                        .init(|| Runtime::build(cfg, lib, gpu))
                        .map(drop)
                        .map_err(|e| match e {
                            InitError::AlreadyInitialized => Error::new(
                                OpError::AlreadyInitialized,
                                "hipObject is already initialized",
                            ),
                            InitError::Failed(e) => e,
                        });
                    answer.send(r);
                }
                SupMsg::Shutdown { answer } => {
                    if let Some(old) = LIFECYCLE.shutdown() {
                        old.pool.close();
                        tracing::info!(
                            "hipObject shut down; resources go when the last call returns"
                        );
                    }
                    answer.send(());
                }
                SupMsg::Publish {
                    runtime,
                    entry,
                    answer,
                } => {
                    let r = runtime
                        .registry
                        .insert(entry)
                        .map_err(|e| already_registered(e.base()));
                    answer.send(r);
                }
                SupMsg::Retire {
                    runtime,
                    base,
                    answer,
                } => {
                    let r = runtime
                        .registry
                        .remove(base)
                        .map(drop)
                        .map_err(|e| match e {
                            RemoveError::NotRegistered => not_registered(base),
                            RemoveError::Busy => Error::busy(
                                "the buffer is in use or a staging copy of it still runs",
                            ),
                        });
                    answer.send(r);
                }
            }
        }
    }
}
