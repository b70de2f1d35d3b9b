//! `CopyInFlight`: an asynchronous device/host copy that its owner polls for completion.

use std::fmt;

/// Which way a staging copy moves data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyDirection {
    /// Device memory into host memory (`hipMemcpyDeviceToHost`): PUT, `HIPOBJ_SYNC_TO_HOST`.
    DeviceToHost,
    /// Host memory into device memory (`hipMemcpyHostToDevice`): GET, `HIPOBJ_SYNC_TO_DEVICE`.
    HostToDevice,
}

impl CopyDirection {
    /// The `hipMemcpyKind` value.
    pub fn hip_kind(self) -> i32 {
        match self {
            CopyDirection::HostToDevice => 1,
            CopyDirection::DeviceToHost => 2,
        }
    }
}

/// Where a copy stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyStatus {
    /// Still running.
    Pending,
    /// Finished; the destination holds the data.
    Done,
    /// Finished with this HIP error; the destination's contents are undefined.
    Failed(i32),
}

/// One implementation's way of asking whether its copy has finished.
pub trait CopyProbe: Send {
    /// Ask once, without blocking.
    fn probe(&mut self) -> CopyStatus;
}

/// A copy that has been started and may still be running.
///
/// `poll` never blocks. Once it has reported `Done` or `Failed` it keeps reporting that without
/// asking the runtime again. Dropping a copy that is still pending doesn't stop it: the caller must
/// keep both buffers alive until it finishes (or leak them, see [`super::HostBuffer::leak`]).
pub struct CopyInFlight {
    state: CopyState,
}

enum CopyState {
    Running(Box<dyn CopyProbe>),
    Finished(CopyStatus),
}

impl CopyInFlight {
    /// A copy that runs asynchronously and is asked through `probe`.
    pub fn running(probe: Box<dyn CopyProbe>) -> CopyInFlight {
        CopyInFlight {
            state: CopyState::Running(probe),
        }
    }

    /// A copy that already finished (the blocking fallback), with its outcome.
    pub fn finished(result: Result<(), i32>) -> CopyInFlight {
        let status = match result {
            Ok(()) => CopyStatus::Done,
            Err(code) => CopyStatus::Failed(code),
        };
        CopyInFlight {
            state: CopyState::Finished(status),
        }
    }

    /// Whether the copy has finished, without blocking.
    pub fn poll(&mut self) -> CopyStatus {
        match &mut self.state {
            CopyState::Finished(status) => *status,
            CopyState::Running(probe) => {
                let status = probe.probe();
                if status != CopyStatus::Pending {
                    // Drops the probe (and with it the HIP event) as soon as the answer is known.
                    self.state = CopyState::Finished(status);
                }
                status
            }
        }
    }
}

impl fmt::Debug for CopyInFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state {
            CopyState::Running(_) => f.write_str("CopyInFlight(running)"),
            CopyState::Finished(status) => write!(f, "CopyInFlight({status:?})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Scripted(Vec<CopyStatus>, usize);
    impl CopyProbe for Scripted {
        fn probe(&mut self) -> CopyStatus {
            self.1 += 1;
            self.0.remove(0)
        }
    }

    #[test]
    fn finished_copies_report_their_outcome() {
        assert_eq!(CopyInFlight::finished(Ok(())).poll(), CopyStatus::Done);
        assert_eq!(CopyInFlight::finished(Err(1)).poll(), CopyStatus::Failed(1));
    }

    #[test]
    fn outcome_is_sticky_and_probe_is_not_asked_again() {
        let probe = Scripted(vec![CopyStatus::Pending, CopyStatus::Failed(700)], 0);
        let mut copy = CopyInFlight::running(Box::new(probe));
        assert_eq!(copy.poll(), CopyStatus::Pending);
        assert_eq!(copy.poll(), CopyStatus::Failed(700));
        // The scripted probe would panic on a third call (empty Vec): it must not be asked.
        assert_eq!(copy.poll(), CopyStatus::Failed(700));
    }

    #[test]
    fn memcpy_kinds_match_hip() {
        assert_eq!(CopyDirection::HostToDevice.hip_kind(), 1);
        assert_eq!(CopyDirection::DeviceToHost.hip_kind(), 2);
    }
}
