//! RDMA or plain HTTP for the command line (`--transport auto|rdma|http`, issue 39): the library's
//! decision (`hipobj::transport`), a session only where RDMA can be used, and the words for what
//! was chosen and why.

use crate::args::Endpoint;
use crate::failure::Failure;
use crate::session::Session;
pub use hipobj::transport::rdma_missing;
use hipobj::transport::{Counters, Destination, Mode, Path, Reason, Transport};

/// The decision of one command, and the RDMA session when RDMA can be used.
pub struct Paths {
    pub transport: Transport,
    pub session: Option<Session>,
}

impl Paths {
    /// Opens RDMA unless the mode is `http`. Under `auto`, a host without a usable RDMA device
    /// (or a library that cannot start one) moves the bytes over plain HTTP, said once on
    /// stderr; under `rdma` that is the command's failure, naming the missing device.
    pub fn open(endpoint: &Endpoint, max_transfers: Option<usize>) -> Result<Paths, Failure> {
        let transport = Transport::new(endpoint.transport);
        let session = match endpoint.transport {
            Mode::Http => None,
            mode => match rdma_missing() {
                Some(detail) if mode == Mode::Rdma => {
                    return Err(Failure::NoNic(format!(
                        "{detail} (--transport rdma needs one)"
                    )))
                }
                Some(detail) => {
                    without_rdma(&transport, &format!("no RDMA device ({detail})"));
                    None
                }
                None => {
                    match Session::open_with(endpoint.nic.as_deref(), endpoint.gpu, max_transfers) {
                        Ok(s) => Some(s),
                        Err(f) if mode == Mode::Auto => {
                            without_rdma(&transport, &f.to_string());
                            None
                        }
                        Err(f) => return Err(f),
                    }
                }
            },
        };
        Ok(Paths { transport, session })
    }

    /// Where the bytes of a copy land or come from.
    pub fn destination(endpoint: &Endpoint) -> Destination {
        match endpoint.gpu {
            Some(_) => Destination::Gpu,
            None => Destination::Host,
        }
    }

    /// What the copies took, for the closing line: "RDMA via rxe0 (measured)", "plain HTTP (no
    /// RDMA device)", or both with their counts.
    pub fn how(&self) -> String {
        let counters = self.transport.counters();
        let nic = self
            .session
            .as_ref()
            .map_or_else(|| "-".to_owned(), Session::nic_text);
        let taken: Vec<String> = [Path::Rdma, Path::Http]
            .into_iter()
            .filter(|p| counters.path(*p).transfers > 0)
            .map(|p| path_text(&counters, p, &nic))
            .collect();
        match taken.len() {
            0 => "nothing moved".into(),
            1 => taken.concat(),
            _ => taken.join(", "),
        }
    }
}

/// "RDMA via rxe0 (measured)", or with counts when the path took several copies for several
/// reasons: "plain HTTP for 5 (default start 3, probe 2)".
fn path_text(counters: &Counters, path: Path, nic: &str) -> String {
    let c = counters.path(path);
    let name = match path {
        Path::Rdma => format!("RDMA via {nic}"),
        Path::Http => "plain HTTP".to_owned(),
    };
    let reasons: Vec<(Reason, u64)> = Reason::ALL
        .iter()
        .map(|r| (*r, c.because(*r)))
        .filter(|(_, n)| *n > 0)
        .collect();
    let other = counters.path(other(path)).transfers;
    match reasons.as_slice() {
        [(r, _)] if other == 0 => format!("{name} ({r})"),
        _ => {
            let why: Vec<String> = reasons.iter().map(|(r, n)| format!("{r} {n}")).collect();
            format!("{name} for {} ({})", c.transfers, why.join(", "))
        }
    }
}

fn other(path: Path) -> Path {
    match path {
        Path::Rdma => Path::Http,
        Path::Http => Path::Rdma,
    }
}

/// Records that RDMA cannot be used here, and says so once.
fn without_rdma(transport: &Transport, why: &str) {
    if transport.no_rdma_device(why) {
        eprintln!("hipobj: {why}: moving the bytes over plain HTTP");
    }
}
