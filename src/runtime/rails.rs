//! The RDMA devices of a runtime (issue 40, several NICs): one **rail** per device, each with its
//! own pool of connections, application connection and port state, and the rules by which a
//! transfer picks its rail and moves to another when its own fails.
//!
//! - **Which rail.** Transfers are spread round-robin over the rails whose port is up and that are
//!   nearest the GPU (all of them without a GPU or a PCIe topology), so the parts of a large
//!   object in flight at once use every such rail. The others take transfers only when those
//!   fail or are down.
//! - **Port state.** A rail's port state is read with `ibv_query_port` at most every
//!   [`PORT_RECHECK`] when a transfer picks a rail, and at once after a transfer failed on it. A
//!   rail whose port is down takes no new transfers; when it is back it takes them again
//!   (a failback, counted when it next carries one). No thread watches it: nothing to stop at
//!   shutdown, and a transfer never uses a state older than [`PORT_RECHECK`].
//! - **Failover.** A transfer that failed on its rail by a failure of its path (the NIC, the
//!   server's RDMA: [`Error::worth_another_device`]), or on a rail whose port is now down, is
//!   run again on the next rail, with a connection and a token of that rail, within the same
//!   call; each move is counted on the rail it left.

use crate::error::{Error, Result};
use crate::pool::{AppConnection, PoolConnections, Protection};
use crate::verbs::Device;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest a rail's port state is trusted before a transfer reads it again.
pub const PORT_RECHECK: Duration = Duration::from_millis(20);

/// One device and what a runtime keeps on it. Field order is drop order: the connections go
/// before the device they were made on.
pub(super) struct Rail {
    pub(super) protection: Protection,
    pub(super) connections: PoolConnections,
    pub(super) app_connection: AppConnection,
    /// PCIe distance to the GPU (0 for every rail without a GPU; `u32::MAX` for a device
    /// without a PCIe topology beside a GPU).
    distance: u32,
    port: PortWatch,
    counters: RailCounters,
    pub(super) device: Arc<Device>,
}

/// What a rail has done, for `hipobj info`, the CLI's and Python's statistics and the tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RailStats {
    pub device: String,
    /// The port was up when last read.
    pub port_up: bool,
    /// Transfers that succeeded on this rail, and their bytes.
    pub transfers: u64,
    pub bytes: u64,
    /// Transfers that failed here and were run again on another rail.
    pub failovers: u64,
    /// Times the port was seen going down, and coming back.
    pub port_downs: u64,
    pub port_ups: u64,
    /// Times this rail carried a transfer again after its port came back.
    pub failbacks: u64,
}

impl RailStats {
    /// One line for several devices, empty for one: what each carried, then the failovers and
    /// failbacks (`rxe0 40 transfers, rxe2 38 (port down); 2 failovers, 1 failback`). The CLI's
    /// closing line and Python's session text use it.
    pub fn summary(stats: &[RailStats]) -> String {
        if stats.len() < 2 {
            return String::new();
        }
        let each: Vec<String> = stats
            .iter()
            .map(|r| {
                let down = if r.port_up { "" } else { " (port down)" };
                format!("{} {} transfers{down}", r.device, r.transfers)
            })
            .collect();
        let failovers: u64 = stats.iter().map(|r| r.failovers).sum();
        let failbacks: u64 = stats.iter().map(|r| r.failbacks).sum();
        format!(
            "{}; {failovers} failovers, {failbacks} failbacks",
            each.join(", ")
        )
    }
}

#[derive(Default)]
struct RailCounters {
    transfers: AtomicU64,
    bytes: AtomicU64,
    failovers: AtomicU64,
    failbacks: AtomicU64,
}

/// The port state of a rail, read again when older than [`PORT_RECHECK`].
struct PortWatch {
    up: AtomicBool,
    /// Milliseconds after `epoch` when the state was last read.
    read_at_ms: AtomicU64,
    epoch: Instant,
    downs: AtomicU64,
    ups: AtomicU64,
    /// The port came back and no transfer has used the rail since.
    returned: AtomicBool,
}

impl PortWatch {
    fn new() -> PortWatch {
        PortWatch {
            up: AtomicBool::new(true),
            read_at_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            downs: AtomicU64::new(0),
            ups: AtomicU64::new(0),
            returned: AtomicBool::new(false),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Record a reading of the port state, counting changes.
    fn record(&self, device: &str, up: bool) {
        self.read_at_ms
            .store(self.now_ms().max(1), Ordering::Relaxed);
        let was = self.up.swap(up, Ordering::AcqRel);
        match (was, up) {
            (true, false) => {
                self.downs.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    device,
                    "RDMA port down: its transfers move to the other devices"
                );
            }
            (false, true) => {
                self.ups.fetch_add(1, Ordering::Relaxed);
                self.returned.store(true, Ordering::Release);
                tracing::info!(device, "RDMA port up again: it takes transfers again");
            }
            _ => {}
        }
    }
}

impl Rail {
    pub(super) fn new(
        device: Arc<Device>,
        protection: Protection,
        connections: PoolConnections,
        app_connection: AppConnection,
        distance: u32,
    ) -> Rail {
        Rail {
            protection,
            connections,
            app_connection,
            distance,
            port: PortWatch::new(),
            counters: RailCounters::default(),
            device,
        }
    }

    /// The port state, read again now (`ibv_query_port`); a port that cannot be queried is down.
    fn read_port(&self) -> bool {
        let up = self.device.port_is_active().unwrap_or_else(|e| {
            tracing::debug!(device = self.device.name(), "port state unreadable: {e}");
            false
        });
        self.port.record(self.device.name(), up);
        up
    }

    /// The port state, read again if older than [`PORT_RECHECK`].
    fn is_up(&self) -> bool {
        let read_at = self.port.read_at_ms.load(Ordering::Relaxed);
        let age = self.port.now_ms().saturating_sub(read_at);
        if read_at == 0 || age >= PORT_RECHECK.as_millis() as u64 {
            return self.read_port();
        }
        self.port.up.load(Ordering::Acquire)
    }

    fn succeeded(&self, bytes: usize) {
        self.counters.transfers.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
        if self.port.returned.swap(false, Ordering::AcqRel) {
            self.counters.failbacks.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                device = self.device.name(),
                "failback: transfers on this device again"
            );
        }
    }

    fn failed_over(&self, e: &Error) {
        self.counters.failovers.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            device = self.device.name(),
            "transfer failed here ({e}); trying the next device"
        );
    }

    pub(super) fn stats(&self) -> RailStats {
        let c = &self.counters;
        RailStats {
            device: self.device.name().to_owned(),
            port_up: self.port.up.load(Ordering::Acquire),
            transfers: c.transfers.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            failovers: c.failovers.load(Ordering::Relaxed),
            port_downs: self.port.downs.load(Ordering::Relaxed),
            port_ups: self.port.ups.load(Ordering::Relaxed),
            failbacks: c.failbacks.load(Ordering::Relaxed),
        }
    }
}

/// A runtime's rails, first the preferred one (nearest the GPU, or first named).
pub(super) struct Rails {
    rails: Vec<Rail>,
    /// Round-robin position among the rails a transfer may start on.
    next: AtomicUsize,
}

impl Rails {
    /// `rails` must not be empty.
    pub(super) fn new(rails: Vec<Rail>) -> Result<Rails> {
        if rails.is_empty() {
            return Err(Error::internal("a runtime without an RDMA device"));
        }
        Ok(Rails {
            rails,
            next: AtomicUsize::new(0),
        })
    }

    pub(super) fn first(&self) -> &Rail {
        &self.rails[0]
    }

    pub(super) fn all(&self) -> &[Rail] {
        &self.rails
    }

    /// Run `attempt` on rails in [`Rails::order`] until one succeeds, or fails in a way
    /// another rail would not mend, or none is left. With several rails there is one attempt
    /// more, on the first rail of a fresh order: the rail a transfer failed over to may have
    /// failed under the load it just took over (RC retries exhausted on an overrun NIC), and a
    /// transfer whose only up rail failed that way is mended there too. A single rail makes one
    /// attempt: its caller's retrier decides. `bytes` is counted on the rail that succeeded.
    pub(super) fn run<T>(
        &self,
        bytes: usize,
        mut attempt: impl FnMut(usize, &Rail) -> Result<T>,
    ) -> Result<T> {
        let order = self.order();
        let attempts = order.len() + usize::from(self.rails.len() > 1);
        for n in 0..attempts {
            let index = match order.get(n) {
                Some(&index) => index,
                None => self.order().first().copied().unwrap_or(0),
            };
            let rail = &self.rails[index];
            let e = match attempt(index, rail) {
                Ok(v) => {
                    rail.succeeded(bytes);
                    return Ok(v);
                }
                Err(e) => e,
            };
            // Read the port at once: a path that failed because its link went down shows it.
            let port_down = !rail.read_port();
            let another_may_succeed = e.worth_another_device() || port_down;
            if n + 1 == attempts || !another_may_succeed {
                return Err(e);
            }
            rail.failed_over(&e);
        }
        Err(Error::internal("no RDMA device to run the transfer on"))
    }

    /// The rails a transfer tries, in order: the next in round-robin of the up rails nearest the
    /// GPU, the rest of those, then the other up rails by distance; when no port is up, every
    /// rail in configured order (a state read just before the port came back must not fail the
    /// call without a try).
    pub(super) fn order(&self) -> Vec<usize> {
        let up: Vec<usize> = (0..self.rails.len())
            .filter(|&i| self.rails[i].is_up())
            .collect();
        let distances: Vec<u32> = self.rails.iter().map(|r| r.distance).collect();
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        rail_order(&up, &distances, turn)
    }

    pub(super) fn stats(&self) -> Vec<RailStats> {
        self.rails.iter().map(Rail::stats).collect()
    }
}

/// The order of [`Rails::order`], given the rails whose port is up (ascending), each rail's
/// distance and the round-robin turn.
pub(super) fn rail_order(up: &[usize], distances: &[u32], turn: usize) -> Vec<usize> {
    if up.is_empty() {
        return (0..distances.len()).collect();
    }
    let distance = |i: usize| distances.get(i).copied().unwrap_or(u32::MAX);
    let nearest = up.iter().map(|&i| distance(i)).min().unwrap_or(0);
    let stripe: Vec<usize> = up
        .iter()
        .copied()
        .filter(|&i| distance(i) == nearest)
        .collect();
    let start = turn % stripe.len();
    let mut order: Vec<usize> = stripe[start..]
        .iter()
        .chain(&stripe[..start])
        .copied()
        .collect();
    let mut rest: Vec<usize> = up.iter().copied().filter(|i| !stripe.contains(i)).collect();
    rest.sort_by_key(|&i| distance(i));
    order.extend(rest);
    order
}

#[cfg(test)]
mod tests {
    use super::rail_order;

    #[test]
    fn transfers_take_turns_on_the_up_rails() {
        let d = [0, 0, 0];
        assert_eq!(rail_order(&[0, 1, 2], &d, 0), [0, 1, 2]);
        assert_eq!(rail_order(&[0, 1, 2], &d, 1), [1, 2, 0]);
        assert_eq!(rail_order(&[0, 1, 2], &d, 5), [2, 0, 1]);
        // Rail 1 down: never tried while another is up.
        assert_eq!(rail_order(&[0, 2], &d, 0), [0, 2]);
        assert_eq!(rail_order(&[0, 2], &d, 1), [2, 0]);
    }

    #[test]
    fn rails_far_from_the_gpu_only_take_over() {
        let d = [2, 6, 2];
        for turn in 0..4 {
            let order = rail_order(&[0, 1, 2], &d, turn);
            assert_eq!(order[2], 1, "the far rail comes last: {order:?}");
        }
        assert_eq!(rail_order(&[1, 2], &d, 0), [2, 1]);
        assert_eq!(
            rail_order(&[1], &d, 7),
            [1],
            "alone, the far rail takes everything"
        );
    }

    #[test]
    fn with_every_port_down_every_rail_is_tried_in_order() {
        assert_eq!(rail_order(&[], &[0, 0], 3), [0, 1]);
    }
}
