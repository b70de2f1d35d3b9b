//! Logging: `tracing` events, printed to stderr only when `HIPOBJ_LOG` is set (e.g. `warn`, `debug`,
//! `hipobj=trace`), and only if the application has not installed a subscriber of its own.

use std::sync::Once;

pub fn init_from_env() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Some(filter) = std::env::var_os("HIPOBJ_LOG") else {
            return;
        };
        let filter = filter.to_string_lossy().into_owned();
        if filter.is_empty() {
            return;
        }
        let filter = tracing_subscriber::EnvFilter::try_new(&filter)
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .try_init();
    });
}
