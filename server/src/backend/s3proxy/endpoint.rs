//! `--backend URL`: where the store is, and for `https://` which roots its certificate must
//! chain to (`--backend-ca`, else the system's).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::tls::{self, TlsError};

/// The store's address, from `s3://host:port` or `http://host:port` (plain HTTP) or
/// `https://host:port` (TLS, the certificate verified).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    authority: String,
    tls: bool,
    /// `--backend-ca FILE`: the only roots trusted for the store (https only).
    ca: Option<PathBuf>,
}

/// Why a `--backend` value was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum EndpointError {
    /// Not `s3://`, `http://` or `https://`.
    Scheme(String),
    /// `--backend-ca` with a plain-HTTP store.
    CaWithoutTls,
    /// The TLS client settings cannot be built (an unreadable `--backend-ca`, no roots).
    Tls(String),
    /// No `host:port`, or a path after it.
    Authority(String),
}

impl fmt::Display for EndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndpointError::Scheme(v) => {
                write!(
                    f,
                    "--backend {v:?}: expected s3://HOST:PORT, http://HOST:PORT or https://HOST:PORT"
                )
            }
            EndpointError::CaWithoutTls => f.write_str(
                "--backend-ca goes with an https:// --backend (the store is reached over plain HTTP)",
            ),
            EndpointError::Tls(why) => write!(f, "--backend: {why}"),
            EndpointError::Authority(v) => {
                write!(
                    f,
                    "--backend {v:?}: expected HOST:PORT and nothing after it"
                )
            }
        }
    }
}

impl std::error::Error for EndpointError {}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, EndpointError> {
        let (rest, tls) = if let Some(r) = url.strip_prefix("s3://") {
            (r, false)
        } else if let Some(r) = url.strip_prefix("http://") {
            (r, false)
        } else if let Some(r) = url.strip_prefix("https://") {
            (r, true)
        } else {
            return Err(EndpointError::Scheme(url.to_string()));
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        let valid = !authority.is_empty()
            && !authority.contains('/')
            && authority.parse::<http::uri::Authority>().is_ok();
        if !valid {
            return Err(EndpointError::Authority(url.to_string()));
        }
        Ok(Endpoint {
            authority: authority.to_string(),
            tls,
            ca: None,
        })
    }

    /// Trust only the certificates of `ca` (a PEM bundle) for this https store.
    pub fn with_ca(mut self, ca: &Path) -> Result<Endpoint, EndpointError> {
        if !self.tls {
            return Err(EndpointError::CaWithoutTls);
        }
        self.ca = Some(ca.to_path_buf());
        Ok(self)
    }

    /// The TLS client settings for this store; `None` for plain HTTP.
    pub fn tls_config(&self) -> Result<Option<Arc<rustls::ClientConfig>>, TlsError> {
        if !self.tls {
            return Ok(None);
        }
        tls::client_config(self.ca.as_deref()).map(Some)
    }

    /// `host:port`, as the `Host` header.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// `http://host:port` or `https://host:port` (no trailing slash).
    pub fn base_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.authority)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.tls {
            write!(f, "https://{}", self.authority)
        } else {
            write!(f, "s3://{}", self.authority)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes() {
        assert_eq!(
            Endpoint::parse("s3://127.0.0.1:9000").unwrap().base_url(),
            "http://127.0.0.1:9000"
        );
        assert_eq!(
            Endpoint::parse("http://store:80/").unwrap().authority(),
            "store:80"
        );
        let tls = Endpoint::parse("https://s:1").unwrap();
        assert_eq!(tls.base_url(), "https://s:1");
        assert!(tls.clone().with_ca(Path::new("/ca.pem")).is_ok());
        assert_eq!(
            Endpoint::parse("s3://s:1")
                .unwrap()
                .with_ca(Path::new("/ca.pem")),
            Err(EndpointError::CaWithoutTls)
        );
        assert!(matches!(
            Endpoint::parse("ftp://s:1"),
            Err(EndpointError::Scheme(_))
        ));
        assert!(matches!(
            Endpoint::parse("s3://s:1/path"),
            Err(EndpointError::Authority(_))
        ));
        assert!(matches!(
            Endpoint::parse("s3://"),
            Err(EndpointError::Authority(_))
        ));
    }
}
