//! Command-line flags of `hipobj-server` (clap derive), turned into a checked [`Config`].

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

use crate::backend::s3proxy::{Endpoint, EndpointError};
use crate::backend::{DefaultChecksum, EtagAlgo};
use crate::credentials::{
    Credentials, CredentialsError, CredentialsSource, Secret, SecretFrom, SingleIdentity,
    SECRET_KEY_ENV,
};
use crate::tls::{self, TlsError};

/// Everything the server is configured with.
#[derive(Clone, Debug)]
pub struct Config {
    /// `--listen ADDR:PORT`
    pub listen: SocketAddr,
    /// Where the objects live: `--data-dir` or `--backend`.
    pub store: StoreLocation,
    /// `--device NAME[,NAME...]`: the RDMA devices, in the order given; empty = RDMA disabled.
    pub devices: Vec<String>,
    /// Who may make requests (docs/protocol.md rule 9.1).
    pub auth: AuthMode,
    /// Rule 9.4 (client GID must be the HTTP peer's address) is on unless
    /// `--allow-gid-peer-mismatch`.
    pub check_gid_peer: bool,
    pub rdma: RdmaSettings,
    /// `--tls-cert/--tls-key`: serve HTTP/1.1 over TLS; `None`: plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// `--etag md5|crc64nvme`: what the embedded store's new objects' ETags are (docs/etag.md).
    pub etag: EtagAlgo,
    /// `--default-checksum crc64nvme|none`: the checksum the embedded store keeps for new objects
    /// whose writer named none.
    pub default_checksum: DefaultChecksum,
}

/// The embedded fs store, or gateway mode in front of another S3 store (docs/gateway.md).
#[derive(Clone, Debug)]
pub enum StoreLocation {
    /// `--data-dir DIR`: buckets are its subdirectories.
    Dir(PathBuf),
    /// `--backend s3://HOST:PORT`: token requests stream between this store and RDMA, every
    /// other request passes through to it.
    Gateway {
        endpoint: Endpoint,
        /// `--backend-region NAME`: the SigV4 region of the store.
        region: String,
    },
}

/// SigV4 over a table of identities, or no authentication at all.
#[derive(Clone, Debug)]
pub enum AuthMode {
    /// `--credentials FILE` and/or `--access-key K` (secret from `HIPOBJ_SECRET_KEY` or
    /// `--secret-key`); SIGHUP reads the file again ([`Credentials::reload`]).
    Credentials(Credentials),
    /// `--anonymous`: every request is the identity `anonymous`.
    Anonymous,
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
    /// `--max-pairings N`: size of the pairing table.
    pub max_pairings: usize,
    /// `--max-pairings-per-client N`: pairings one (HTTP peer address, identity) may hold.
    pub max_pairings_per_client: usize,
    /// `--chunk-bytes N`: largest work request (also capped by the port's max_msg_sz).
    pub chunk_bytes: usize,
    /// `--wr-depth N`: work requests in flight per transfer (READs also capped by max_rd_atomic).
    pub wr_depth: usize,
    /// `--watchdog-ms MS`: the shortest time a transfer may go without a completion before it
    /// is aborted (500); on a machine measured slow it gets more, up to 15x (`rdma::patience`).
    pub watchdog: Duration,
    /// Slowest acceptable transfer rate in bytes/s: a transfer of N bytes is aborted (500) after
    /// watchdog + N / min_rate in total, however steadily it trickles.
    pub min_rate: u64,
    /// Token requests beyond `max_transfers` that may wait for a place (more get 503 at once).
    pub queue: usize,
    /// How long a queued token request waits for a place before its 503.
    pub queue_wait: Duration,
    /// hipobj-rc-v2 sessions (docs/protocol.md section 14).
    pub v2: V2Settings,
    /// `--inject-rdma-failures N`: fault injection for tests (as Ceph's `ms_inject_*` options):
    /// the first N token transfers fail on purpose through the real failure path. Only in
    /// builds with the cargo feature `fault-injection`.
    #[cfg(feature = "fault-injection")]
    pub inject_failures: u64,
    /// `--inject-write-offset N`: fault injection for tests: every GET's RDMA WRITE lands N bytes
    /// after where the client asked (a server bug the client's end-to-end checksum must catch).
    /// Only in builds with the cargo feature `fault-injection`.
    #[cfg(feature = "fault-injection")]
    pub inject_write_offset: u64,
    /// `--copy-gets`: every GET goes through a staging buffer (no file registration).
    pub copy_gets: bool,
}

/// The hipobj-rc-v2 knobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct V2Settings {
    /// `--v2-sessions N`: sessions prepared or moving at once; more PREPAREs get 503.
    pub max_sessions: usize,
    /// `--v2-prepare-ms MS` (T_prep): a session not READY this long after its PREPARE is
    /// reclaimed (QP destroyed, window invalidated, staging freed).
    pub prepare_timeout: Duration,
    /// `--v2-data-ms MS` (T_exec): longest data phase (a PUT's wait for the client's write;
    /// a GET's writes also end at the transfer watchdog and rate deadline).
    pub data_timeout: Duration,
    /// `--v2-staging-bytes N`: staging bytes PUT sessions may hold at once; more get 503.
    pub staging_bytes: u64,
}

impl Default for V2Settings {
    fn default() -> Self {
        V2Settings {
            max_sessions: 64,
            prepare_timeout: Duration::from_secs(10),
            data_timeout: Duration::from_secs(30),
            staging_bytes: 1 << 30,
        }
    }
}

impl Default for RdmaSettings {
    fn default() -> Self {
        RdmaSettings {
            max_transfers: 16,
            workers: 4,
            pairing_idle: Duration::from_secs(300),
            max_pairings: 1024,
            max_pairings_per_client: 256,
            chunk_bytes: 1 << 20,
            wr_depth: 8,
            watchdog: Duration::from_millis(2000),
            min_rate: 1 << 20,
            queue: 64,
            queue_wait: Duration::from_secs(2),
            v2: V2Settings::default(),
            #[cfg(feature = "fault-injection")]
            inject_failures: 0,
            #[cfg(feature = "fault-injection")]
            inject_write_offset: 0,
            copy_gets: false,
        }
    }
}

/// SigV4 region assumed for a `--backend` store without `--backend-region`.
pub const DEFAULT_BACKEND_REGION: &str = "us-east-1";

/// The command line as clap sees it.
#[derive(Parser, Debug)]
#[command(
    name = "hipobj-server",
    version,
    about = "S3 server that moves object bytes with one-sided RDMA (hipObject docs/protocol.md)",
    after_help = "Authentication: give --credentials FILE (mode 600: a file group or others \
                  may read is refused) and/or --access-key KEY with its secret in the \
                  environment (HIPOBJ_SECRET_KEY; --secret-key works but shows in ps); \
                  --anonymous serves without it. One of the two is required. SIGHUP reads \
                  the credentials file again (a bad file keeps the identities in use).\n\
                  Logs: RUST_LOG or HIPOBJ_LOG (e.g. HIPOBJ_LOG=debug). \
                  Counters: GET /_hipobj/stats (authenticated; loopback only when anonymous)."
)]
pub struct Cli {
    /// Address to serve S3 on (port 0 = any free port).
    #[arg(long, value_name = "ADDR:PORT")]
    listen: SocketAddr,
    /// Buckets live in DIR/<bucket>/ (the embedded store; or give --backend).
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "backend",
        conflicts_with = "backend"
    )]
    data_dir: Option<PathBuf>,
    /// Gateway mode: serve the objects of this S3 store (s3://HOST:PORT or http://HOST:PORT)
    /// instead of --data-dir. Its identities are this server's (same access and secret keys).
    #[arg(long, value_name = "URL")]
    backend: Option<String>,
    /// SigV4 region of the --backend store [default: us-east-1].
    #[arg(long, value_name = "NAME")]
    backend_region: Option<String>,
    /// Trust only the certificates of this PEM file for an https:// --backend (default: the
    /// system's roots).
    #[arg(long, value_name = "FILE")]
    backend_ca: Option<PathBuf>,
    /// Serve HTTP/1.1 over TLS with this certificate chain (PEM, leaf first; with --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// RDMA devices, comma-separated (e.g. rxe1 or mlx5_0,mlx5_1): each serves the clients whose
    /// GID it faces (the longest common prefix with its own GID; ties to the first listed). A
    /// device that cannot be opened is skipped; absent, empty or none usable = RDMA disabled (501).
    #[arg(long, value_name = "NAME[,NAME...]")]
    device: Option<String>,
    /// Identities, one `ACCESS_KEY SECRET_KEY` per line (`#` comments, blank lines allowed).
    /// Refused when group or others may read it (chmod 600 FILE); read again on SIGHUP.
    #[arg(long, value_name = "FILE")]
    credentials: Option<PathBuf>,
    /// One more identity: its access key; its secret from the environment variable
    /// HIPOBJ_SECRET_KEY (or --secret-key).
    #[arg(long, value_name = "KEY")]
    access_key: Option<String>,
    /// The secret key of --access-key. Visible to every user of the host in `ps` and kept in
    /// shell history: prefer HIPOBJ_SECRET_KEY or --credentials FILE.
    #[arg(long, value_name = "SECRET", requires = "access_key")]
    secret_key: Option<Secret>,
    /// Serve WITHOUT authentication: anyone who reaches the port may read, write and RDMA.
    #[arg(long, conflicts_with_all = ["credentials", "access_key", "secret_key"])]
    anonymous: bool,
    /// Accept token requests whose client GID does not name the HTTP peer's address, in any form,
    /// link-local GIDs included (docs/protocol.md rule 9.4 off). Weakens rule 9.3: an identity may
    /// then make the server aim QPs at client QPs of other hosts.
    #[arg(long)]
    allow_gid_peer_mismatch: bool,
    /// ETags of new objects in the embedded store: md5 (S3's, the default) or crc64nvme (the
    /// object's CRC64NVME in hex, stored and returned as its S3 checksum; no MD5 on the PUT
    /// path unless the client sends Content-MD5). See docs/etag.md.
    #[arg(long, value_enum, default_value_t = EtagAlgo::Md5)]
    etag: EtagAlgo,
    /// The checksum the embedded store computes and keeps for a new object (multipart included)
    /// whose writer sent none: crc64nvme (S3's default: a full-object CRC64NVME, returned on GET
    /// and HEAD with `x-amz-checksum-mode: ENABLED`, so readers check what they received) or
    /// none. A checksum the writer sends is kept instead, as S3 does.
    #[arg(long, value_enum, default_value_t = DefaultChecksum::Crc64nvme)]
    default_checksum: DefaultChecksum,
    /// Token requests handled at once; more get 503.
    #[arg(long, value_name = "N", default_value_t = RdmaSettings::default().max_transfers, value_parser = positive)]
    max_rdma_transfers: usize,
    /// RDMA worker threads.
    #[arg(long, value_name = "N", default_value_t = RdmaSettings::default().workers, value_parser = positive)]
    rdma_workers: usize,
    /// Destroy pairings idle this long (seconds).
    #[arg(long, value_name = "S", default_value_t = RdmaSettings::default().pairing_idle.as_secs())]
    pairing_idle_secs: u64,
    /// Pairing table size.
    #[arg(long, value_name = "N", default_value_t = RdmaSettings::default().max_pairings, value_parser = positive)]
    max_pairings: usize,
    /// Pairings one client (HTTP peer address + identity) may hold; at its quota a client's new
    /// pairing evicts its own least recently used one, never another client's.
    #[arg(long, value_name = "N", default_value_t = RdmaSettings::default().max_pairings_per_client, value_parser = positive)]
    max_pairings_per_client: usize,
    /// Largest RDMA work request in bytes.
    #[arg(long, value_name = "N", default_value_t = RdmaSettings::default().chunk_bytes, value_parser = positive)]
    chunk_bytes: usize,
    /// Work requests in flight per transfer.
    #[arg(long, value_name = "N", default_value_t = RdmaSettings::default().wr_depth, value_parser = positive)]
    wr_depth: usize,
    /// Abort a transfer without progress for this long (milliseconds) at least; a machine
    /// measured slow gets up to 15x more (8x the measured time of the bytes in flight).
    #[arg(long, value_name = "MS", default_value_t = 2000, value_parser = positive)]
    watchdog_ms: usize,
    /// Slowest acceptable transfer rate (bytes/s): a transfer of N bytes is aborted after the
    /// watchdog time + N / RATE in total, however steadily it trickles.
    #[arg(long, value_name = "RATE", default_value_t = RdmaSettings::default().min_rate as usize, value_parser = positive)]
    min_rate: usize,
    /// Token requests beyond --max-rdma-transfers that may wait for a place (more get 503).
    #[arg(long, value_name = "N", default_value_t = RdmaSettings::default().queue)]
    rdma_queue: usize,
    /// How long a queued token request waits for a place before its 503 (milliseconds).
    #[arg(long, value_name = "MS", default_value_t = RdmaSettings::default().queue_wait.as_millis() as u64)]
    rdma_queue_wait_ms: u64,
    /// Fault injection for tests: the first N token transfers fail on purpose (the paired QP is
    /// moved to the error state before the first work request: a real RDMA failure, 500, the
    /// pairing destroyed), so clients' retries can be tested. 0 injects nothing. Only a server
    /// built with the cargo feature `fault-injection` accepts it; the shipped one refuses it.
    #[arg(long, value_name = "N")]
    inject_rdma_failures: Option<u64>,
    /// Fault injection for tests: every GET's RDMA WRITE lands N bytes after the client's address
    /// (the object's first bytes at the destination's byte N; its last N bytes are not sent, so
    /// the WRITE stays inside the client's buffer) and is answered 200, as a server with an
    /// offset bug would: the client's end-to-end checksum must catch it. 0 injects nothing. Only
    /// a server built with the cargo feature `fault-injection` accepts it.
    #[arg(long, value_name = "N")]
    inject_write_offset: Option<u64>,
    /// Copy every token GET through a registered staging buffer. By default a GET longer than
    /// one chunk is sent straight from the object's file: its pages are mapped read-only and
    /// registered for the transfer (no copy; they stay pinned only while it runs), falling back
    /// to the copy when the registration is refused.
    #[arg(long)]
    copy_gets: bool,
    /// hipobj-rc-v2 sessions prepared or moving at once; more PREPAREs get 503.
    #[arg(long, value_name = "N", default_value_t = V2Settings::default().max_sessions, value_parser = positive)]
    v2_sessions: usize,
    /// Reclaim a hipobj-rc-v2 session not READY this long after its PREPARE (T_prep, ms).
    #[arg(long, value_name = "MS", default_value_t = V2Settings::default().prepare_timeout.as_millis() as usize, value_parser = positive)]
    v2_prepare_ms: usize,
    /// Longest hipobj-rc-v2 data phase (T_exec, ms).
    #[arg(long, value_name = "MS", default_value_t = V2Settings::default().data_timeout.as_millis() as usize, value_parser = positive)]
    v2_data_ms: usize,
    /// Staging bytes hipobj-rc-v2 PUT sessions may hold at once; more get 503.
    #[arg(long, value_name = "N", default_value_t = V2Settings::default().staging_bytes as usize, value_parser = positive)]
    v2_staging_bytes: usize,
}

fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{s:?} is not a positive integer")),
    }
}

/// Why the server refuses to start.
#[derive(Debug)]
pub enum ConfigError {
    /// Bad flags, or --help/--version (clap prints and picks the exit code).
    Cli(clap::Error),
    /// A credentials file that cannot be used.
    Credentials(CredentialsError),
    /// Neither identities nor --anonymous.
    NoAuthentication,
    /// `--backend` with an unusable URL.
    Backend(EndpointError),
    /// `--tls-cert/--tls-key` that cannot be served with.
    Tls(TlsError),
    /// `--device` names one device twice.
    DuplicateDevice(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Cli(e) => write!(f, "{e}"),
            ConfigError::Credentials(e) => write!(f, "{e}"),
            ConfigError::NoAuthentication => f.write_str(
                "refusing to start without authentication: give --credentials FILE \
                 (one `ACCESS_KEY SECRET_KEY` per line, mode 600) or --access-key KEY with \
                 its secret in HIPOBJ_SECRET_KEY, or serve without authentication with \
                 --anonymous",
            ),
            ConfigError::Backend(e) => write!(f, "{e}"),
            ConfigError::Tls(e) => write!(f, "--tls-cert/--tls-key: {e}"),
            ConfigError::DuplicateDevice(name) => {
                write!(f, "--device names {name:?} more than once")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// `--device`'s comma-separated names, blanks around each and empty items ignored; a name given
/// twice is an error.
fn device_list(arg: Option<&str>) -> Result<Vec<String>, ConfigError> {
    let mut devices: Vec<String> = Vec::new();
    for name in arg.unwrap_or("").split(',').map(str::trim) {
        if name.is_empty() {
            continue;
        }
        if devices.iter().any(|d| d == name) {
            return Err(ConfigError::DuplicateDevice(name.to_string()));
        }
        devices.push(name.to_string());
    }
    Ok(devices)
}

impl From<clap::Error> for ConfigError {
    fn from(e: clap::Error) -> Self {
        ConfigError::Cli(e)
    }
}

impl From<CredentialsError> for ConfigError {
    fn from(e: CredentialsError) -> Self {
        ConfigError::Credentials(e)
    }
}

impl Config {
    /// Parse a command line (the first item is the program name) and load the credentials;
    /// `--access-key`'s secret may come from the environment (`HIPOBJ_SECRET_KEY`).
    pub fn from_args<I, T>(args: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let secret = std::env::var(SECRET_KEY_ENV).ok().map(Secret::new);
        Config::from_args_and_secret(args, secret)
    }

    /// [`Config::from_args`] with `secret_env` as the value of `HIPOBJ_SECRET_KEY` (`None`:
    /// unset) instead of the process's environment.
    pub fn from_args_and_secret<I, T>(
        args: I,
        secret_env: Option<Secret>,
    ) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        Config::from_cli(Cli::try_parse_from(args)?, secret_env)
    }

    fn from_cli(cli: Cli, secret_env: Option<Secret>) -> Result<Config, ConfigError> {
        let auth = auth_mode(&cli, secret_env)?;
        // Checked here: clap skips `requires` on a flag whose target conflicts with another.
        for (given, flag) in [
            (cli.backend_region.is_some(), "--backend-region"),
            (cli.backend_ca.is_some(), "--backend-ca"),
        ] {
            if cli.backend.is_none() && given {
                let e = <Cli as clap::CommandFactory>::command().error(
                    clap::error::ErrorKind::MissingRequiredArgument,
                    format!("{flag} goes with --backend"),
                );
                return Err(ConfigError::Cli(e));
            }
        }
        // Refused here in a build without the feature; only such a build uses the value.
        #[cfg_attr(not(feature = "fault-injection"), allow(unused_variables))]
        let inject_failures = injection("--inject-rdma-failures", cli.inject_rdma_failures)?;
        #[cfg_attr(not(feature = "fault-injection"), allow(unused_variables))]
        let inject_write_offset = injection("--inject-write-offset", cli.inject_write_offset)?;
        let tls = match (&cli.tls_cert, &cli.tls_key) {
            (Some(cert), Some(key)) => {
                Some(tls::server_config(cert, key).map_err(ConfigError::Tls)?)
            }
            // clap requires both or neither.
            _ => None,
        };
        let store = match (cli.backend, cli.data_dir) {
            (Some(url), _) => StoreLocation::Gateway {
                endpoint: backend_endpoint(&url, cli.backend_ca.as_deref())?,
                region: cli
                    .backend_region
                    .unwrap_or_else(|| DEFAULT_BACKEND_REGION.to_string()),
            },
            (None, Some(dir)) => StoreLocation::Dir(dir),
            // clap requires one of the two.
            (None, None) => StoreLocation::Dir(PathBuf::from(".")),
        };
        Ok(Config {
            listen: cli.listen,
            store,
            devices: device_list(cli.device.as_deref())?,
            auth,
            check_gid_peer: !cli.allow_gid_peer_mismatch,
            etag: cli.etag,
            default_checksum: cli.default_checksum,
            rdma: RdmaSettings {
                max_transfers: cli.max_rdma_transfers,
                workers: cli.rdma_workers,
                pairing_idle: Duration::from_secs(cli.pairing_idle_secs),
                max_pairings: cli.max_pairings,
                max_pairings_per_client: cli.max_pairings_per_client.min(cli.max_pairings),
                chunk_bytes: cli.chunk_bytes,
                wr_depth: cli.wr_depth,
                watchdog: Duration::from_millis(cli.watchdog_ms as u64),
                min_rate: cli.min_rate as u64,
                queue: cli.rdma_queue,
                queue_wait: Duration::from_millis(cli.rdma_queue_wait_ms),
                v2: V2Settings {
                    max_sessions: cli.v2_sessions,
                    prepare_timeout: Duration::from_millis(cli.v2_prepare_ms as u64),
                    data_timeout: Duration::from_millis(cli.v2_data_ms as u64),
                    staging_bytes: cli.v2_staging_bytes as u64,
                },
                #[cfg(feature = "fault-injection")]
                inject_failures,
                #[cfg(feature = "fault-injection")]
                inject_write_offset,
                copy_gets: cli.copy_gets,
            },
            tls,
        })
    }
}

/// A fault-injection flag (`--inject-rdma-failures N`, `--inject-write-offset N`): N in a build
/// with the cargo feature `fault-injection`; in any other build the flag is refused, so a test
/// that counts on injected faults never runs against a server that injects none.
fn injection(flag: &str, given: Option<u64>) -> Result<u64, ConfigError> {
    match given {
        None => Ok(0),
        Some(n) if cfg!(feature = "fault-injection") => Ok(n),
        Some(_) => Err(ConfigError::Cli(
            <Cli as clap::CommandFactory>::command().error(
                clap::error::ErrorKind::ArgumentConflict,
                format!(
                    "{flag}: this hipobj-server was built without fault injection \
                     (cargo feature `fault-injection`; the lane's build is \
                     target/e2e/hipobj-server-faults, made by scripts/build-e2e)"
                ),
            ),
        )),
    }
}

/// `--backend URL [--backend-ca FILE]`; the CA file is read here, so that a bad one stops the
/// start rather than the first request.
fn backend_endpoint(url: &str, ca: Option<&std::path::Path>) -> Result<Endpoint, ConfigError> {
    let mut endpoint = Endpoint::parse(url).map_err(ConfigError::Backend)?;
    if let Some(ca) = ca {
        endpoint = endpoint.with_ca(ca).map_err(ConfigError::Backend)?;
    }
    endpoint
        .tls_config()
        .map_err(|e| ConfigError::Backend(EndpointError::Tls(e.to_string())))?;
    Ok(endpoint)
}

fn auth_mode(cli: &Cli, secret_env: Option<Secret>) -> Result<AuthMode, ConfigError> {
    if cli.anonymous {
        return Ok(AuthMode::Anonymous);
    }
    let single = match (&cli.access_key, &cli.secret_key) {
        (Some(access_key), Some(secret)) => Some(SingleIdentity {
            access_key: access_key.clone(),
            secret: secret.clone(),
            from: SecretFrom::CommandLine,
        }),
        (Some(access_key), None) => match secret_env.filter(|s| !s.expose().is_empty()) {
            Some(secret) => Some(SingleIdentity {
                access_key: access_key.clone(),
                secret,
                from: SecretFrom::Environment,
            }),
            None => {
                let e = <Cli as clap::CommandFactory>::command().error(
                    clap::error::ErrorKind::MissingRequiredArgument,
                    format!(
                        "--access-key needs its secret: set the environment variable \
                         {SECRET_KEY_ENV} (or give --secret-key, which shows in ps)"
                    ),
                );
                return Err(ConfigError::Cli(e));
            }
        },
        // clap: --secret-key requires --access-key.
        (None, _) => None,
    };
    let credentials = Credentials::load(CredentialsSource {
        file: cli.credentials.clone(),
        single,
    })?;
    if credentials.current().is_empty() {
        return Err(ConfigError::NoAuthentication);
    }
    Ok(AuthMode::Credentials(credentials))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `s` parsed with `HIPOBJ_SECRET_KEY` unset, whatever the tests' environment.
    fn parse(s: &str) -> Result<Config, ConfigError> {
        parse_with_env(s, None)
    }

    fn parse_with_env(s: &str, secret_env: Option<&str>) -> Result<Config, ConfigError> {
        Config::from_args_and_secret(
            std::iter::once("hipobj-server").chain(s.split_whitespace()),
            secret_env.map(Secret::new),
        )
    }

    /// A credentials file of mode 0600 in `dir`.
    fn private_file(dir: &std::path::Path, name: &str, text: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let file = dir.join(name);
        std::fs::write(&file, text).expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        file
    }

    fn clap_kind(r: Result<Config, ConfigError>) -> clap::error::ErrorKind {
        match r {
            Err(ConfigError::Cli(e)) => e.kind(),
            other => panic!("expected a clap error, got {other:?}"),
        }
    }

    #[test]
    fn device_takes_a_comma_separated_list_in_order() {
        let base = "--listen 127.0.0.1:1 --data-dir /x --anonymous";
        let c = parse(&format!("{base} --device rxe3,rxe1")).expect("valid");
        assert_eq!(c.devices, ["rxe3", "rxe1"]);
        let c = parse(&format!("{base} --device=rxe1,,rxe3,")).expect("valid");
        assert_eq!(c.devices, ["rxe1", "rxe3"], "empty items are ignored");
        match parse(&format!("{base} --device rxe1,rxe3,rxe1")) {
            Err(ConfigError::DuplicateDevice(name)) => assert_eq!(name, "rxe1"),
            other => panic!("expected a duplicate device error, got {other:?}"),
        }
    }

    #[test]
    fn parses_required_and_extras() {
        let c = parse(
            "--listen 127.0.0.1:9000 --data-dir /tmp/d --device=rxe0 --max-rdma-transfers 3 \
             --chunk-bytes=4096 --watchdog-ms 50 --pairing-idle-secs 0 --anonymous",
        )
        .expect("valid");
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.devices, ["rxe0"]);
        assert_eq!(c.rdma.max_transfers, 3);
        assert_eq!(c.rdma.chunk_bytes, 4096);
        assert_eq!(c.rdma.watchdog, Duration::from_millis(50));
        assert_eq!(c.rdma.pairing_idle, Duration::ZERO);
        assert!(matches!(c.auth, AuthMode::Anonymous));
        assert!(c.check_gid_peer);
        let c = parse(
            "--listen 127.0.0.1:1 --data-dir /x --access-key a --secret-key s \
             --allow-gid-peer-mismatch --device= --max-pairings 8",
        )
        .expect("valid");
        assert!(!c.check_gid_peer);
        assert!(c.devices.is_empty());
        assert_eq!(
            c.rdma.max_pairings_per_client, 8,
            "quota capped by the table"
        );
        match c.auth {
            AuthMode::Credentials(t) => {
                let t = t.current();
                assert!(t.contains("a") && t.len() == 1)
            }
            AuthMode::Anonymous => panic!("credentials expected"),
        }
    }

    #[test]
    fn credentials_file_and_flag_pair_are_one_table() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = private_file(dir.path(), "creds", "alice a\nbob b\n");
        let c = parse(&format!(
            "--listen 127.0.0.1:1 --data-dir /x --credentials {} --access-key carol --secret-key c",
            file.display()
        ))
        .expect("valid");
        let AuthMode::Credentials(t) = c.auth else {
            panic!("credentials expected")
        };
        assert_eq!(t.current().len(), 3);
        // The flag pair may not repeat a key of the file.
        let dup = parse(&format!(
            "--listen 127.0.0.1:1 --data-dir /x --credentials {} --access-key bob --secret-key c",
            file.display()
        ));
        assert!(matches!(
            dup,
            Err(ConfigError::Credentials(CredentialsError::Duplicate { .. }))
        ));
        // A malformed file stops the start with its line.
        std::fs::write(&file, "alice a\nbob\n").expect("write");
        let err = parse(&format!(
            "--listen 127.0.0.1:1 --data-dir /x --credentials {}",
            file.display()
        ))
        .expect_err("malformed");
        assert!(err.to_string().contains(":2:"), "{err}");
    }

    #[test]
    fn rejects_bad_input() {
        use clap::error::ErrorKind;
        assert_eq!(
            clap_kind(parse("--data-dir /x --anonymous")),
            ErrorKind::MissingRequiredArgument
        );
        assert_eq!(
            clap_kind(parse("--listen nowhere --data-dir /x --anonymous")),
            ErrorKind::ValueValidation
        );
        assert_eq!(
            clap_kind(parse(
                "--listen 127.0.0.1:1 --data-dir /x --chunk-bytes 0 --anonymous"
            )),
            ErrorKind::ValueValidation
        );
        assert_eq!(
            clap_kind(parse("--listen 127.0.0.1:1 --data-dir /x --access-key a")),
            ErrorKind::MissingRequiredArgument
        );
        assert_eq!(
            clap_kind(parse(
                "--listen 127.0.0.1:1 --data-dir /x --anonymous --access-key a --secret-key s"
            )),
            ErrorKind::ArgumentConflict
        );
        assert_eq!(clap_kind(parse("--bogus 1")), ErrorKind::UnknownArgument);
        assert_eq!(clap_kind(parse("--help")), ErrorKind::DisplayHelp);
    }

    /// The shipped build refuses `--inject-rdma-failures` with a clear error; a build with the
    /// cargo feature `fault-injection` takes it.
    #[test]
    fn fault_injection_only_in_a_build_with_the_feature() {
        for flag in ["--inject-rdma-failures", "--inject-write-offset"] {
            let args = format!("--listen 127.0.0.1:1 --data-dir /x --anonymous {flag} 2");
            #[cfg(not(feature = "fault-injection"))]
            {
                let err = parse(&args).expect_err("refused without the feature");
                assert_eq!(
                    clap_kind(Err(err)),
                    clap::error::ErrorKind::ArgumentConflict
                );
                let message = parse(&args).expect_err("refused").to_string();
                assert!(
                    message.contains("built without fault injection") && message.contains(flag),
                    "{message}"
                );
            }
            #[cfg(feature = "fault-injection")]
            {
                let rdma = parse(&args).expect("valid").rdma;
                let taken = match flag {
                    "--inject-rdma-failures" => rdma.inject_failures,
                    _ => rdma.inject_write_offset,
                };
                assert_eq!(taken, 2, "{flag}");
            }
        }
        // Without the flag every build starts.
        parse("--listen 127.0.0.1:1 --data-dir /x --anonymous").expect("valid");
    }

    #[test]
    fn gateway_mode_flags() {
        use clap::error::ErrorKind;
        let c =
            parse("--listen 127.0.0.1:1 --backend s3://127.0.0.1:9000 --anonymous").expect("valid");
        match c.store {
            StoreLocation::Gateway { endpoint, region } => {
                assert_eq!(endpoint.authority(), "127.0.0.1:9000");
                assert_eq!(region, "us-east-1");
            }
            StoreLocation::Dir(d) => panic!("gateway expected, got {d:?}"),
        }
        let c = parse(
            "--listen 127.0.0.1:1 --backend http://store:80/ --backend-region eu-1 --anonymous",
        )
        .expect("valid");
        assert!(matches!(c.store, StoreLocation::Gateway { region, .. } if region == "eu-1"));
        assert!(matches!(
            parse("--listen 127.0.0.1:1 --backend s3://h:1 --backend-ca /ca.pem --anonymous"),
            Err(ConfigError::Backend(EndpointError::CaWithoutTls))
        ));
        let missing = parse(
            "--listen 127.0.0.1:1 --backend https://h:1 --backend-ca /nonexistent.pem --anonymous",
        )
        .expect_err("unreadable CA");
        assert!(
            missing.to_string().contains("/nonexistent.pem"),
            "{missing}"
        );
        assert_eq!(
            clap_kind(parse(
                "--listen 127.0.0.1:1 --data-dir /x --backend-ca /ca.pem --anonymous"
            )),
            ErrorKind::MissingRequiredArgument
        );
        assert_eq!(
            clap_kind(parse(
                "--listen 127.0.0.1:1 --data-dir /x --tls-cert /c.pem --anonymous"
            )),
            ErrorKind::MissingRequiredArgument
        );
        let bad = parse(
            "--listen 127.0.0.1:1 --data-dir /x --tls-cert /no/c.pem --tls-key /no/k.pem --anonymous",
        )
        .expect_err("unreadable certificate");
        assert!(
            matches!(bad, ConfigError::Tls(_)) && bad.to_string().contains("/no/c.pem"),
            "{bad}"
        );
        assert!(matches!(
            parse("--listen 127.0.0.1:1 --backend h:1 --anonymous"),
            Err(ConfigError::Backend(EndpointError::Scheme(_)))
        ));
        assert_eq!(
            clap_kind(parse(
                "--listen 127.0.0.1:1 --data-dir /x --backend s3://h:1 --anonymous"
            )),
            ErrorKind::ArgumentConflict
        );
        assert_eq!(
            clap_kind(parse("--listen 127.0.0.1:1 --anonymous")),
            ErrorKind::MissingRequiredArgument
        );
        assert_eq!(
            clap_kind(parse(
                "--listen 127.0.0.1:1 --data-dir /x --backend-region r --anonymous"
            )),
            ErrorKind::MissingRequiredArgument
        );
    }

    #[test]
    fn a_credentials_file_group_or_others_may_read_stops_the_start() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let file = private_file(dir.path(), "creds", "alice a\n");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let err = parse(&format!(
            "--listen 127.0.0.1:1 --data-dir /x --credentials {}",
            file.display()
        ))
        .expect_err("a file others may read");
        assert!(
            matches!(
                err,
                ConfigError::Credentials(CredentialsError::Exposed { mode: 0o644, .. })
            ),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(
            message.contains(&file.display().to_string())
                && message.contains("0644")
                && message.contains(&format!("chmod 600 {}", file.display())),
            "{message}"
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        parse(&format!(
            "--listen 127.0.0.1:1 --data-dir /x --credentials {}",
            file.display()
        ))
        .expect("mode 600 serves");
    }

    #[test]
    fn the_access_keys_secret_comes_from_the_environment_or_argv() {
        let base = "--listen 127.0.0.1:1 --data-dir /x --access-key a";
        let c = parse_with_env(base, Some("from-env")).expect("valid");
        let AuthMode::Credentials(t) = c.auth else {
            panic!("credentials expected")
        };
        assert_eq!(t.current().secret_of("a"), Some("from-env"));
        let single = t.source().single.as_ref().expect("single identity");
        assert_eq!(single.from, SecretFrom::Environment);
        // --secret-key still works (the server warns at start), and wins over the environment.
        let c =
            parse_with_env(&format!("{base} --secret-key argv"), Some("from-env")).expect("valid");
        let AuthMode::Credentials(t) = c.auth else {
            panic!("credentials expected")
        };
        assert_eq!(t.current().secret_of("a"), Some("argv"));
        assert_eq!(
            t.source().single.as_ref().map(|s| s.from),
            Some(SecretFrom::CommandLine)
        );
        // Neither: refused, naming the variable; an empty variable is none.
        for env in [None, Some("")] {
            let err = parse_with_env(base, env).expect_err("no secret");
            assert!(err.to_string().contains(SECRET_KEY_ENV), "{err}");
            assert_eq!(
                clap_kind(Err(err)),
                clap::error::ErrorKind::MissingRequiredArgument
            );
        }
        // The variable alone adds no identity.
        assert!(matches!(
            parse_with_env("--listen 127.0.0.1:1 --data-dir /x", Some("s")),
            Err(ConfigError::NoAuthentication)
        ));
    }

    /// No secret reaches a Debug output of the configuration or its parts, nor an error of the
    /// flags or of the credentials file (issue 52: secrets never in a log line or a message).
    #[test]
    fn secrets_never_appear_in_debug_output_or_errors() {
        use std::os::unix::fs::PermissionsExt;
        const S1: &str = "Sekr1t-file-QQQ";
        const S2: &str = "Sekr1t-argv-ZZZ";
        const S3: &str = "Sekr1t-env-WWW";
        let secrets = [S1, S2, S3];
        let clean = |what: &str, text: &str| {
            for s in secrets {
                assert!(!text.contains(s), "{what} shows a secret: {text}");
            }
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let file = private_file(dir.path(), "creds", &format!("alice {S1}\n"));
        let f = file.display();

        // A configuration that holds all three secrets, and each part of it.
        let c = parse_with_env(
            &format!("--listen 127.0.0.1:1 --data-dir /x --credentials {f} --access-key bob --secret-key {S2}"),
            Some(S3),
        )
        .expect("valid");
        clean("Config", &format!("{c:?}"));
        clean("Config (pretty)", &format!("{c:#?}"));
        let AuthMode::Credentials(live) = &c.auth else {
            panic!("credentials expected")
        };
        assert_eq!(
            live.current().secret_of("alice"),
            Some(S1),
            "the secret is there"
        );
        clean("Credentials", &format!("{live:?}"));
        clean("CredentialsTable", &format!("{:?}", live.current()));
        clean("CredentialsSource", &format!("{:?}", live.source()));
        clean("SingleIdentity", &format!("{:?}", live.source().single));
        clean("Secret", &format!("{:?}", Secret::new(S1)));
        let c = parse_with_env(
            "--listen 127.0.0.1:1 --data-dir /x --access-key bob",
            Some(S3),
        )
        .expect("valid");
        clean("Config (env)", &format!("{c:?}"));
        let cli = Cli::try_parse_from(
            format!(
                "hipobj-server --listen 127.0.0.1:1 --data-dir /x --access-key b --secret-key {S2}"
            )
            .split_whitespace(),
        )
        .expect("flags");
        clean("Cli", &format!("{cli:?}"));

        // Errors of the flags and of the file, each as Display and Debug.
        let mut errors: Vec<ConfigError> = Vec::new();
        let base = "--listen 127.0.0.1:1 --data-dir /x";
        for args in [
            format!("{base} --anonymous --access-key a --secret-key {S2}"),
            format!("{base} --secret-key {S2}"),
            format!("{base} --access-key a --secret-key {S2} --secret-key {S2}"),
            format!("{base} --credentials {f} --access-key alice --secret-key {S2}"),
            format!("{base} --access-key anonymous --secret-key {S2}"),
            format!("{base} --access-key a --secret-key {S2} --bogus"),
            format!("--data-dir /x --access-key a --secret-key {S2}"),
        ] {
            errors.push(parse(&args).expect_err(&args));
        }
        errors.push(
            parse_with_env(
                &format!("{base} --credentials {f} --access-key alice"),
                Some(S3),
            )
            .expect_err("duplicate from the environment"),
        );
        for (text, mode) in [
            (format!("alice {S1} {S2}\n"), 0o600),
            (format!("alice {S1}\nalice {S2}\n"), 0o600),
            (format!("anonymous {S1}\n"), 0o600),
            (format!("{S1}\n"), 0o600),
            (format!("al\u{7f}ice {S1}\n"), 0o600),
            (format!("alice {S1}\n"), 0o644),
        ] {
            std::fs::write(&file, &text).expect("write");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("chmod");
            errors.push(parse(&format!("{base} --credentials {f}")).expect_err(&text));
        }
        for e in &errors {
            clean("ConfigError (Display)", &e.to_string());
            clean("ConfigError (Debug)", &format!("{e:?}"));
        }
    }

    #[test]
    fn refuses_to_start_without_authentication() {
        let err = parse("--listen 127.0.0.1:1 --data-dir /x").expect_err("no auth");
        assert!(matches!(err, ConfigError::NoAuthentication));
        assert!(err.to_string().contains("--anonymous"), "{err}");
    }
}
