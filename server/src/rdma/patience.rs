//! How long a transfer may go without progress (issue 22): the deadline follows the transfer's
//! own progress and this machine's measured completion rate instead of a fixed time.
//!
//! - [`RateMeter`]: a moving average of the time one byte takes to complete, over every transfer
//!   of this server (picoseconds per byte, published in `/_hipobj/stats` as
//!   `completion_ps_per_byte`). On a busy or slow machine (Soft-RoCE under TCG, shared cores) it
//!   rises, and so does the patience of every transfer.
//! - [`Patience`]: one transfer's clocks. The inactivity limit is [`FACTOR`] times the time the
//!   bytes at the NIC are expected to take at the measured rate, never below the configured
//!   watchdog (the floor) and never above [`CEILING_FACTOR`] times it, so a dead peer is still
//!   aborted within a bounded time. Each completion restarts the inactivity clock. A gap between
//!   two turns of the poller longer than [`STALL_GAP`] means the poller itself did not run (the
//!   host's CPUs were taken, the process was stopped): that time is not the peer's fault and is
//!   added to both deadlines. So is, for the total deadline, the time nothing was at the NIC
//!   (the local end, file I/O on a busy machine, had every slot): the total deadline measures
//!   the peer's time only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The inactivity limit is this many times the expected time of the bytes in flight.
pub const FACTOR: u32 = 8;
/// The inactivity limit is at most this many times the configured watchdog (the floor).
pub const CEILING_FACTOR: u32 = 15;
/// A poller turn that came this late means the poller was not running (its longest planned
/// wait, on the local end, is 20 ms); with a floor under 100 ms, half the floor.
pub const STALL_GAP: Duration = Duration::from_millis(50);
/// Weight of a new sample in the moving average: 1 / this.
const EWMA_WEIGHT: u64 = 8;

/// The measured time per completed byte of this machine, shared by every transfer.
#[derive(Debug)]
pub struct RateMeter<'a> {
    /// Picoseconds per byte, 0 before the first sample.
    ps_per_byte: &'a AtomicU64,
}

impl<'a> RateMeter<'a> {
    pub fn new(ps_per_byte: &'a AtomicU64) -> Self {
        RateMeter { ps_per_byte }
    }

    /// `bytes` completed in `took`: fold the sample into the moving average.
    pub fn observe(&self, bytes: u64, took: Duration) {
        if bytes == 0 {
            return;
        }
        let sample = (took.as_nanos().saturating_mul(1000) / u128::from(bytes)).max(1);
        let sample = u64::try_from(sample).unwrap_or(u64::MAX);
        // A lost race only drops one sample of the average: fetch_update retries on conflict.
        let _ = self
            .ps_per_byte
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(if old == 0 {
                    sample
                } else {
                    let blended = (u128::from(old) * u128::from(EWMA_WEIGHT - 1)
                        + u128::from(sample))
                        / u128::from(EWMA_WEIGHT);
                    u64::try_from(blended).unwrap_or(u64::MAX)
                })
            });
    }

    /// The time `bytes` are expected to take at the measured rate (zero before any sample).
    pub fn expected(&self, bytes: u64) -> Duration {
        let ps = u128::from(self.ps_per_byte.load(Ordering::Relaxed)) * u128::from(bytes);
        let nanos = ps / 1000;
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// The clocks of one transfer.
#[derive(Debug)]
pub struct Patience {
    /// The configured watchdog: the inactivity limit is never shorter.
    floor: Duration,
    started: Instant,
    /// Last completion, or the last time nothing was at the NIC; pushed on by stalls.
    last_progress: Instant,
    last_turn: Instant,
    /// A gap between turns at least this long is a stall.
    stall_gap: Duration,
    /// Time the poller did not run (gaps of `stall_gap` or more).
    stalled: Duration,
    /// Nothing was at the NIC at the last turn.
    nic_idle: bool,
    /// Time nothing was at the NIC (the local end's time), stalls apart.
    local: Duration,
}

impl Patience {
    pub fn new(floor: Duration, now: Instant) -> Self {
        Patience {
            floor,
            started: now,
            last_progress: now,
            last_turn: now,
            stall_gap: STALL_GAP.min(floor / 2),
            stalled: Duration::ZERO,
            nic_idle: true,
            local: Duration::ZERO,
        }
    }

    /// One turn of the poller at `now`; returns the stall it found (zero for an ordinary turn).
    pub fn turn(&mut self, now: Instant) -> Duration {
        let gap = now.saturating_duration_since(self.last_turn);
        self.last_turn = now;
        if gap < self.stall_gap {
            if self.nic_idle {
                self.local += gap;
            }
            return Duration::ZERO;
        }
        self.stalled += gap;
        self.last_progress += gap;
        gap
    }

    /// Whether anything is at the NIC as this turn ends.
    pub fn at_nic(&mut self, busy: bool) {
        self.nic_idle = !busy;
    }

    /// Something completed (or nothing is at the NIC) at `now`: the inactivity clock restarts.
    /// Returns the time since the previous progress, stalls excluded (the sample for the meter).
    pub fn progressed(&mut self, now: Instant) -> Duration {
        let since = now.saturating_duration_since(self.last_progress);
        self.last_progress = now;
        since
    }

    /// The inactivity limit when `expected` is the measured time of the bytes at the NIC.
    pub fn inactivity_limit(&self, expected: Duration) -> Duration {
        expected
            .saturating_mul(FACTOR)
            .clamp(self.floor, self.floor.saturating_mul(CEILING_FACTOR))
    }

    /// No progress for longer than the inactivity limit.
    pub fn inactive(&self, now: Instant, expected: Duration) -> bool {
        now.saturating_duration_since(self.last_progress) >= self.inactivity_limit(expected)
    }

    /// The total deadline passed: the peer's time (stalls and the local end's time apart)
    /// reached `base` (the size-proportional limit) or, when the machine's measured rate is
    /// slower, [`FACTOR`] times the whole transfer's expected time.
    pub fn overdue(&self, now: Instant, base: Duration, expected_total: Duration) -> bool {
        let limit = base.max(
            self.floor
                .saturating_add(expected_total.saturating_mul(FACTOR)),
        );
        let peer_time = now
            .saturating_duration_since(self.started)
            .saturating_sub(self.stalled)
            .saturating_sub(self.local);
        peer_time >= limit
    }

    /// The time the poller did not run so far.
    pub fn stalled(&self) -> Duration {
        self.stalled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn meter_averages_samples_and_predicts() {
        let cell = AtomicU64::new(0);
        let meter = RateMeter::new(&cell);
        assert_eq!(meter.expected(1 << 20), Duration::ZERO, "no sample yet");
        // 1 MiB in 10 ms.
        meter.observe(1 << 20, 10 * MS);
        let one = meter.expected(1 << 20);
        assert!(one > 9 * MS && one < 11 * MS, "{one:?}");
        // A slower machine: samples of 100 ms per MiB pull the average up, step by step.
        for _ in 0..40 {
            meter.observe(1 << 20, 100 * MS);
        }
        let slow = meter.expected(1 << 20);
        assert!(slow > 90 * MS && slow <= 100 * MS, "{slow:?}");
        meter.observe(0, Duration::from_secs(1));
        assert_eq!(meter.expected(1 << 20), slow, "empty samples are ignored");
    }

    #[test]
    fn inactivity_limit_follows_the_rate_within_floor_and_ceiling() {
        let p = Patience::new(2000 * MS, Instant::now());
        assert_eq!(p.inactivity_limit(Duration::ZERO), 2000 * MS, "floor");
        assert_eq!(p.inactivity_limit(500 * MS), 4000 * MS, "8 x expected");
        assert_eq!(
            p.inactivity_limit(Duration::from_secs(3600)),
            30_000 * MS,
            "ceiling: a dead peer is still aborted in bounded time"
        );
    }

    #[test]
    fn a_slow_but_progressing_transfer_is_not_inactive() {
        let t0 = Instant::now();
        let mut p = Patience::new(100 * MS, t0);
        // Completions every 90 ms for 2 s (the poller turning every 10 ms): each restarts the clock.
        for i in 1..=22u32 {
            let now = t0 + 90 * MS * i;
            for back in (0..9u32).rev() {
                p.turn(now - back * 10 * MS);
            }
            p.progressed(now);
            assert!(!p.inactive(now + 50 * MS, Duration::ZERO));
        }
        // Then nothing: inactive once the floor passed (turns keep coming, no stall).
        let last = t0 + 90 * MS * 22;
        let mut now = last;
        while now < last + 100 * MS {
            now += 10 * MS;
            p.turn(now);
        }
        assert!(p.inactive(now, Duration::ZERO));
    }

    #[test]
    fn a_stalled_poller_does_not_count_against_the_peer() {
        let t0 = Instant::now();
        let mut p = Patience::new(2000 * MS, t0);
        // The poller did not run for 5 s (the host's CPUs were taken).
        let later = t0 + Duration::from_secs(5);
        assert_eq!(p.turn(later), Duration::from_secs(5));
        assert!(!p.inactive(later, Duration::ZERO));
        assert!(!p.overdue(later, 2100 * MS, Duration::ZERO));
        assert_eq!(p.stalled(), Duration::from_secs(5));
        // The stall is excluded from the sample, too.
        let sample = p.progressed(later + 20 * MS);
        assert_eq!(sample, 20 * MS);
    }

    #[test]
    fn the_local_ends_time_is_not_the_peers() {
        let t0 = Instant::now();
        let mut p = Patience::new(100 * MS, t0);
        // 1 s with nothing at the NIC (the file side had every slot), turns every 10 ms.
        let mut now = t0;
        for _ in 0..100 {
            now += 10 * MS;
            p.turn(now);
        }
        assert!(!p.overdue(now, 500 * MS, Duration::ZERO));
        // Then 500 ms with requests at the NIC: the peer's time runs out.
        p.at_nic(true);
        for _ in 0..50 {
            now += 10 * MS;
            p.turn(now);
        }
        assert!(p.overdue(now, 500 * MS, Duration::ZERO));
    }

    #[test]
    fn overdue_takes_the_slower_of_the_size_limit_and_the_measured_rate() {
        let t0 = Instant::now();
        let mut p = Patience::new(100 * MS, t0);
        p.at_nic(true);
        let at = t0 + 1000 * MS;
        assert!(p.overdue(at, 900 * MS, Duration::ZERO), "size limit");
        assert!(!p.overdue(at, 900 * MS, 200 * MS), "100 ms + 8 x 200 ms");
    }
}
