//! The decision against simulated paths: time is a [`ManualClock`] each transfer advances by
//! bytes / the path's rate of the moment, so every run is the same.

use super::*;
use std::sync::Arc;

const EP: &str = "http://10.0.0.1:9000";
const MIB: f64 = 1048576.0;

/// A transport on a manual clock, and transfers of one cell run through it.
struct Sim {
    clock: Arc<ManualClock>,
    t: Transport,
    /// xorshift state of the noise.
    seed: u64,
}

impl Sim {
    fn new(mode: Mode) -> Sim {
        let clock = Arc::new(ManualClock::new());
        let t = Transport::with(mode, Tuning::default(), Box::new(clock.clone()));
        Sim {
            clock,
            t,
            seed: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// A factor in [1 - noise, 1 + noise] (uniform, deterministic).
    fn jitter(&mut self, noise: f64) -> f64 {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let unit = (self.seed >> 11) as f64 / (1u64 << 53) as f64;
        1.0 + noise * (2.0 * unit - 1.0)
    }

    /// One GET of `bytes` to host memory, each path moving at `rate(path)` MiB/s (times noise):
    /// the ticket it ran with.
    fn transfer(&mut self, bytes: u64, noise: f64, rate: impl Fn(Path) -> f64) -> Ticket {
        let ticket = self.t.pick(EP, bytes, Direction::Get, Destination::Host);
        let mibs = rate(ticket.path()) * self.jitter(noise);
        self.clock
            .advance(Duration::from_secs_f64(bytes as f64 / (mibs * MIB)));
        self.t.record(&ticket, bytes);
        ticket
    }

    /// `n` transfers: the tickets.
    fn run(&mut self, n: usize, bytes: u64, noise: f64, rate: impl Fn(Path) -> f64) -> Vec<Ticket> {
        (0..n).map(|_| self.transfer(bytes, noise, &rate)).collect()
    }

    fn held(&self, bytes: u64) -> Option<(Path, bool)> {
        self.t.held(EP, bytes, Direction::Get, Destination::Host)
    }
}

fn rates(rdma: f64, http: f64) -> impl Fn(Path) -> f64 {
    move |p| match p {
        Path::Rdma => rdma,
        Path::Http => http,
    }
}

#[test]
fn size_classes_are_powers_of_four_from_4k() {
    assert_eq!(SizeClass::of(0), SizeClass::of(4095));
    assert_ne!(SizeClass::of(4095), SizeClass::of(4096));
    assert_eq!(SizeClass::of(4096), SizeClass::of(16383));
    assert_ne!(SizeClass::of(16383), SizeClass::of(16384));
    for lower in [4096u64, 65536, 1 << 20, 16 << 20, 1 << 30] {
        assert_eq!(SizeClass::of(lower).lower(), lower);
        assert_eq!(SizeClass::of(lower * 4 - 1).lower(), lower);
    }
    assert_eq!(SizeClass::of(u64::MAX), SizeClass::of(u64::MAX - 1));
}

#[test]
fn unmeasured_cells_start_on_rdma_from_1_mib_and_http_below() {
    let t = Transport::new(Mode::Auto);
    for (bytes, want) in [
        (1u64, Path::Http),
        (4096, Path::Http),
        (64 << 10, Path::Http),
        ((1 << 20) - 1, Path::Http),
        (1 << 20, Path::Rdma),
        (16 << 20, Path::Rdma),
        (1 << 33, Path::Rdma),
    ] {
        let ticket = t.pick(EP, bytes, Direction::Put, Destination::Gpu);
        assert_eq!(
            (ticket.path(), ticket.reason()),
            (want, Reason::DefaultStart),
            "{bytes} bytes"
        );
    }
}

#[test]
fn a_cell_measures_both_paths_then_holds_the_faster() {
    let mut sim = Sim::new(Mode::Auto);
    // 64 KiB starts on HTTP; RDMA is 3x faster here.
    let tickets = sim.run(12, 64 << 10, 0.0, rates(300.0, 100.0));
    assert_eq!(tickets[0].reason(), Reason::DefaultStart);
    assert_eq!(tickets[0].path(), Path::Http);
    assert_eq!(sim.held(64 << 10), Some((Path::Rdma, true)));
    // From then on RDMA, as measured.
    let after = sim.run(3, 64 << 10, 0.0, rates(300.0, 100.0));
    assert!(after
        .iter()
        .all(|t| (t.path(), t.reason()) == (Path::Rdma, Reason::Measured)));
}

#[test]
fn a_path_that_turns_slow_is_left_and_a_probe_brings_it_back() {
    let mut sim = Sim::new(Mode::Auto);
    let size = 16 << 20;
    sim.run(40, size, 0.1, rates(1000.0, 400.0));
    assert_eq!(sim.held(size), Some((Path::Rdma, true)));

    // RDMA turns 10x slower: left within a few dozen transfers.
    let slow = sim.run(40, size, 0.1, rates(100.0, 400.0));
    assert_eq!(sim.held(size), Some((Path::Http, true)));
    assert!(
        slow.iter().filter(|t| t.path() == Path::Rdma).count() < 12,
        "RDMA kept too long"
    );
    assert_eq!(sim.t.counters().switches, 1);

    // RDMA comes back: only probes can see it, and they bring the cell back. The first comes
    // when it is affordable: RDMA's median is now about 100 MiB/s, so a 16 MiB probe costs
    // about 0.16 s, 8 s at the 2 % share: some 200 HTTP transfers of 0.04 s.
    let back = sim.run(300, size, 0.1, rates(1000.0, 400.0));
    assert_eq!(sim.held(size), Some((Path::Rdma, true)));
    let first_measured_rdma = back
        .iter()
        .position(|t| (t.path(), t.reason()) == (Path::Rdma, Reason::Measured));
    let rdma_before = back
        .iter()
        .take(first_measured_rdma.unwrap_or(back.len()))
        .filter(|t| t.path() == Path::Rdma);
    assert!(rdma_before.clone().all(|t| t.reason() == Reason::Probe));
    assert!(
        rdma_before.count() >= 3,
        "switched back on fewer than 3 probes"
    );
    assert_eq!(sim.t.counters().switches, 2);
}

#[test]
fn probing_a_much_slower_path_costs_a_bounded_share_of_the_time() {
    // HTTP 8x slower than RDMA: once settled, the probes of the next 2000 transfers (2.5 s) take
    // under 5 % of their time (probes spaced by count alone, every 4th, 8th, ... 64th: 13 %;
    // the count stretched by the slowdown: under 5 %; with the 2 % budget: about 2 %).
    let mut sim = Sim::new(Mode::Auto);
    let size = 1 << 20;
    let speed = rates(800.0, 100.0);
    sim.run(12, size, 0.0, &speed);
    assert_eq!(sim.held(size), Some((Path::Rdma, true)));
    let tickets = sim.run(2000, size, 0.0, &speed);
    let time = |t: &Ticket| size as f64 / (speed(t.path()) * MIB);
    let probes: Vec<&Ticket> = tickets
        .iter()
        .filter(|t| t.reason() == Reason::Probe)
        .collect();
    let share = probes.iter().map(|t| time(t)).sum::<f64>() / tickets.iter().map(time).sum::<f64>();
    assert!(
        share < 0.05,
        "{} probes took {:.1} % of the time",
        probes.len(),
        100.0 * share
    );
    assert!(
        probes.len() >= 3,
        "the slower path was probed {} times",
        probes.len()
    );
}

#[test]
fn a_cell_just_measured_on_both_paths_waits_for_its_probe_budget() {
    // A benchmark's forced columns measured both paths of the cell (RDMA 2x slower); the auto
    // transfers after them probe RDMA only once that costs at most `probe_share` of the time.
    let mut sim = Sim::new(Mode::Auto);
    let size = 16 << 20;
    for mode in [Mode::Rdma, Mode::Http] {
        for _ in 0..12 {
            let t = sim
                .t
                .pick_as(mode, EP, size, Direction::Get, Destination::Host);
            let mibs = rates(100.0, 200.0)(t.path());
            sim.clock
                .advance(Duration::from_secs_f64(size as f64 / (mibs * MIB)));
            sim.t.record(&t, size);
        }
    }
    assert_eq!(sim.held(size), Some((Path::Http, true)));
    // Twelve auto transfers (1 s): a probe (0.16 s) would take 14 % of that time.
    let first = sim.run(12, size, 0.0, rates(100.0, 200.0));
    assert!(
        first.iter().all(|t| t.reason() == Reason::Measured),
        "probed right after both paths were measured: {:?}",
        first.iter().map(Ticket::reason).collect::<Vec<_>>()
    );
    // Later the probes do come (8 s of HTTP per 0.16 s probe), and take about 2 % of the time.
    let speed = rates(100.0, 200.0);
    let later = sim.run(500, size, 0.0, &speed);
    let time = |t: &Ticket| size as f64 / (speed(t.path()) * MIB);
    let probes = later.iter().filter(|t| t.reason() == Reason::Probe);
    let share = probes.clone().map(time).sum::<f64>() / later.iter().map(time).sum::<f64>();
    assert!(probes.count() >= 1, "RDMA never probed again");
    assert!(
        share <= 0.021,
        "probes took {:.1} % of the time",
        100.0 * share
    );
}

#[test]
fn equal_paths_under_40_percent_noise_do_not_flap() {
    let (mut switches, mut probes) = (0, 0);
    for run in 1..=5u64 {
        let mut sim = Sim::new(Mode::Auto);
        sim.seed = run.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let tickets = sim.run(2000, 1 << 20, 0.4, rates(500.0, 500.0));
        switches += sim.t.counters().switches;
        probes += tickets
            .iter()
            .filter(|t| t.reason() == Reason::Probe)
            .count();
    }
    // Without the margin (a probe or median merely faster counts) these runs switched 135 times.
    assert!(switches <= 10, "{switches} switches in 5 x 2000 transfers");
    // And the probes thin out while the choice holds.
    assert!(probes < 1000, "{probes} probes in 5 x 2000 transfers");
}

#[test]
fn a_stale_measurement_is_probed_again() {
    let mut sim = Sim::new(Mode::Auto);
    let size = 16 << 20;
    sim.run(30, size, 0.0, rates(1000.0, 400.0));
    let next = sim.t.pick(EP, size, Direction::Get, Destination::Host);
    assert_eq!(next.reason(), Reason::Measured);
    sim.clock.advance(Duration::from_secs(61));
    let next = sim.t.pick(EP, size, Direction::Get, Destination::Host);
    assert_eq!((next.path(), next.reason()), (Path::Http, Reason::Probe));
}

#[test]
fn cells_are_per_endpoint_direction_and_destination() {
    let mut sim = Sim::new(Mode::Auto);
    sim.run(20, 64 << 10, 0.0, rates(300.0, 100.0));
    assert_eq!(sim.held(64 << 10), Some((Path::Rdma, true)));
    for (ep, dir, dest) in [
        ("http://other:9000", Direction::Get, Destination::Host),
        (EP, Direction::Put, Destination::Host),
        (EP, Direction::Get, Destination::GpuBounce),
    ] {
        let t = sim.t.pick(ep, 64 << 10, dir, dest);
        assert_eq!((t.path(), t.reason()), (Path::Http, Reason::DefaultStart));
    }
}

#[test]
fn counters_say_how_many_bytes_went_each_way_and_why() {
    let forced = Transport::new(Mode::Http);
    let t = forced.pick(EP, 16 << 20, Direction::Get, Destination::Host);
    forced.record_timed(&t, 16 << 20, 0.01);
    let c = forced.counters();
    assert_eq!((c.http.transfers, c.http.bytes), (1, 16 << 20));
    assert_eq!(c.http.because(Reason::Forced), 1);
    assert_eq!(c.rdma, PathCounters::default());

    let auto = Transport::new(Mode::Auto);
    assert!(auto.no_rdma_device("no RDMA device (ibv_get_device_list found none)"));
    assert!(!auto.no_rdma_device("again"));
    let t = auto.pick(EP, 16 << 20, Direction::Put, Destination::Host);
    assert_eq!((t.path(), t.reason()), (Path::Http, Reason::NoRdmaDevice));
    auto.record_timed(&t, 16 << 20, 0.01);
    assert_eq!(auto.counters().http.because(Reason::NoRdmaDevice), 1);
    assert!(auto
        .missing_device()
        .unwrap_or_default()
        .contains("found none"));

    let declined = Transport::new(Mode::Auto);
    assert!(declined.declined(EP));
    assert!(!declined.declined(EP));
    let t = declined.pick(EP, 16 << 20, Direction::Get, Destination::Host);
    assert_eq!((t.path(), t.reason()), (Path::Http, Reason::Declined));
    let elsewhere = declined.pick("http://b:1", 16 << 20, Direction::Get, Destination::Host);
    assert_eq!(elsewhere.path(), Path::Rdma);

    // Forced RDMA stays RDMA even without a device (the caller's transfer then fails).
    let rdma = Transport::new(Mode::Rdma);
    rdma.no_rdma_device("none");
    let t = rdma.pick(EP, 4096, Direction::Get, Destination::Host);
    assert_eq!((t.path(), t.reason()), (Path::Rdma, Reason::Forced));
}

#[test]
fn forced_transfers_are_measured_too() {
    // A forced transport keeps what its transfers measured (a benchmark's forced columns teach
    // its auto column); with one path measured the cell stays unsettled.
    let clock = Arc::new(ManualClock::new());
    let t = Transport::with(Mode::Rdma, Tuning::default(), Box::new(clock.clone()));
    for _ in 0..5 {
        let k = t.pick(EP, 1 << 20, Direction::Get, Destination::Host);
        clock.advance(Duration::from_millis(1));
        t.record(&k, 1 << 20);
    }
    let rate = t.median_rate(EP, 1 << 20, Direction::Get, Destination::Host, Path::Rdma);
    assert_eq!(rate.map(f64::round), Some(1048576000.0));
    assert_eq!(
        t.held(EP, 1 << 20, Direction::Get, Destination::Host),
        Some((Path::Rdma, false))
    );
}

#[test]
fn workers_pick_and_record_concurrently() {
    let t = Transport::new(Mode::Auto);
    std::thread::scope(|s| {
        for w in 0..4u64 {
            let t = &t;
            s.spawn(move || {
                for i in 0..500u64 {
                    let bytes = 4096 << (2 * ((w + i) % 4));
                    let k = t.pick(EP, bytes, Direction::Get, Destination::Host);
                    t.record_timed(&k, bytes, 1e-4);
                }
            });
        }
    });
    let c = t.counters();
    assert_eq!(c.rdma.transfers + c.http.transfers, 2000);
    assert_eq!(
        c.rdma.bytes + c.http.bytes,
        500 * (4096 + 16384 + 65536 + 262144)
    );
}

#[test]
fn modes_parse() {
    assert_eq!(Mode::parse(" AUTO "), Ok(Mode::Auto));
    assert_eq!(Mode::parse("rdma"), Ok(Mode::Rdma));
    assert_eq!(Mode::parse("http"), Ok(Mode::Http));
    assert!(Mode::parse("tcp").is_err());
}
