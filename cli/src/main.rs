//! `hipobj`: copy S3 objects over RDMA with hipObject (`cp`), measure it against plain HTTP on
//! the same server (`bench`), and describe the RDMA devices and GPUs (`info`).

mod args;
mod bench;
mod cp;
mod gpu;
mod info;
mod interrupt;
mod session;
mod transport;
mod units;

// The library's S3 client (`hipobj::client`): the command line keeps arguments, progress and
// files.
use hipobj::client::{credentials, failure, plain, rdma, s3, store};

use clap::Parser;
use std::process::ExitCode;

/// `hipobj mb s3://BUCKET`.
fn make_bucket(args: &args::MbArgs) -> Result<(), failure::Failure> {
    let bucket = args
        .bucket
        .strip_prefix("s3://")
        .map(|b| b.trim_end_matches('/'))
        .filter(|b| !b.is_empty() && !b.contains('/'))
        .ok_or_else(|| failure::Failure::Usage(format!("{}: expected s3://BUCKET", args.bucket)))?;
    let s3 = s3::S3::new(
        &args.endpoint,
        credentials::resolve(&args.credentials.sources())?,
    )?;
    s3.ensure_bucket(bucket)?;
    println!("bucket s3://{bucket} ready");
    Ok(())
}

fn main() -> ExitCode {
    let cli = args::Cli::parse();
    let result = match &cli.command {
        args::Command::Cp(a) => cp::run(a),
        args::Command::Bench(a) => bench::run(a),
        args::Command::Info(a) => info::run(a),
        args::Command::Mb(a) => make_bucket(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("hipobj: {f}");
            ExitCode::from(f.code())
        }
    }
}
