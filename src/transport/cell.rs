//! One cell of the decision (an endpoint x size class x direction x destination): the recent
//! throughput of each path, the path it holds, and when it next probes the other one.
//!
//! ```text
//! starting (not both paths measured):  the default path (RDMA from 1 MiB up, HTTP below);
//!     every START_EVERY-th transfer probes the other path, until each has MIN_SAMPLES
//!     -> settled on the faster median (no margin: nothing is held yet)
//! settled on path P:                   P; every `every` x slowdown-th transfer probes the
//!     other path Q (slowdown: median(P) / median(Q) when that beats 1 + margin, else 1: a probe
//!     of a path k times slower comes k times more rarely, so probing costs about 1/`every` of
//!     the time whatever the gap), and so does the next transfer when Q's newest sample is
//!     older than `stale`; either only once the probe is affordable: the time since Q's newest
//!     sample is at least one probe's expected time (bytes / median(Q)) / `probe_share`, so
//!     that probes take at most that share of the time (a cell just measured on both paths,
//!     by forced transfers, say, does not probe again at once). The next transfer probes
//!     whatever the budget when a sample made P look worse than Q
//!     probe: median(Q) > median(P) * (1 + margin)  -> streak + 1, probe again at once;
//!            `confirm` probes in a row             -> switch to Q (every back to min)
//!     probe: otherwise                              -> streak 0, `every` doubles (to max)
//! ```

use super::{Path, Tuning};
use std::collections::VecDeque;
use std::time::Duration;

/// Transfers of the other path each path needs before the cell compares them.
pub(super) const MIN_SAMPLES: usize = 3;
/// While starting, every START_EVERY-th transfer probes the path not yet measured.
const START_EVERY: u32 = 2;

/// The recent throughput samples of one path (bytes per second, and when each was taken).
#[derive(Debug, Default)]
struct Window {
    samples: VecDeque<(f64, Duration)>,
}

impl Window {
    fn push(&mut self, rate: f64, at: Duration, cap: usize) {
        if self.samples.len() >= cap.max(1) {
            self.samples.pop_front();
        }
        self.samples.push_back((rate, at));
    }

    fn len(&self) -> usize {
        self.samples.len()
    }

    /// The median rate (None without samples): one outlier of either sign does not move it.
    fn median(&self) -> Option<f64> {
        let mut rates: Vec<f64> = self.samples.iter().map(|s| s.0).collect();
        rates.sort_by(f64::total_cmp);
        let n = rates.len();
        match n {
            0 => None,
            _ if n % 2 == 1 => Some(rates[n / 2]),
            _ => Some((rates[n / 2 - 1] + rates[n / 2]) / 2.0),
        }
    }

    fn newest(&self) -> Option<Duration> {
        self.samples.back().map(|s| s.1)
    }
}

/// What the cell answers for its next transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Answer {
    /// The default path of a cell not yet measured on both paths.
    Default(Path),
    /// The path the measurements chose.
    Measured(Path),
    /// The other path, to see whether conditions changed.
    Probe(Path),
}

/// One cell's state.
#[derive(Debug)]
pub(super) struct Cell {
    /// The path held (the default one until settled).
    held: Path,
    settled: bool,
    windows: [Window; 2],
    /// Probe the other path every `every`-th transfer.
    every: u32,
    since_probe: u32,
    /// Probes in a row that found the other path faster by the margin.
    streak: u32,
    /// The next transfer probes (a sample made the held path look worse, or a probe confirms).
    probe_next: bool,
    /// Times the held path changed after settling.
    pub(super) switches: u64,
}

impl Cell {
    pub(super) fn new(default: Path, tuning: &Tuning) -> Cell {
        Cell {
            held: default,
            settled: false,
            windows: [Window::default(), Window::default()],
            every: tuning.min_every,
            since_probe: 0,
            streak: 0,
            probe_next: false,
            switches: 0,
        }
    }

    fn window(&self, path: Path) -> &Window {
        &self.windows[path.index()]
    }

    /// The path for the next transfer, of `bytes` (and counts it towards the next probe).
    pub(super) fn answer(&mut self, now: Duration, bytes: u64, tuning: &Tuning) -> Answer {
        let other = self.held.other();
        self.since_probe += 1;
        let probe = if self.settled {
            let stale = self
                .window(other)
                .newest()
                .map_or(true, |at| now.saturating_sub(at) >= tuning.stale);
            let due = stale || f64::from(self.since_probe) >= self.interval(tuning);
            self.probe_next || (due && self.affordable(now, bytes, tuning))
        } else {
            self.window(other).len() < MIN_SAMPLES && self.since_probe >= START_EVERY
        };
        if probe {
            self.since_probe = 0;
            self.probe_next = false;
            return Answer::Probe(other);
        }
        match self.settled {
            true => Answer::Measured(self.held),
            false => Answer::Default(self.held),
        }
    }

    /// Whether a probe of the other path with `bytes` now keeps probing within
    /// `tuning.probe_share` of the time: the time since that path's newest sample is at least
    /// the probe's expected time (by its median rate) divided by the share. A path without a
    /// rate yet is always affordable.
    fn affordable(&self, now: Duration, bytes: u64, tuning: &Tuning) -> bool {
        let other = self.window(self.held.other());
        let (Some(rate), Some(at)) = (other.median(), other.newest()) else {
            return true;
        };
        if rate <= 0.0 || tuning.probe_share <= 0.0 {
            return true;
        }
        let probe_secs = bytes as f64 / rate;
        now.saturating_sub(at).as_secs_f64() * tuning.probe_share >= probe_secs
    }

    /// Transfers between probes of the other path: `every`, stretched by how much slower the
    /// other path measured when that is more than the margin (a probe's cost is then bounded in
    /// time, not in count; paths within the margin, noise, keep the plain count).
    fn interval(&self, tuning: &Tuning) -> f64 {
        let slowdown = match (self.median(self.held), self.median(self.held.other())) {
            (Some(h), Some(o)) if o > 0.0 && h > o * (1.0 + tuning.margin) => h / o,
            _ => 1.0,
        };
        f64::from(self.every) * slowdown
    }

    /// A transfer over `path` moved at `rate` bytes per second.
    pub(super) fn record(&mut self, path: Path, rate: f64, now: Duration, tuning: &Tuning) {
        self.windows[path.index()].push(rate, now, tuning.window);
        if !self.settled {
            self.settle();
            return;
        }
        let (held, other) = (self.held, self.held.other());
        let (Some(h), Some(o)) = (self.window(held).median(), self.window(other).median()) else {
            return;
        };
        let better = o > h * (1.0 + tuning.margin);
        if path == held {
            // The held path looks worse than the other's last measurements: look again now.
            self.probe_next |= better;
            return;
        }
        // A probe counts towards a switch when its own rate, and the other path's median, both
        // beat the held path by the margin: probes in a row share most of the window, so the
        // median alone would confirm itself.
        let promising = rate > h * (1.0 + tuning.margin);
        if !(better && promising) {
            self.streak = 0;
            if promising {
                // Faster than the held path, but the median does not say so yet: look again
                // at once, so that a real change fills the window quickly.
                self.probe_next = true;
            } else {
                self.every = (self.every.saturating_mul(2)).min(tuning.max_every);
            }
            return;
        }
        self.streak += 1;
        if self.streak >= tuning.confirm {
            self.held = other;
            self.streak = 0;
            self.every = tuning.min_every;
            self.switches += 1;
        } else {
            self.probe_next = true;
        }
    }

    /// Once both paths have MIN_SAMPLES: hold the faster median (ties keep the default).
    fn settle(&mut self) {
        let (held, other) = (self.held, self.held.other());
        if self.window(held).len() < MIN_SAMPLES || self.window(other).len() < MIN_SAMPLES {
            return;
        }
        self.settled = true;
        if let (Some(h), Some(o)) = (self.window(held).median(), self.window(other).median()) {
            if o > h {
                self.held = other;
            }
        }
    }

    pub(super) fn held(&self) -> Path {
        self.held
    }

    pub(super) fn settled(&self) -> bool {
        self.settled
    }

    /// The median rate of `path` (bytes per second), if measured.
    pub(super) fn median(&self, path: Path) -> Option<f64> {
        self.window(path).median()
    }
}
