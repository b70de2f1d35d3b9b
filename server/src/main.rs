use std::process::ExitCode;

use hipobj_server::config::{Config, ConfigError};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let config = match Config::from_args(std::env::args_os()) {
        Ok(c) => c,
        // --help, --version and flag errors: clap prints them and picks the exit code.
        Err(ConfigError::Cli(e)) => e.exit(),
        Err(e) => {
            eprintln!("hipobj-server: {e}");
            return ExitCode::from(2);
        }
    };
    let mut filter = std::env::var("HIPOBJ_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".to_string());
    // s3s logs every non-2xx answer at ERROR, and 428 is part of the normal flow; our own logs
    // cover real failures. Ask for s3s explicitly (e.g. HIPOBJ_LOG=debug,s3s=debug) to see it.
    if !filter.contains("s3s") {
        filter.push_str(",s3s=off");
    }
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hipobj-server: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(hipobj_server::serve::run(
        config,
        hipobj_server::serve::shutdown_signal(),
    )) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hipobj-server: {e}");
            ExitCode::FAILURE
        }
    }
}
