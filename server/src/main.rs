use std::process::ExitCode;

use hipobj_server::config::{Config, ConfigError};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let config = match Config::parse(std::env::args().skip(1)) {
        Ok(c) => c,
        Err(ConfigError::Help) => {
            println!("{}", hipobj_server::config::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("hipobj-server: {e}");
            return ExitCode::from(2);
        }
    };
    let filter = std::env::var("HIPOBJ_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".to_string());
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
