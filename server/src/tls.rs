//! TLS both ways, with rustls (ring): the server's own (`--tls-cert/--tls-key`, HTTP/1.1 over
//! TLS) and the gateway's client to an `https://` store (the system's roots, or `--backend-ca`).
//! Files are read once, at start, and every problem with them stops the start with its path.

use std::error::Error;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::ring::default_provider;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The only application protocol served and asked for: section 9 is defined over HTTP/1.1.
const HTTP11: &[u8] = b"http/1.1";

/// Why a TLS configuration cannot be built.
#[derive(Debug)]
pub enum TlsError {
    /// A PEM file that cannot be read or holds nothing usable.
    File { path: PathBuf, why: String },
    /// No trusted root at all (an empty system store and no `--backend-ca`).
    NoRoots,
    /// rustls refused the certificate/key pair or the settings.
    Rustls(String),
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::File { path, why } => write!(f, "{}: {why}", path.display()),
            TlsError::NoRoots => f.write_str(
                "no trusted root certificates: the system store is empty; give --backend-ca FILE",
            ),
            TlsError::Rustls(why) => write!(f, "TLS: {why}"),
        }
    }
}

impl Error for TlsError {}

fn file_error(path: &Path, why: impl fmt::Display) -> TlsError {
    TlsError::File {
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

/// Every certificate of a PEM file (at least one).
fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no PEM certificate in the file"));
    }
    Ok(certs)
}

/// `--tls-cert FILE --tls-key FILE`: the chain (leaf first) and its private key (PKCS#8, PKCS#1
/// or SEC1 PEM).
pub fn server_config(cert: &Path, key_file: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = read_certs(cert)?;
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| file_error(key_file, e))?;
    let mut config = ServerConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| {
            TlsError::Rustls(format!(
                "{} and {}: {e}",
                cert.display(),
                key_file.display()
            ))
        })?;
    config.alpn_protocols = vec![HTTP11.to_vec()];
    Ok(Arc::new(config))
}

/// The roots a client trusts: the certificates of `ca` only, or the system's store.
fn roots(ca: Option<&Path>) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    match ca {
        Some(path) => {
            for cert in read_certs(path)? {
                store.add(cert).map_err(|e| file_error(path, e))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::warn!(error = %e, "cannot read part of the system's root certificates");
            }
            let (added, ignored) = store.add_parsable_certificates(found.certs);
            tracing::debug!(added, ignored, "system root certificates");
        }
    }
    if store.is_empty() {
        return Err(TlsError::NoRoots);
    }
    Ok(store)
}

/// The gateway's TLS client to the store: verifies the store's certificate against `ca` (a PEM
/// bundle) or the system's roots, and its name against the `--backend` host.
pub fn client_config(ca: Option<&Path>) -> Result<Arc<ClientConfig>, TlsError> {
    let mut config = ClientConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?
        .with_root_certificates(roots(ca)?)
        .with_no_client_auth();
    config.alpn_protocols = vec![HTTP11.to_vec()];
    Ok(Arc::new(config))
}

/// Client settings that trust nothing: for a connector that only ever speaks plain HTTP.
pub fn no_roots_config() -> Result<ClientConfig, TlsError> {
    Ok(
        ClientConfig::builder_with_provider(Arc::new(default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Rustls(e.to_string()))?
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth(),
    )
}

/// An error and its causes: the one writer, in the project's S3 client.
pub use hipobj_s3client::http::error_chain;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_empty_files_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").expect("write");
        let e = client_config(Some(&empty)).expect_err("no certificate");
        assert!(e.to_string().contains("empty.pem"), "{e}");
        let e = server_config(&dir.path().join("nope.pem"), &empty).expect_err("missing");
        assert!(e.to_string().contains("nope.pem"), "{e}");
    }

    #[test]
    fn chains_are_spelled_out() {
        let inner = std::io::Error::other("invalid peer certificate: UnknownIssuer");
        let outer = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, inner);
        let s = error_chain(&outer);
        assert!(s.contains("UnknownIssuer"), "{s}");
    }
}
