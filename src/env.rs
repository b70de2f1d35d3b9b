//! hipObject's environment variables, read by `hipObjInit` (REFERENCE.md section 6).

/// Default and bounds of `HIPOBJ_MAX_TRANSFERS`.
pub const DEFAULT_MAX_TRANSFERS: usize = 16;
pub const MAX_MAX_TRANSFERS: usize = 1024;
/// Default and bounds of `HIPOBJ_STAGE_TIMEOUT_MS`.
pub const DEFAULT_STAGE_TIMEOUT_MS: u64 = 30_000;
pub const MAX_STAGE_TIMEOUT_MS: u64 = 86_400_000;

/// The settings the environment gives one initialisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnvConfig {
    /// Number of RDMA connections = transfers in progress at once.
    pub max_transfers: usize,
    /// Deadline of each host<->device staging copy.
    pub stage_timeout_ms: u64,
    /// Refuse the host-staged fallback for device buffers.
    pub require_gpu_direct: bool,
}

impl Default for EnvConfig {
    fn default() -> Self {
        EnvConfig {
            max_transfers: DEFAULT_MAX_TRANSFERS,
            stage_timeout_ms: DEFAULT_STAGE_TIMEOUT_MS,
            require_gpu_direct: false,
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

/// A flag is on when set, non-empty, and its first character is not `0`, `n` or `N`.
pub fn parse_flag(v: Option<&str>) -> bool {
    matches!(v.and_then(|s| s.bytes().next()), Some(c) if !matches!(c, b'0' | b'n' | b'N'))
}
