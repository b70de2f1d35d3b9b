//! The command line (clap).

use clap::{Args, Parser, Subcommand};
use hipobj::checksum::ChecksumMode;
use hipobj::rcv2::negotiate::Choice;
use hipobj::transport::Mode;

#[derive(Parser, Debug)]
#[command(name = "hipobj", version, about = "Copy S3 objects over RDMA with hipObject, measure it, describe the RDMA devices",
          after_help = crate::failure::EXIT_CODES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Copy an object to a file (`cp s3://BUCKET/KEY FILE`) or a file to an object (`cp FILE s3://BUCKET/KEY`) over RDMA or plain HTTP (--transport); with --recursive a prefix to a directory and back.
    Cp(CpArgs),
    /// Sizes x concurrency x GET/PUT over RDMA, over plain HTTP on the same server, and as --transport auto chooses.
    Bench(BenchArgs),
    /// RDMA devices, ports and GIDs (and which one hipObject uses), GPUs (HIP or CUDA) and their closest NIC.
    Info(InfoArgs),
    /// Create a bucket (`mb s3://BUCKET`); succeeds if it exists already.
    Mb(MbArgs),
}

/// Who signs the requests (`hipobj::client::credentials` resolves them, in the AWS SDKs' order).
#[derive(Args, Debug, Clone, Default)]
pub struct CredentialArgs {
    /// Access key (else AWS_ACCESS_KEY_ID, else the profile's)
    #[arg(long)]
    pub access_key: Option<String>,
    /// Secret key (else AWS_SECRET_ACCESS_KEY, else the profile's)
    #[arg(long)]
    pub secret_key: Option<String>,
    /// Profile of ~/.aws/credentials (else AWS_PROFILE, else "default")
    #[arg(long)]
    pub profile: Option<String>,
    /// SigV4 region (else AWS_REGION, AWS_DEFAULT_REGION, us-east-1)
    #[arg(long)]
    pub region: Option<String>,
    /// For an https:// endpoint: trust only the certificates of this PEM bundle (else
    /// AWS_CA_BUNDLE, else the system's roots)
    #[arg(long, value_name = "FILE")]
    pub ca_bundle: Option<std::path::PathBuf>,
}

impl CredentialArgs {
    /// What the flags give the library's resolution (`hipobj::client::credentials::resolve`).
    pub fn sources(&self) -> hipobj::client::credentials::CredentialSources {
        hipobj::client::credentials::CredentialSources {
            access_key: self.access_key.clone(),
            secret_key: self.secret_key.clone(),
            profile: self.profile.clone(),
            region: self.region.clone(),
            ca_bundle: self.ca_bundle.clone(),
        }
    }
}

/// Where the server is and how hipObject reaches it.
#[derive(Args, Debug, Clone)]
pub struct Endpoint {
    /// S3 endpoint, http://HOST:PORT
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    pub endpoint: String,
    /// RDMA device(s) hipObject uses: rxe0, or rxe0,rxe2 to spread transfers over both and
    /// fail over between them (the first is its nicHint); needed without a GPU
    #[arg(long, env = "HIPOBJ_NIC")]
    pub nic: Option<String>,
    /// Land in / send from memory of GPU N (HIP or CUDA, the runtime the library loads)
    #[arg(long, value_name = "N")]
    pub gpu: Option<i32>,
    /// How the bytes move: auto (per endpoint and size, the faster of RDMA and plain HTTP as
    /// measured, RDMA from 1 MiB up until then; plain HTTP where no RDMA device is usable or the
    /// server declines RDMA), rdma (always: fails without a device), http (always plain HTTP)
    #[arg(long, env = "HIPOBJ_TRANSPORT", default_value = "auto", value_parser = Mode::parse)]
    pub transport: Mode,
    #[command(flatten)]
    pub protocol: ProtocolArgs,
    #[command(flatten)]
    pub credentials: CredentialArgs,
}

/// Which RC protocol the RDMA requests use (docs/protocol.md 10.1).
#[derive(Args, Debug, Clone)]
pub struct ProtocolArgs {
    /// RDMA protocol: v1 (one round trip), v2 (hipobj-rc-v2: PREPARE and READY), or auto (v1
    /// first; v2 once the server answers 501 + X-Amz-Rdma-Protocol-Status: unsupported,
    /// remembered for the command)
    #[arg(long, env = "HIPOBJ_RDMA_PROTOCOL", default_value = "auto", value_parser = parse_protocol)]
    pub rdma_protocol: Choice,
}

fn parse_protocol(v: &str) -> Result<Choice, String> {
    Choice::parse(v)
}

#[derive(Args, Debug)]
pub struct CpArgs {
    /// Source: s3://BUCKET/KEY or a file
    pub source: String,
    /// Destination: a file or s3://BUCKET/KEY
    pub destination: String,
    /// Only bytes FIRST-LAST (inclusive, as HTTP Range; "FIRST-" = to the end) of the source
    #[arg(long, value_name = "FIRST-LAST")]
    pub range: Option<String>,
    /// Bytes per RDMA transfer: ranged GETs of this size, and the parts of a multipart upload
    /// (uploads larger than this go as one; at least 5M for them)
    #[arg(long, alias = "chunk", default_value = "8M", value_parser = crate::units::parse_size)]
    pub part_size: u64,
    /// Transfers in flight (default: HIPOBJ_MAX_TRANSFERS, the library's connections)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub concurrency: Option<u16>,
    /// Copy every object under a prefix to a directory, or every file of a directory under a
    /// prefix
    #[arg(long, short)]
    pub recursive: bool,
    /// Deprecated, kept for scripts: the same as --transport auto (which copies over plain HTTP
    /// when the server declines RDMA with 501), whatever --transport or HIPOBJ_TRANSPORT say
    #[arg(long)]
    pub http_fallback: bool,
    /// Check each download end to end against the object's stored checksum (CRC64NVME, CRC32C
    /// or CRC32, as the bytes land), as the AWS SDKs' response_checksum_validation does:
    /// when_supported (the default) checks whenever the server stores a full-object CRC;
    /// when_required and off check nothing
    #[arg(long, default_value = "when_supported", value_parser = ChecksumMode::parse)]
    pub checksum_mode: ChecksumMode,
    /// No progress bar
    #[arg(long, short)]
    pub quiet: bool,
    #[command(flatten)]
    pub endpoint: Endpoint,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Object sizes (K, M, G suffixes: powers of 1024)
    #[arg(long, value_delimiter = ',', default_value = "4K,1M,16M", value_parser = crate::units::parse_size)]
    pub sizes: Vec<u64>,
    /// Transfers in flight (threads)
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    pub concurrency: Vec<usize>,
    /// Operations: get, put
    #[arg(long, value_delimiter = ',', default_value = "get,put")]
    pub ops: Vec<Op>,
    /// Timed operations per thread, column and cell (the columns alternate in up to three
    /// slices; each slice of each column starts with one untimed warm-up operation)
    #[arg(long, default_value_t = 8)]
    pub iterations: usize,
    /// Bucket for the benchmark objects (created if missing)
    #[arg(long, default_value = "hipobj-bench")]
    pub bucket: String,
    /// Print the results as JSON instead of a table
    #[arg(long)]
    pub json: bool,
    /// The plain-HTTP column against this endpoint instead of --endpoint (same keys and CA
    /// bundle): e.g. the store behind a gateway, to compare RDMA through the gateway with HTTP to
    /// the store directly
    #[arg(long, value_name = "URL")]
    pub http_endpoint: Option<String>,
    /// perftest ib_write_bw MB/s measured on this device pair: GETs are also shown as a ratio to it
    /// (the server RDMA-WRITEs a GET)
    #[arg(long, value_name = "MB/s")]
    pub perftest_write: Option<f64>,
    /// perftest ib_read_bw MB/s measured on this device pair: PUTs are also shown as a ratio to it
    #[arg(long, value_name = "MB/s")]
    pub perftest_read: Option<f64>,
    #[command(flatten)]
    pub endpoint: Endpoint,
}

#[derive(Args, Debug)]
pub struct InfoArgs {
    /// The nicHint to explain the choice for (else HIPOBJ_NIC)
    #[arg(long, env = "HIPOBJ_NIC")]
    pub nic: Option<String>,
    /// Also ask this S3 endpoint (http://HOST:PORT) which RDMA protocol it speaks (v1, v2 or
    /// none), by a real RDMA GET of a key that does not exist (needs --nic)
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Bucket the probe's key is looked up in
    #[arg(long, default_value = "hipobj-probe")]
    pub bucket: String,
    #[command(flatten)]
    pub protocol: ProtocolArgs,
    #[command(flatten)]
    pub credentials: CredentialArgs,
}

#[derive(Args, Debug)]
pub struct MbArgs {
    /// s3://BUCKET
    pub bucket: String,
    /// S3 endpoint, http://HOST:PORT
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    pub endpoint: String,
    #[command(flatten)]
    pub credentials: CredentialArgs,
}

/// An operation `hipobj bench` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Get,
    Put,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Get => "GET",
            Op::Put => "PUT",
        }
    }

    /// The runtime's transfer of this operation.
    pub fn kind(self) -> hipobj::runtime::TransferKind {
        match self {
            Op::Get => hipobj::runtime::TransferKind::Get,
            Op::Put => hipobj::runtime::TransferKind::Put,
        }
    }

    /// The decision's direction of this operation.
    pub fn direction(self) -> hipobj::transport::Direction {
        match self {
            Op::Get => hipobj::transport::Direction::Get,
            Op::Put => hipobj::transport::Direction::Put,
        }
    }
}
