//! RDMA or plain HTTP, per transfer: never slower than HTTP by design (issue 39).
//!
//! A [`Transport`] answers, for each transfer, which path it takes, from what it has measured on
//! that cell: the endpoint, the size class (powers of 4 from 4 KiB: [`SizeClass`]), the direction
//! and where the bytes land or come from ([`Destination`]). It starts conservatively (RDMA from
//! 1 MiB up, HTTP below) until both paths are measured in the cell, then holds the faster one by
//! the median of its recent throughput samples, probes the other now and then (more rarely while
//! the choice holds, and never more than a small share of the time: [`Tuning::probe_share`]),
//! and switches only when the other path is faster by a margin in several probes in a row, so
//! noise does not flap it (`cell.rs` has the rule).
//!
//! Forced modes answer one path always (still recording what they measure, so a later `auto`
//! starts measured). Under `auto`, a process without a usable RDMA device, or an endpoint that
//! declined RDMA (501), gets HTTP, said once. Counters tell how many transfers and bytes went each
//! way, and why. Thread-safe: the engine's workers pick and record concurrently. The clock is
//! injected ([`Clock`]) so that tests are deterministic.
//!
//! ```
//! use hipobj::transport::{Destination, Direction, Mode, Path, Transport};
//! let t = Transport::new(Mode::Auto);
//! let ticket = t.pick("http://10.0.0.1:9000", 64 << 10, Direction::Get, Destination::Host);
//! assert_eq!(ticket.path(), Path::Http); // below 1 MiB until measured
//! t.record(&ticket, 64 << 10); // after the transfer: its bytes (the time is the clock's)
//! assert_eq!(t.counters().path(Path::Http).bytes, 64 << 10);
//! ```

mod cell;
mod clock;
mod device;

pub use clock::{Clock, ManualClock, SystemClock};
pub use device::rdma_missing;

use cell::{Answer, Cell};
use hipobj_actors::sync::Mutex;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::time::Duration;

/// The environment variable of the mode (`auto`, `rdma`, `http`).
pub const ENV: &str = "HIPOBJ_TRANSPORT";

/// Transfers of this size and up start on RDMA in a cell not yet measured.
pub const RDMA_START: u64 = 1 << 20;

/// The way one transfer's bytes move.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    Rdma,
    Http,
}

impl Path {
    fn index(self) -> usize {
        match self {
            Path::Rdma => 0,
            Path::Http => 1,
        }
    }

    fn other(self) -> Path {
        match self {
            Path::Rdma => Path::Http,
            Path::Http => Path::Rdma,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Path::Rdma => "RDMA",
            Path::Http => "HTTP",
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the caller asked for: the decision (`Auto`, the default) or one path always.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Auto,
    Rdma,
    Http,
}

impl Mode {
    /// `auto`, `rdma` or `http` (any case, surrounding spaces ignored).
    pub fn parse(value: &str) -> Result<Mode, String> {
        match value.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Mode::Auto),
            "rdma" => Ok(Mode::Rdma),
            "http" => Ok(Mode::Http),
            other => Err(format!(
                "transport '{}': expected auto, rdma or http",
                other.escape_debug()
            )),
        }
    }

    /// `HIPOBJ_TRANSPORT`, `Auto` when unset or empty; a bad value is an error.
    pub fn from_env() -> Result<Mode, String> {
        match std::env::var(ENV) {
            Ok(v) if !v.trim().is_empty() => Mode::parse(&v).map_err(|e| format!("{ENV}: {e}")),
            _ => Ok(Mode::Auto),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Rdma => "rdma",
            Mode::Http => "http",
        }
    }
}

/// Why a transfer took its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The mode names the path.
    Forced,
    /// The cell is not measured on both paths yet: RDMA from 1 MiB up, HTTP below.
    DefaultStart,
    /// The measurements chose it.
    Measured,
    /// A probe of the path not held, to see whether conditions changed.
    Probe,
    /// No usable RDMA device in this process.
    NoRdmaDevice,
    /// The endpoint declined RDMA (501).
    Declined,
}

impl Reason {
    /// Every reason, in the order of [`PathCounters::by_reason`].
    pub const ALL: [Reason; 6] = [
        Reason::Forced,
        Reason::DefaultStart,
        Reason::Measured,
        Reason::Probe,
        Reason::NoRdmaDevice,
        Reason::Declined,
    ];

    fn index(self) -> usize {
        match self {
            Reason::Forced => 0,
            Reason::DefaultStart => 1,
            Reason::Measured => 2,
            Reason::Probe => 3,
            Reason::NoRdmaDevice => 4,
            Reason::Declined => 5,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Forced => "forced",
            Reason::DefaultStart => "default start",
            Reason::Measured => "measured",
            Reason::Probe => "probe",
            Reason::NoRdmaDevice => "no RDMA device",
            Reason::Declined => "server declined RDMA",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which way the bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Get,
    Put,
}

/// Where a GET lands or a PUT's bytes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Destination {
    /// Host memory.
    Host,
    /// GPU memory, directly (RDMA into device memory; HTTP through the caller's own copy).
    Gpu,
    /// GPU memory through a registered host buffer the bytes are copied through.
    GpuBounce,
}

impl Destination {
    /// Where the bytes of a registration of `kind` are (`None`, no registration: host memory).
    pub fn of_buffer(kind: Option<crate::registry::BufferKind>) -> Destination {
        use crate::registry::BufferKind;
        match kind {
            Some(BufferKind::DeviceDirect) => Destination::Gpu,
            Some(BufferKind::DeviceStaged) => Destination::GpuBounce,
            Some(BufferKind::Host) | None => Destination::Host,
        }
    }
}

/// A size class: powers of 4 from 4 KiB. Class 0 holds transfers under 4 KiB; class k >= 1 holds
/// `[4 KiB * 4^(k-1), 4 KiB * 4^k)`, so 4 KiB, 64 KiB, 1 MiB and 16 MiB each open a class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SizeClass(u8);

impl SizeClass {
    /// The class of a transfer of `bytes`.
    pub fn of(bytes: u64) -> SizeClass {
        let mut class = 0u8;
        let mut lower = 4096u64;
        while bytes >= lower && class < 26 {
            class += 1;
            lower = lower.saturating_mul(4);
        }
        SizeClass(class)
    }

    /// The smallest transfer of the class.
    pub fn lower(self) -> u64 {
        match self.0 {
            0 => 0,
            k => 4096u64.saturating_mul(4u64.saturating_pow(u32::from(k) - 1)),
        }
    }

    /// The path a cell of this class starts on.
    pub fn default_path(self) -> Path {
        if self.lower() >= RDMA_START {
            Path::Rdma
        } else {
            Path::Http
        }
    }
}

/// A cell of the decision.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    endpoint: String,
    class: SizeClass,
    direction: Direction,
    destination: Destination,
}

/// The decision's constants (the defaults are what the engine uses; tests may change them).
#[derive(Clone, Debug)]
pub struct Tuning {
    /// Throughput samples kept per path and cell (the median is over them).
    pub window: usize,
    /// The other path must be faster than the held one by this fraction (0.25: 25 %) ...
    pub margin: f64,
    /// ... in this many probes in a row before the cell switches.
    pub confirm: u32,
    /// Probe interval (transfers of the cell) right after settling or switching ...
    pub min_every: u32,
    /// ... doubling after each probe that did not look better, up to this.
    pub max_every: u32,
    /// The other path is probed when its newest sample is this old.
    pub stale: Duration,
    /// Probes of a settled cell take at most this share of the time (0.02: 2 %): one comes only
    /// when the time since the other path's newest sample is its expected time / this share.
    pub probe_share: f64,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            window: 12,
            margin: 0.25,
            confirm: 3,
            min_every: 4,
            max_every: 64,
            stale: Duration::from_secs(60),
            probe_share: 0.02,
        }
    }
}

/// One transfer's path, why, and when it was picked (for its duration).
#[derive(Clone, Debug)]
pub struct Ticket {
    key: Key,
    path: Path,
    reason: Reason,
    started: Duration,
}

impl Ticket {
    pub fn path(&self) -> Path {
        self.path
    }

    pub fn reason(&self) -> Reason {
        self.reason
    }
}

/// What went one way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathCounters {
    pub transfers: u64,
    pub bytes: u64,
    /// Transfers by reason, in the order of [`Reason::ALL`].
    pub by_reason: [u64; 6],
}

impl PathCounters {
    /// Transfers that took this path for `reason`.
    pub fn because(&self, reason: Reason) -> u64 {
        self.by_reason[reason.index()]
    }
}

/// What went each way, and how often a cell changed its held path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub rdma: PathCounters,
    pub http: PathCounters,
    pub switches: u64,
}

impl Counters {
    pub fn path(&self, path: Path) -> &PathCounters {
        match path {
            Path::Rdma => &self.rdma,
            Path::Http => &self.http,
        }
    }

    fn path_mut(&mut self, path: Path) -> &mut PathCounters {
        match path {
            Path::Rdma => &mut self.rdma,
            Path::Http => &mut self.http,
        }
    }
}

impl fmt::Display for Counters {
    /// `RDMA 12 transfers 48.0 MiB (measured 9, probe 3); HTTP 3 transfers 12.0 KiB (probe 3)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, path) in [Path::Rdma, Path::Http].into_iter().enumerate() {
            let c = self.path(path);
            let why: Vec<String> = Reason::ALL
                .iter()
                .filter(|r| c.because(**r) > 0)
                .map(|r| format!("{r} {}", c.because(*r)))
                .collect();
            let sep = if i == 0 { "" } else { "; " };
            write!(f, "{sep}{path} {} transfers {} bytes", c.transfers, c.bytes)?;
            if !why.is_empty() {
                write!(f, " ({})", why.join(", "))?;
            }
        }
        write!(f, "; {} switches", self.switches)
    }
}

#[derive(Default)]
struct State {
    cells: HashMap<Key, Cell>,
    counters: Counters,
    /// Why no RDMA device is usable here (auto then takes HTTP everywhere).
    no_device: Option<String>,
    /// Endpoints that declined RDMA (501).
    declined: HashSet<String>,
}

/// The decision for one session (a command, a Python session, a C application).
pub struct Transport {
    mode: Mode,
    tuning: Tuning,
    clock: Box<dyn Clock>,
    state: Mutex<State>,
}

impl Transport {
    /// A decision in `mode` with the default tuning and the system's clock.
    pub fn new(mode: Mode) -> Transport {
        Transport::with(mode, Tuning::default(), Box::new(SystemClock::new()))
    }

    pub fn with(mode: Mode, tuning: Tuning, clock: Box<dyn Clock>) -> Transport {
        Transport {
            mode,
            tuning,
            clock,
            state: Mutex::new(State::default()),
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The path of the next transfer of `bytes` to `endpoint`.
    pub fn pick(
        &self,
        endpoint: &str,
        bytes: u64,
        direction: Direction,
        destination: Destination,
    ) -> Ticket {
        self.pick_as(self.mode, endpoint, bytes, direction, destination)
    }

    /// [`Transport::pick`] under another mode for this one transfer (a benchmark's forced
    /// columns, whose measurements the decision keeps).
    pub fn pick_as(
        &self,
        mode: Mode,
        endpoint: &str,
        bytes: u64,
        direction: Direction,
        destination: Destination,
    ) -> Ticket {
        let class = SizeClass::of(bytes);
        let now = self.clock.now();
        let mut state = self.state.lock();
        let key = Key {
            endpoint: endpoint.to_owned(),
            class,
            direction,
            destination,
        };
        let (path, reason) = match mode {
            Mode::Rdma => (Path::Rdma, Reason::Forced),
            Mode::Http => (Path::Http, Reason::Forced),
            Mode::Auto if state.no_device.is_some() => (Path::Http, Reason::NoRdmaDevice),
            Mode::Auto if state.declined.contains(&key.endpoint) => (Path::Http, Reason::Declined),
            Mode::Auto => {
                let tuning = &self.tuning;
                let cell = state
                    .cells
                    .entry(key.clone())
                    .or_insert_with(|| Cell::new(class.default_path(), tuning));
                match cell.answer(now, bytes, tuning) {
                    Answer::Default(p) => (p, Reason::DefaultStart),
                    Answer::Measured(p) => (p, Reason::Measured),
                    Answer::Probe(p) => (p, Reason::Probe),
                }
            }
        };
        Ticket {
            key,
            path,
            reason,
            started: now,
        }
    }

    /// The transfer of `ticket` moved `bytes`; its time is the clock's since the pick.
    pub fn record(&self, ticket: &Ticket, bytes: u64) {
        let secs = self
            .clock
            .now()
            .saturating_sub(ticket.started)
            .as_secs_f64();
        self.record_timed(ticket, bytes, secs);
    }

    /// The transfer of `ticket` moved `bytes` in `secs` seconds (timed by the caller).
    pub fn record_timed(&self, ticket: &Ticket, bytes: u64, secs: f64) {
        let now = self.clock.now();
        let mut state = self.state.lock();
        let c = state.counters.path_mut(ticket.path);
        c.transfers += 1;
        c.bytes += bytes;
        c.by_reason[ticket.reason.index()] += 1;
        // A transfer too short for the clock says nothing about a rate.
        if bytes == 0 || secs <= 0.0 || !secs.is_finite() {
            return;
        }
        let tuning = &self.tuning;
        let State {
            cells, counters, ..
        } = &mut *state;
        let cell = cells
            .entry(ticket.key.clone())
            .or_insert_with(|| Cell::new(ticket.key.class.default_path(), tuning));
        let before = cell.switches;
        cell.record(ticket.path, bytes as f64 / secs, now, tuning);
        counters.switches += cell.switches - before;
    }

    /// A transfer of `bytes` to `endpoint` took `path` for `reason` and lasted `secs` seconds
    /// (for callers that keep no [`Ticket`]: the C helper, an application that times itself).
    #[allow(clippy::too_many_arguments)]
    pub fn record_outcome(
        &self,
        endpoint: &str,
        bytes: u64,
        direction: Direction,
        destination: Destination,
        path: Path,
        reason: Reason,
        secs: f64,
    ) {
        let ticket = Ticket {
            key: Key {
                endpoint: endpoint.to_owned(),
                class: SizeClass::of(bytes),
                direction,
                destination,
            },
            path,
            reason,
            started: Duration::ZERO,
        };
        self.record_timed(&ticket, bytes, secs);
    }

    /// No RDMA device is usable in this process (`why` names what is missing): `auto` takes HTTP
    /// from now on. True the first time (the caller says why, once).
    pub fn no_rdma_device(&self, why: &str) -> bool {
        let mut state = self.state.lock();
        let first = state.no_device.is_none();
        if first {
            state.no_device = Some(why.to_owned());
        }
        first
    }

    /// Why no RDMA device is usable, if so.
    pub fn missing_device(&self) -> Option<String> {
        self.state.lock().no_device.clone()
    }

    /// `endpoint` declined RDMA (501): `auto` takes HTTP to it from now on. True the first time
    /// (the caller says why, once).
    pub fn declined(&self, endpoint: &str) -> bool {
        self.state.lock().declined.insert(endpoint.to_owned())
    }

    /// Every counter so far.
    pub fn counters(&self) -> Counters {
        self.state.lock().counters
    }

    /// The path the cell of (`endpoint`, `bytes`' class, `direction`, `destination`) holds, and
    /// whether it is measured on both paths (`None`: no transfer of that cell yet).
    pub fn held(
        &self,
        endpoint: &str,
        bytes: u64,
        direction: Direction,
        destination: Destination,
    ) -> Option<(Path, bool)> {
        self.with_cell(endpoint, bytes, direction, destination, |c| {
            (c.held(), c.settled())
        })
    }

    /// The median rate (bytes per second) of `path` in that cell, if measured.
    pub fn median_rate(
        &self,
        endpoint: &str,
        bytes: u64,
        direction: Direction,
        destination: Destination,
        path: Path,
    ) -> Option<f64> {
        self.with_cell(endpoint, bytes, direction, destination, |c| c.median(path))
            .flatten()
    }

    fn with_cell<T>(
        &self,
        endpoint: &str,
        bytes: u64,
        direction: Direction,
        destination: Destination,
        f: impl FnOnce(&Cell) -> T,
    ) -> Option<T> {
        let state = self.state.lock();
        let key = Key {
            endpoint: endpoint.to_owned(),
            class: SizeClass::of(bytes),
            direction,
            destination,
        };
        state.cells.get(&key).map(f)
    }
}

#[cfg(test)]
mod tests;
