//! Wiring: storage, RDMA (if a usable device was named), the s3s service with optional SigV4,
//! the `/_hipobj/stats` endpoint in front of it, the accept loop and graceful shutdown.

use std::future::Future;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use hyper_util::server::graceful::GracefulShutdown;
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::{Body, HttpError, HttpResponse};
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::config::{AuthMode, Config};
use crate::rdma::engine::{Engine, EngineSettings};
use crate::rdma::verbs_port::VerbsPort;
use crate::rdma::worker::RdmaWorkers;
use crate::s3::HipobjS3;
use crate::stats::Stats;
use crate::storage::Storage;

/// Path of the counters endpoint (GET, no authentication).
pub const STATS_PATH: &str = "/_hipobj/stats";

/// How often idle pairings are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Open the RDMA device named by `--device`; `None` (RDMA disabled, 501) when none was named
/// or it cannot be used here.
pub fn start_rdma(
    config: &Config,
    storage: &Arc<Storage>,
    stats: &Arc<Stats>,
) -> Option<Arc<RdmaWorkers>> {
    let Some(name) = &config.device else {
        info!("RDMA disabled: no --device given; token requests get 501");
        return None;
    };
    let port = match VerbsPort::open(name) {
        Ok(p) => p,
        Err(e) => {
            warn!(device = %name, error = %e, "RDMA disabled: device unusable; token requests get 501");
            return None;
        }
    };
    let settings = EngineSettings::from(&config.rdma);
    let engine = Arc::new(Engine::new(
        port,
        &settings,
        Arc::clone(storage),
        Arc::clone(stats),
    ));
    let sweep = SWEEP_EVERY.min(config.rdma.pairing_idle.max(Duration::from_millis(100)));
    match RdmaWorkers::start(
        engine,
        config.rdma.workers,
        config.rdma.max_transfers,
        sweep,
    ) {
        Ok(w) => Some(Arc::new(w)),
        Err(e) => {
            warn!(error = %e, "RDMA disabled: cannot start worker threads");
            None
        }
    }
}

/// The HTTP service: the stats endpoint, everything else to s3s.
#[derive(Clone)]
struct Front {
    s3: S3Service,
    stats: Arc<Stats>,
}

impl hyper::service::Service<http::Request<Incoming>> for Front {
    type Response = HttpResponse;
    type Error = HttpError;
    type Future = BoxFuture<'static, Result<HttpResponse, HttpError>>;

    fn call(&self, req: http::Request<Incoming>) -> Self::Future {
        if req.method() == http::Method::GET && req.uri().path() == STATS_PATH {
            let body = self.stats.to_json();
            let mut resp = http::Response::new(Body::from(body));
            resp.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            return Box::pin(async move { Ok(resp) });
        }
        hyper::service::Service::call(&self.s3, req)
    }
}

/// The loud start-up warning of `--anonymous`, on stderr whatever the log filter.
fn announce_anonymous() {
    const BANNER: &str = "\
WARNING ************************************************************************
WARNING  hipobj-server is serving WITHOUT AUTHENTICATION (--anonymous).
WARNING  Anyone who can reach this port can read, overwrite and delete every
WARNING  object, and make this server RDMA into and out of client memory.
WARNING ************************************************************************";
    eprintln!("{BANNER}");
    warn!("serving without authentication (--anonymous)");
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                warn!(error = %e, "cannot watch SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Serve until `shutdown` resolves. Prints `listening on ADDR` on stdout once ready.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    let storage = Arc::new(Storage::open(&config.data_dir)?);
    let stats = Arc::new(Stats::default());
    let rdma = start_rdma(&config, &storage, &stats);

    let mut builder = S3ServiceBuilder::new(HipobjS3::new(
        Arc::clone(&storage),
        rdma.clone(),
        Arc::clone(&stats),
    ));
    match &config.auth {
        AuthMode::Credentials(table) => {
            info!(identities = table.len(), "SigV4 authentication required");
            builder.set_auth(table.clone());
        }
        AuthMode::Anonymous => announce_anonymous(),
    }
    let front = Front {
        s3: builder.build(),
        stats,
    };

    let listener = TcpListener::bind(config.listen).await?;
    let local = listener.local_addr()?;
    info!(%local, data_dir = %config.data_dir.display(), rdma = rdma.is_some(), "serving");
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {local}")?;
        out.flush()?;
    }

    let http = ConnBuilder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let conn = http
            .serve_connection(TokioIo::new(stream), front.clone())
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    info!("shutting down");
    drop(listener);
    drop(front);
    if tokio::time::timeout(Duration::from_secs(10), graceful.shutdown())
        .await
        .is_err()
    {
        warn!("connections still open after 10 s; closing anyway");
    }
    // Joins the RDMA threads (each finishes its current job) off the async workers.
    if let Some(rdma) = rdma {
        let _ = tokio::task::spawn_blocking(move || drop(rdma)).await;
    }
    Ok(())
}
