//! hipObject's environment variables, read by `hipObjInit` (README's
//! environment list names each).

/// Default and bounds of `HIPOBJ_MAX_TRANSFERS`.
pub const DEFAULT_MAX_TRANSFERS: usize = 16;
pub const MAX_MAX_TRANSFERS: usize = 1024;
/// Default and bounds of `HIPOBJ_STAGE_TIMEOUT_MS`.
pub const DEFAULT_STAGE_TIMEOUT_MS: u64 = 30_000;
pub const MAX_STAGE_TIMEOUT_MS: u64 = 86_400_000;

/// The settings the environment gives one initialisation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvConfig {
    /// Number of RDMA connections = transfers in progress at once.
    pub max_transfers: usize,
    /// Deadline of each host<->device staging copy.
    pub stage_timeout_ms: u64,
    /// Refuse the host-staged fallback for device buffers.
    pub require_gpu_direct: bool,
    /// `HIPOBJ_REQUIRE_MW`: refuse a device without type-2 memory windows (docs/protocol.md 9.6).
    pub require_mw: bool,
    /// For benchmarks and tests only: treat the device as one without memory windows (revision-1
    /// access: every registration remotely readable and writable), so that the cost of bind +
    /// invalidate can be measured against it in one process. Set through the Rust API; the
    /// environment (`HIPOBJ_PERF_NO_MW`) sets it only in builds with the bench-only
    /// `perf-switches` feature, never in the shipped library.
    pub perf_no_mw: bool,
    /// `HIPOBJ_REMOTE_INV=1`: pool connections keep receives posted and their tokens ask the
    /// server for remote invalidation (docs/protocol.md section 11). Off by default: the Soft-RoCE
    /// driver of Linux 6.1 dereferences NULL in `rxe_invalidate_mw` when a SEND_WITH_INV meets a
    /// window that is no longer bound (lane, 2026-12-02: the guest kernel panicked in the stress
    /// and fault tests and in `make demo` under load), which a client that gave up on a transfer
    /// cannot rule out.
    pub remote_inv: bool,
    /// `HIPOBJ_NICS=rxe0,rxe2`: more RDMA devices to use besides the ones `nicHint` selects, in
    /// this order (issue 40, several NICs). The extension that lets a host without a GPU, where
    /// `nicHint` must name one device, use several: every transfer takes a device whose port is
    /// up, and one that fails on its device is tried again on the next.
    pub nics: Vec<String>,
}

impl Default for EnvConfig {
    fn default() -> Self {
        EnvConfig {
            max_transfers: DEFAULT_MAX_TRANSFERS,
            stage_timeout_ms: DEFAULT_STAGE_TIMEOUT_MS,
            require_gpu_direct: false,
            require_mw: false,
            perf_no_mw: false,
            remote_inv: false,
            nics: Vec::new(),
        }
    }
}

impl EnvConfig {
    /// Read the process environment.
    pub fn from_env() -> EnvConfig {
        Self::from_lookup(|name| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned()))
    }

    /// Read through a lookup function (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> EnvConfig {
        EnvConfig {
            max_transfers: parse_max_transfers(get("HIPOBJ_MAX_TRANSFERS").as_deref()),
            stage_timeout_ms: parse_stage_timeout_ms(get("HIPOBJ_STAGE_TIMEOUT_MS").as_deref()),
            require_gpu_direct: parse_flag(get("HIPOBJ_REQUIRE_GPU_DIRECT").as_deref()),
            require_mw: parse_flag(get("HIPOBJ_REQUIRE_MW").as_deref()),
            perf_no_mw: cfg!(feature = "perf-switches")
                && parse_flag(get("HIPOBJ_PERF_NO_MW").as_deref()),
            remote_inv: parse_flag(get("HIPOBJ_REMOTE_INV").as_deref()),
            nics: parse_nics(get("HIPOBJ_NICS").as_deref()),
        }
    }
}

/// Strict decimal: ASCII digits only, no sign, spaces or prefix; `None` on overflow.
pub fn parse_strict_decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.bytes().try_fold(0u64, |acc, c| {
        acc.checked_mul(10)?.checked_add(u64::from(c - b'0'))
    })
}

/// `HIPOBJ_MAX_TRANSFERS`: a whole number 1..=1024, else the default 16.
pub fn parse_max_transfers(v: Option<&str>) -> usize {
    v.and_then(parse_strict_decimal)
        .filter(|n| (1..=MAX_MAX_TRANSFERS as u64).contains(n))
        .map_or(DEFAULT_MAX_TRANSFERS, |n| n as usize)
}

/// `HIPOBJ_STAGE_TIMEOUT_MS`: strict decimal 1..=86_400_000, else 30_000.
pub fn parse_stage_timeout_ms(v: Option<&str>) -> u64 {
    v.and_then(parse_strict_decimal)
        .filter(|n| (1..=MAX_STAGE_TIMEOUT_MS).contains(n))
        .unwrap_or(DEFAULT_STAGE_TIMEOUT_MS)
}

/// `HIPOBJ_NICS`: comma-separated device names, blanks around each ignored, empty items and
/// repeats dropped.
pub fn parse_nics(v: Option<&str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in v.unwrap_or("").split(',').map(str::trim) {
        if !name.is_empty() && !out.iter().any(|n| n == name) {
            out.push(name.to_owned());
        }
    }
    out
}

/// A flag is on when set, non-empty, and its first character is not `0`, `n` or `N`.
pub fn parse_flag(v: Option<&str>) -> bool {
    matches!(v.and_then(|s| s.bytes().next()), Some(c) if !matches!(c, b'0' | b'n' | b'N'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn strict_decimal() {
        let cases: [(&str, Option<u64>); 16] = [
            ("0", Some(0)),
            ("7", Some(7)),
            ("007", Some(7)),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551616", None),
            ("99999999999999999999999", None),
            ("", None),
            ("+20", None),
            ("-1", None),
            (" 5", None),
            ("5 ", None),
            ("0x10", None),
            ("1e3", None),
            ("1_000", None),
            ("١٢", None),
            ("5\n", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_strict_decimal(s), want, "input {s:?}");
        }
    }

    #[test]
    fn max_transfers() {
        let cases: [(Option<&str>, usize); 14] = [
            (None, 16),
            (Some(""), 16),
            (Some("0"), 16),
            (Some("1"), 1),
            (Some("2"), 2),
            (Some("16"), 16),
            (Some("1024"), 1024),
            (Some("01024"), 1024),
            (Some("1025"), 16),
            (Some("-1"), 16),
            (Some("+8"), 16),
            (Some(" 8"), 16),
            (Some("8abc"), 16),
            (Some("99999999999999999999999"), 16),
        ];
        for (v, want) in cases {
            assert_eq!(parse_max_transfers(v), want, "input {v:?}");
        }
    }

    #[test]
    fn stage_timeout() {
        let cases: [(Option<&str>, u64); 11] = [
            (None, 30_000),
            (Some(""), 30_000),
            (Some("0"), 30_000),
            (Some("1"), 1),
            (Some("20"), 20),
            (Some("+20"), 30_000),
            (Some("0x20"), 30_000),
            (Some("20 "), 30_000),
            (Some("86400000"), 86_400_000),
            (Some("86400001"), 30_000),
            (Some("-5"), 30_000),
        ];
        for (v, want) in cases {
            assert_eq!(parse_stage_timeout_ms(v), want, "input {v:?}");
        }
    }

    #[test]
    fn nics_are_a_list_without_blanks_or_repeats() {
        assert_eq!(parse_nics(None), Vec::<String>::new());
        assert_eq!(parse_nics(Some(" , ")), Vec::<String>::new());
        assert_eq!(parse_nics(Some("rxe0")), ["rxe0"]);
        assert_eq!(parse_nics(Some("rxe0, rxe2 ,,rxe0")), ["rxe0", "rxe2"]);
    }

    #[test]
    fn flags() {
        let cases: [(Option<&str>, bool); 14] = [
            (None, false),
            (Some(""), false),
            (Some("0"), false),
            (Some("00"), false),
            (Some("n"), false),
            (Some("N"), false),
            (Some("no"), false),
            (Some("No"), false),
            (Some("1"), true),
            (Some("y"), true),
            (Some("yes"), true),
            (Some("true"), true),
            (Some(" 0"), true),
            (Some("false"), true),
        ];
        for (v, want) in cases {
            assert_eq!(parse_flag(v), want, "input {v:?}");
        }
    }

    #[test]
    fn from_lookup_reads_the_three_variables() {
        let env: HashMap<&str, &str> = [
            ("HIPOBJ_MAX_TRANSFERS", "4"),
            ("HIPOBJ_STAGE_TIMEOUT_MS", "250"),
            ("HIPOBJ_REQUIRE_GPU_DIRECT", "1"),
            ("HIPOBJ_REQUIRE_MW", "yes"),
            ("HIPOBJ_NICS", "rxe2,rxe4"),
        ]
        .into_iter()
        .collect();
        let cfg = EnvConfig::from_lookup(|k| env.get(k).map(|v| v.to_string()));
        assert_eq!(
            cfg,
            EnvConfig {
                max_transfers: 4,
                stage_timeout_ms: 250,
                require_gpu_direct: true,
                require_mw: true,
                perf_no_mw: false,
                remote_inv: false,
                nics: vec!["rxe2".into(), "rxe4".into()],
            }
        );
        assert_eq!(EnvConfig::from_lookup(|_| None), EnvConfig::default());
        let bad = EnvConfig::from_lookup(|_| Some("junk".to_string()));
        assert_eq!(
            bad,
            EnvConfig {
                require_gpu_direct: true,
                require_mw: true,
                perf_no_mw: cfg!(feature = "perf-switches"),
                remote_inv: true,
                nics: vec!["junk".into()],
                ..EnvConfig::default()
            }
        );
    }

    proptest! {
        #[test]
        fn decimal_round_trip(n in any::<u64>()) {
            prop_assert_eq!(parse_strict_decimal(&n.to_string()), Some(n));
        }

        #[test]
        fn parsers_never_panic_and_stay_in_range(s in any::<String>()) {
            let m = parse_max_transfers(Some(&s));
            prop_assert!((1..=MAX_MAX_TRANSFERS).contains(&m));
            let t = parse_stage_timeout_ms(Some(&s));
            prop_assert!((1..=MAX_STAGE_TIMEOUT_MS).contains(&t));
            let _ = parse_flag(Some(&s));
            if parse_strict_decimal(&s).is_some() {
                prop_assert!(!s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()));
            }
        }

        #[test]
        fn max_transfers_in_range_is_taken(n in 1usize..=1024) {
            prop_assert_eq!(parse_max_transfers(Some(&n.to_string())), n);
        }
    }
}
