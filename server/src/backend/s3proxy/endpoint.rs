//! `--backend URL`: where the store is.

use std::fmt;

/// The store's address, from `s3://host:port` or `http://host:port` (plain HTTP).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    authority: String,
}

/// Why a `--backend` value was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum EndpointError {
    /// Not `s3://` or `http://`.
    Scheme(String),
    /// `https://`: this build has no TLS client.
    TlsUnsupported,
    /// No `host:port`, or a path after it.
    Authority(String),
}

impl fmt::Display for EndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndpointError::Scheme(v) => {
                write!(
                    f,
                    "--backend {v:?}: expected s3://HOST:PORT or http://HOST:PORT"
                )
            }
            EndpointError::TlsUnsupported => f.write_str(
                "--backend https://...: this build has no TLS client; reach the store over \
                 plain HTTP on a private network (s3://HOST:PORT), see docs/gateway.md",
            ),
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
        let rest = if let Some(r) = url.strip_prefix("s3://") {
            r
        } else if let Some(r) = url.strip_prefix("http://") {
            r
        } else if url.starts_with("https://") {
            return Err(EndpointError::TlsUnsupported);
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
        })
    }

    /// `host:port`, as the `Host` header.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// `http://host:port` (no trailing slash).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.authority)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s3://{}", self.authority)
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
        assert_eq!(
            Endpoint::parse("https://s:1"),
            Err(EndpointError::TlsUnsupported)
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
