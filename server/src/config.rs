//! Command-line flags of `hipobj-server`.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Everything the server is configured with.
#[derive(Clone, Debug)]
pub struct Config {
    /// `--listen ADDR:PORT`
    pub listen: SocketAddr,
    /// `--data-dir DIR`: buckets are its subdirectories.
    pub data_dir: PathBuf,
    /// `--device NAME`: the RDMA device; absent = RDMA disabled.
    pub device: Option<String>,
    /// `--access-key` / `--secret-key`: both set = SigV4 required.
    pub access_key: Option<String>,
    pub secret_key: Option<String>,
    pub rdma: RdmaSettings,
}

/// The RDMA knobs.
#[derive(Clone, Debug)]
pub struct RdmaSettings {
    /// `--max-rdma-transfers N`: token requests handled at once; more get 503.
    pub max_transfers: usize,
    /// `--rdma-workers N`: threads that run RDMA jobs.
    pub workers: usize,
    /// `--pairing-idle-secs S`: a pairing unused this long is destroyed.
    pub pairing_idle: Duration,
    /// `--max-pairings N`: size of the pairing table (least recently used evicted when full).
    pub max_pairings: usize,
    /// `--chunk-bytes N`: largest work request (also capped by the port's max_msg_sz).
    pub chunk_bytes: usize,
    /// `--wr-depth N`: work requests in flight per transfer (READs also capped by max_rd_atomic).
    pub wr_depth: usize,
    /// `--watchdog-ms MS`: a transfer with no completion for this long is aborted (500).
    pub watchdog: Duration,
    /// Slowest acceptable transfer rate in bytes/s: a transfer of N bytes is aborted (500) after
    /// watchdog + N / min_rate in total, however steadily it trickles.
    pub min_rate: u64,
    /// Token requests beyond `max_transfers` that may wait for a place (more get 503 at once).
    pub queue: usize,
    /// How long a queued token request waits for a place before its 503.
    pub queue_wait: Duration,
}

impl Default for RdmaSettings {
    fn default() -> Self {
        RdmaSettings {
            max_transfers: 16,
            workers: 4,
            pairing_idle: Duration::from_secs(300),
            max_pairings: 1024,
            chunk_bytes: 1 << 20,
            wr_depth: 8,
            watchdog: Duration::from_millis(2000),
            min_rate: 1 << 20,
            queue: 64,
            queue_wait: Duration::from_secs(2),
        }
    }
}

/// Why the command line was rejected (or help was asked for).
#[derive(Debug, PartialEq, Eq)]
pub enum ConfigError {
    Help,
    Missing(&'static str),
    NeedsValue(String),
    BadValue { flag: String, value: String },
    Unknown(String),
    HalfCredentials,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Help => f.write_str(USAGE),
            ConfigError::Missing(flag) => write!(f, "missing required flag {flag}\n\n{USAGE}"),
            ConfigError::NeedsValue(flag) => write!(f, "flag {flag} needs a value"),
            ConfigError::BadValue { flag, value } => write!(f, "bad value {value:?} for {flag}"),
            ConfigError::Unknown(arg) => write!(f, "unknown argument {arg:?}\n\n{USAGE}"),
            ConfigError::HalfCredentials => {
                f.write_str("--access-key and --secret-key go together")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

pub const USAGE: &str = "\
usage: hipobj-server --listen ADDR:PORT --data-dir DIR [options]

  --listen ADDR:PORT         address to serve S3 on (port 0 = any free port)
  --data-dir DIR             buckets live in DIR/<bucket>/
  --device NAME              RDMA device (e.g. rxe0); absent or unusable = RDMA disabled (501)
  --access-key KEY           require SigV4 with this access key ...
  --secret-key SECRET        ... and this secret key
  --max-rdma-transfers N     token requests at once, more get 503 (default 16)
  --rdma-workers N           RDMA worker threads (default 4)
  --pairing-idle-secs S      destroy pairings idle this long (default 300)
  --max-pairings N           pairing table size, LRU eviction (default 1024)
  --chunk-bytes N            largest RDMA work request (default 1048576)
  --wr-depth N               work requests in flight per transfer (default 8)
  --watchdog-ms MS           abort a transfer without progress for MS (default 2000)

Logs: RUST_LOG or HIPOBJ_LOG (e.g. HIPOBJ_LOG=debug). Counters: GET /_hipobj/stats.";

impl Config {
    /// Parse arguments (without the program name). Flags take `--flag VALUE` or `--flag=VALUE`.
    pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Config, ConfigError> {
        let mut listen = None;
        let mut data_dir = None;
        let mut device = None;
        let mut access_key = None;
        let mut secret_key = None;
        let mut rdma = RdmaSettings::default();
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            if arg == "-h" || arg == "--help" {
                return Err(ConfigError::Help);
            }
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
                _ => (arg.clone(), None),
            };
            if !flag.starts_with("--") {
                return Err(ConfigError::Unknown(arg));
            }
            let mut value = || -> Result<String, ConfigError> {
                match &inline {
                    Some(v) => Ok(v.clone()),
                    None => it
                        .next()
                        .ok_or_else(|| ConfigError::NeedsValue(flag.clone())),
                }
            };
            match flag.as_str() {
                "--listen" => listen = Some(parse_value::<SocketAddr>(&flag, value()?)?),
                "--data-dir" => data_dir = Some(PathBuf::from(value()?)),
                "--device" => device = Some(value()?).filter(|d| !d.is_empty()),
                "--access-key" => access_key = Some(value()?),
                "--secret-key" => secret_key = Some(value()?),
                "--max-rdma-transfers" => rdma.max_transfers = positive(&flag, value()?)?,
                "--rdma-workers" => rdma.workers = positive(&flag, value()?)?,
                "--pairing-idle-secs" => {
                    rdma.pairing_idle = Duration::from_secs(parse_value::<u64>(&flag, value()?)?)
                }
                "--max-pairings" => rdma.max_pairings = positive(&flag, value()?)?,
                "--chunk-bytes" => rdma.chunk_bytes = positive(&flag, value()?)?,
                "--wr-depth" => rdma.wr_depth = positive(&flag, value()?)?,
                "--watchdog-ms" => {
                    rdma.watchdog = Duration::from_millis(positive(&flag, value()?)? as u64)
                }
                _ => return Err(ConfigError::Unknown(arg)),
            }
        }
        if access_key.is_some() != secret_key.is_some() {
            return Err(ConfigError::HalfCredentials);
        }
        Ok(Config {
            listen: listen.ok_or(ConfigError::Missing("--listen"))?,
            data_dir: data_dir.ok_or(ConfigError::Missing("--data-dir"))?,
            device,
            access_key,
            secret_key,
            rdma,
        })
    }
}

fn parse_value<T: std::str::FromStr>(flag: &str, value: String) -> Result<T, ConfigError> {
    value.parse::<T>().map_err(|_| ConfigError::BadValue {
        flag: flag.to_string(),
        value,
    })
}

fn positive(flag: &str, value: String) -> Result<usize, ConfigError> {
    match value.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(ConfigError::BadValue {
            flag: flag.to_string(),
            value,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_required_and_extras() {
        let c = Config::parse(args(
            "--listen 127.0.0.1:9000 --data-dir /tmp/d --device=rxe0 --max-rdma-transfers 3 \
             --chunk-bytes=4096 --watchdog-ms 50 --pairing-idle-secs 0",
        ))
        .expect("valid");
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.device.as_deref(), Some("rxe0"));
        assert_eq!(c.rdma.max_transfers, 3);
        assert_eq!(c.rdma.chunk_bytes, 4096);
        assert_eq!(c.rdma.watchdog, Duration::from_millis(50));
        assert_eq!(c.rdma.pairing_idle, Duration::ZERO);
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(
            Config::parse(args("--data-dir /x")).unwrap_err(),
            ConfigError::Missing("--listen")
        );
        assert!(matches!(
            Config::parse(args("--listen nowhere --data-dir /x")),
            Err(ConfigError::BadValue { .. })
        ));
        assert!(matches!(
            Config::parse(args("--listen 127.0.0.1:1 --data-dir /x --chunk-bytes 0")),
            Err(ConfigError::BadValue { .. })
        ));
        assert_eq!(
            Config::parse(args("--listen 127.0.0.1:1 --data-dir /x --access-key a")).unwrap_err(),
            ConfigError::HalfCredentials
        );
        assert!(matches!(
            Config::parse(args("--bogus 1")),
            Err(ConfigError::Unknown(_))
        ));
        assert_eq!(
            Config::parse(args("--listen")).unwrap_err(),
            ConfigError::NeedsValue("--listen".into())
        );
    }
}
