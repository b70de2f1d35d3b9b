//! Wiring: storage (the fs backend, or in gateway mode the S3 proxy plus the pass-through of
//! token-less requests), RDMA (over every usable device named), the s3s service with SigV4 over the
//! credentials table, the access hook and the `/_hipobj/stats` route (`access`), the accept
//! loop (which tags each request with its connection's peer address) and graceful shutdown.

use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::{HttpError, HttpResponse};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

use crate::access::{AccessPolicy, BucketNames, StatsRoute};
use crate::backend::s3proxy::Keyring;
use crate::backend::{Backend, FsBackend, S3ProxyBackend};
use crate::config::{AuthMode, Config, StoreLocation};
use crate::credentials::{Credentials, CredentialsTable, SecretFrom};
use crate::identity::HttpPeer;
use crate::passthrough::{has_token, Passthrough};
use crate::rdma::engine::{Engine, EngineSettings};
use crate::rdma::engines::Engines;
use crate::rdma::verbs_port::VerbsPort;
use crate::rdma::worker::{RdmaWorkers, WorkerSettings};
use crate::s3::rcv2::{is_control_path, ControlRoute, Routes};
use crate::s3::{wire, HipobjS3};
use crate::stats::Stats;

/// Path of the counters endpoint (see `access::StatsRoute` for who may read it).
pub use crate::access::STATS_PATH;

/// How often idle pairings are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Longest a client may take over its TLS handshake.
const TLS_HANDSHAKE: Duration = Duration::from_secs(10);
/// How often bucket lifecycle rules are applied (their unit is a day).
const LIFECYCLE_EVERY: Duration = Duration::from_secs(600);

/// Open the RDMA devices named by `--device`, one engine each (a device that cannot be used
/// here is logged and skipped), behind one pool of worker threads; `None` (RDMA disabled, 501)
/// when none was named or none could be opened.
pub fn start_rdma(
    config: &Config,
    storage: &Arc<dyn Backend>,
    stats: &Arc<Stats>,
) -> Option<Arc<RdmaWorkers>> {
    if config.devices.is_empty() {
        info!("RDMA disabled: no --device given; token requests get 501");
        return None;
    }
    let settings = EngineSettings::from(&config.rdma);
    let opened: Vec<Engine<VerbsPort>> = config
        .devices
        .iter()
        .filter_map(|name| open_engine(name, &settings, storage, stats))
        .collect();
    let Some(engines) = Engines::new(opened, stats) else {
        warn!(devices = ?config.devices, "RDMA disabled: no device usable; token requests get 501");
        return None;
    };
    info!(devices = ?engines.device_names(), "RDMA serving from these devices");
    settings
        .file_gets
        .probe(settings.copy_gets, engines.first_port(), stats);
    let workers = WorkerSettings {
        workers: config.rdma.workers,
        max_transfers: config.rdma.max_transfers,
        queue: config.rdma.queue,
        queue_wait: config.rdma.queue_wait,
        sweep_every: SWEEP_EVERY.min(config.rdma.pairing_idle.max(Duration::from_millis(100))),
    };
    match RdmaWorkers::start(Arc::new(engines), &workers, Arc::clone(stats)) {
        Ok(w) => Some(Arc::new(w)),
        Err(e) => {
            warn!(error = %e, "RDMA disabled: cannot start worker threads");
            None
        }
    }
}

/// The engine of device `name`, or `None` (logged) when it cannot be opened here.
fn open_engine(
    name: &str,
    settings: &EngineSettings,
    storage: &Arc<dyn Backend>,
    stats: &Arc<Stats>,
) -> Option<Engine<VerbsPort>> {
    match VerbsPort::open(name) {
        Ok(port) => Some(Engine::new(
            port,
            settings,
            Arc::clone(storage),
            Arc::clone(stats),
        )),
        Err(e) => {
            warn!(device = %name, error = %e, "RDMA device unusable; skipped");
            None
        }
    }
}

/// The HTTP service of one connection: in gateway mode a request without a token (other than
/// the counters and the hipobj-rc-v2 control requests) goes to the store as it came; everything else is tagged with the connection's
/// peer address (for the access hook and the pairing key), goes to s3s, then through
/// `s3::wire`'s corrections.
#[derive(Clone)]
struct Front {
    s3: S3Service,
    peer: HttpPeer,
    passthrough: Option<Passthrough>,
}

impl hyper::service::Service<http::Request<Incoming>> for Front {
    type Response = HttpResponse;
    type Error = HttpError;
    type Future = BoxFuture<'static, Result<HttpResponse, HttpError>>;

    fn call(&self, mut req: http::Request<Incoming>) -> Self::Future {
        if let Some(pass) = &self.passthrough {
            let ours = req.uri().path() == STATS_PATH || is_control_path(req.uri().path());
            if !has_token(&req) && !ours {
                let pass = pass.clone();
                return Box::pin(async move { Ok(pass.forward(req).await) });
            }
        }
        req.extensions_mut().insert(self.peer);
        let fixup = wire::fixup_for(req.method(), req.uri());
        let answer = hyper::service::Service::call(&self.s3, req);
        Box::pin(async move {
            let mut resp = answer.await?;
            wire::apply(fixup, &mut resp);
            Ok(resp)
        })
    }
}

/// Serve one accepted connection (plain TCP or TLS) until it ends or the server shuts down.
fn serve_connection<I>(
    http: &ConnBuilder<TokioExecutor>,
    watcher: Watcher,
    io: TokioIo<I>,
    front: Front,
    peer: SocketAddr,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let conn = watcher.watch(http.serve_connection(io, front).into_owned());
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            debug!(%peer, error = %e, "connection ended with an error");
        }
    });
}

/// Environment knob for benchmarks only: `HIPOBJ_BENCH_TCP_NODELAY=0` serves without
/// TCP_NODELAY, the baseline of the small-GET tail-latency figure. Anything else: TCP_NODELAY on.
pub const BENCH_NODELAY_ENV: &str = "HIPOBJ_BENCH_TCP_NODELAY";

fn tcp_nodelay_wanted() -> bool {
    let off = std::env::var(BENCH_NODELAY_ENV).is_ok_and(|v| v == "0");
    if off {
        warn!("{BENCH_NODELAY_ENV}=0: TCP_NODELAY off (benchmark baseline only)");
    }
    !off
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

/// On each SIGHUP, read the credentials file again ([`Credentials::reload`]): the new table serves
/// every check from then on (connections already open included); a reload that fails keeps the
/// table in use and says why (the error names the file and line, never a secret). Counted in
/// `credential_reloads` / `credential_reload_failures`. Serving `--anonymous` (`None`) there is
/// nothing to read, but a SIGHUP still does not end the server.
fn watch_reloads(
    credentials: Option<Credentials>,
    stats: Arc<Stats>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    Ok(tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let Some(credentials) = credentials.clone() else {
                info!("SIGHUP: serving --anonymous, no credentials to reload");
                continue;
            };
            // A small file, but still a file read: off the async workers.
            let result = tokio::task::spawn_blocking(move || credentials.reload()).await;
            match result {
                Ok(Ok(Some(changes))) => {
                    Stats::bump(&stats.credential_reloads);
                    info!(
                        identities = changes.identities,
                        added = changes.added,
                        removed = changes.removed,
                        changed = changes.changed,
                        "SIGHUP: credentials reloaded"
                    );
                }
                Ok(Ok(None)) => {
                    info!("SIGHUP: no --credentials file to reload; identities unchanged")
                }
                Ok(Err(e)) => {
                    Stats::bump(&stats.credential_reload_failures);
                    warn!(error = %e, "SIGHUP: credentials NOT reloaded; the identities in use stay");
                }
                Err(e) => {
                    Stats::bump(&stats.credential_reload_failures);
                    warn!(error = %e, "SIGHUP: credentials reload failed; the identities in use stay");
                }
            }
        }
    }))
}

/// The storage seam's implementation, and in gateway mode the pass-through to the store.
fn open_store(config: &Config) -> std::io::Result<(Arc<dyn Backend>, Option<Passthrough>)> {
    match &config.store {
        StoreLocation::Dir(dir) => {
            info!(data_dir = %dir.display(), etag = ?config.etag, default_checksum = ?config.default_checksum, "embedded fs store");
            let store = FsBackend::open(dir)?
                .with_etag(config.etag)
                .with_default_checksum(config.default_checksum);
            Ok((Arc::new(store), None))
        }
        StoreLocation::Gateway { endpoint, region } => {
            let keyring = match &config.auth {
                AuthMode::Credentials(credentials) => Keyring::Table(credentials.clone()),
                AuthMode::Anonymous => Keyring::Anonymous,
            };
            info!(store = %endpoint, "gateway mode: token requests by RDMA, the rest passed through");
            let proxy = S3ProxyBackend::new(endpoint.clone(), region, keyring)?;
            let passthrough = Passthrough::new(endpoint.clone()).map_err(std::io::Error::other)?;
            Ok((Arc::new(proxy), Some(passthrough)))
        }
    }
}

/// Serve until `shutdown` resolves. Prints `listening on ADDR` on stdout once ready.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    // Off the async workers: the proxy's blocking HTTP client runs its own threads.
    let (storage, passthrough) = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || open_store(&config))
            .await
            .map_err(std::io::Error::other)??
    };
    let stats = Arc::new(Stats::default());
    let rdma = start_rdma(&config, &storage, &stats);

    let s3 = HipobjS3::new(Arc::clone(&storage), rdma.clone(), Arc::clone(&stats));
    let mut builder = S3ServiceBuilder::new(s3.clone());
    // An auth provider is always set, so that s3s always runs the access hook; serving
    // anonymously it knows no keys.
    let anonymous = match &config.auth {
        AuthMode::Credentials(credentials) => {
            let source = credentials.source();
            info!(
                identities = credentials.current().len(),
                file = ?source.file,
                "SigV4 authentication required"
            );
            if source
                .single
                .as_ref()
                .is_some_and(|s| s.from == SecretFrom::CommandLine)
            {
                warn!(
                    "--secret-key: the secret is on the command line, visible in ps to every \
                     user of this host (/proc/PID/cmdline) and kept in shell history; give it \
                     in the environment (HIPOBJ_SECRET_KEY with --access-key) or in a \
                     --credentials file of mode 600 instead"
                );
            }
            builder.set_auth(credentials.clone());
            false
        }
        AuthMode::Anonymous => {
            announce_anonymous();
            builder.set_auth(CredentialsTable::default());
            true
        }
    };
    if !config.check_gid_peer {
        warn!("--allow-gid-peer-mismatch: client GIDs are not checked against the HTTP peer (docs/protocol.md rule 9.4 off)");
    }
    let policy = || {
        AccessPolicy::new(
            Arc::clone(&storage),
            Arc::clone(&stats),
            anonymous,
            config.check_gid_peer,
        )
    };
    builder.set_access(policy());
    builder.set_route(Routes {
        stats: StatsRoute::new(Arc::clone(&stats), anonymous),
        control: ControlRoute::new(s3, policy(), anonymous, config.check_gid_peer),
    });
    builder.set_validation(BucketNames);
    let s3 = builder.build();

    // SIGHUP reads the credentials file again; watched before the ready line, so that a SIGHUP
    // sent once the server says it listens never meets the default action (exit).
    let credentials = match &config.auth {
        AuthMode::Credentials(credentials) => Some(credentials.clone()),
        AuthMode::Anonymous => None,
    };
    let reloads = watch_reloads(credentials, Arc::clone(&stats))?;
    let listener = TcpListener::bind(config.listen).await?;
    // Lifecycle rules are kept and applied by the embedded store only; in gateway mode the
    // lifecycle requests pass through and the store applies its own rules.
    let lifecycle = passthrough.is_none().then(|| {
        tokio::spawn(crate::s3::lifecycle::run_sweeps(
            Arc::clone(&storage),
            LIFECYCLE_EVERY,
        ))
    });
    let local = listener.local_addr()?;
    let tls = config.tls.clone().map(TlsAcceptor::from);
    info!(%local, rdma = rdma.is_some(), tls = tls.is_some(), "serving");
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {local}")?;
        out.flush()?;
    }

    let nodelay = tcp_nodelay_wanted();
    let mut http = ConnBuilder::new(TokioExecutor::new());
    // Keep-alive is hyper's default; said here so it stays on (clients reuse one connection per
    // transfer slot, and a fresh TCP handshake per request would double the round trips).
    http.http1().keep_alive(true);
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
        // Small replies (428, 4 KiB GETs) must not wait for the client's delayed ACK (Nagle).
        if let Err(e) = stream.set_nodelay(nodelay) {
            warn!(%peer, error = %e, "cannot set TCP_NODELAY");
        }
        // The peer address is the TCP (and so the TLS) connection's: rule 9.4 unchanged.
        let front = Front {
            s3: s3.clone(),
            peer: HttpPeer::of(peer),
            passthrough: passthrough.clone(),
        };
        match &tls {
            None => serve_connection(&http, graceful.watcher(), TokioIo::new(stream), front, peer),
            Some(acceptor) => {
                // The handshake runs in the connection's own task, never in the accept loop.
                let (acceptor, http, watcher) =
                    (acceptor.clone(), http.clone(), graceful.watcher());
                tokio::spawn(async move {
                    match tokio::time::timeout(TLS_HANDSHAKE, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            serve_connection(&http, watcher, TokioIo::new(tls), front, peer)
                        }
                        Ok(Err(e)) => debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        }
    }
    info!("shutting down");
    if let Some(sweeps) = lifecycle {
        sweeps.abort();
    }
    reloads.abort();
    drop(listener);
    drop(s3);
    if tokio::time::timeout(Duration::from_secs(10), graceful.shutdown())
        .await
        .is_err()
    {
        warn!("connections still open after 10 s; closing anyway");
    }
    // Joins the RDMA threads (each finishes its current job) off the async workers.
    // The store too (the proxy's blocking client joins its thread).
    let _ = tokio::task::spawn_blocking(move || drop((rdma, storage))).await;
    Ok(())
}
