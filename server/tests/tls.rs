//! TLS both ways (issue 23), with a throwaway CA made here: `hipobj-server --tls-cert/--tls-key`
//! serves HTTP/1.1 over TLS to a client that trusts the CA and is refused by one that does not;
//! a gateway reaches an `https://` store (another hipobj-server with TLS) through its CA file,
//! for the pass-through and for the proxy backend (the RDMA data path's seam), and a store whose
//! certificate does not chain to `--backend-ca` is refused with an error that says so.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::Server;
use hipobj_s3client::reqwest::blocking::Client;
use hipobj_server::backend::s3proxy::{Endpoint, Keyring};
use hipobj_server::backend::{Backend, S3ProxyBackend, WriteOptions};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// A CA and a server certificate it signed (for `localhost` and 127.0.0.1), as PEM files.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        // A name of its own: another test CA is then an unknown issuer, not a bad signature.
        let name = dir
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        ca.distinguished_name.push(
            DnType::CommonName,
            format!("hipobj test CA {}", name.unwrap_or_default()),
        );
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
        let key = KeyPair::generate().expect("server key");
        let leaf = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("server params")
            .signed_by(&key, &ca_cert, &ca_key)
            .expect("server certificate");
        std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).expect("ca.pem");
        std::fs::write(dir.path().join("cert.pem"), leaf.pem()).expect("cert.pem");
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).expect("key.pem");
        Pki { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn ca(&self) -> String {
        self.path("ca.pem").display().to_string()
    }

    /// The flags that make a server serve TLS with this PKI's certificate.
    fn server_flags(&self) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.path("cert.pem").display().to_string(),
            "--tls-key".into(),
            self.path("key.pem").display().to_string(),
        ]
    }
}

fn start(flags: &[String]) -> Server {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Server::start(&flags)
}

/// A client that trusts only `ca`.
fn client(ca: &Path) -> Client {
    let tls = hipobj_server::tls::client_config(Some(ca)).expect("client TLS");
    Client::builder()
        .use_preconfigured_tls((*tls).clone())
        .build()
        .expect("client")
}

#[test]
fn serves_https_to_a_client_that_trusts_its_ca_and_no_other() {
    let pki = Pki::new();
    let mut flags = pki.server_flags();
    flags.push("--anonymous".into());
    let server = start(&flags);
    let base = format!("https://127.0.0.1:{}", server.addr.port());
    let http = client(&pki.path("ca.pem"));
    let made = http.put(format!("{base}/tlsb")).send().expect("PUT bucket");
    assert_eq!(made.status(), 200);
    let body = vec![7u8; 100_000];
    let put = http
        .put(format!("{base}/tlsb/k"))
        .body(body.clone())
        .send()
        .expect("PUT object");
    assert_eq!(put.status(), 200);
    let got = http.get(format!("{base}/tlsb/k")).send().expect("GET");
    assert_eq!(got.status(), 200);
    assert!(got.bytes().expect("body")[..] == body[..]);
    // The same name through localhost: the certificate names it too.
    let local = format!("https://localhost:{}/tlsb/k", server.addr.port());
    assert_eq!(http.head(local).send().expect("HEAD").status(), 200);

    // A client that trusts another CA refuses the server's certificate.
    let other = Pki::new();
    let e = client(&other.path("ca.pem"))
        .get(format!("{base}/tlsb/k"))
        .send()
        .expect_err("a certificate from an unknown CA was accepted");
    let why = hipobj_server::tls::error_chain(&e);
    assert!(why.contains("certificate"), "{why}");
    // Plain HTTP to the TLS port gets no S3 answer.
    assert!(Client::new()
        .get(format!("http://127.0.0.1:{}/tlsb/k", server.addr.port()))
        .send()
        .map(|r| r.status() != 200)
        .unwrap_or(true));
}

#[test]
fn a_bad_certificate_or_key_stops_the_start() {
    let pki = Pki::new();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hipobj-server"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            "/nonexistent",
            "--anonymous",
        ])
        .args(["--tls-cert", &pki.ca(), "--tls-key"])
        .arg(pki.path("cert.pem"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cert.pem"), "{err}");
}

/// A gateway (plain HTTP in front) whose store is `store` over https, trusting `ca`.
fn gateway_to(store: &Server, ca: &str) -> Server {
    let backend = format!("https://localhost:{}", store.addr.port());
    Server::start(&["--backend", &backend, "--backend-ca", ca, "--anonymous"])
}

fn proxy(store: &Server, ca: &Path) -> Arc<dyn Backend> {
    let endpoint = Endpoint::parse(&format!("https://localhost:{}", store.addr.port()))
        .expect("endpoint")
        .with_ca(ca)
        .expect("CA");
    Arc::new(S3ProxyBackend::new(endpoint, "us-east-1", Keyring::Anonymous).expect("proxy"))
}

#[test]
fn the_gateway_reaches_an_https_store_through_its_ca_and_refuses_another() {
    let pki = Pki::new();
    let mut flags = pki.server_flags();
    flags.push("--anonymous".into());
    let store = start(&flags);

    // The pass-through (token-less requests) over TLS.
    let gw = gateway_to(&store, &pki.ca());
    assert_eq!(gw.request("PUT", "/gwtls", &[], b"").status, 200);
    let put = gw.request("PUT", "/gwtls/k", &[], b"through TLS");
    assert_eq!(put.status, 200, "{}", put.text());
    let got = gw.request("GET", "/gwtls/k", &[], b"");
    assert_eq!(got.status, 200);
    assert_eq!(got.body, b"through TLS");

    // The proxy backend (what RDMA transfers call) over TLS.
    let b = proxy(&store, &pki.path("ca.pem"));
    let data = vec![3u8; 300_000];
    let mut w = b
        .create_write(
            "gwtls",
            "streamed",
            WriteOptions {
                size: Some(data.len() as u64),
                ..Default::default()
            },
        )
        .expect("create");
    for c in data.chunks(65536) {
        w.append(c).expect("append");
    }
    w.commit().expect("commit");
    let mut r = b.open_read("gwtls", "streamed", None).expect("open");
    let mut back = Vec::new();
    std::io::Read::read_to_end(&mut r, &mut back).expect("read");
    assert!(back == data);

    // Another CA: both paths refuse the store's certificate, and say so.
    let other = Pki::new();
    let gw = gateway_to(&store, &other.ca());
    let refused = gw.request("GET", "/gwtls/k", &[], b"");
    assert_eq!(refused.status, 503);
    assert!(refused.text().contains("certificate"), "{}", refused.text());
    let e = proxy(&store, &other.path("ca.pem"))
        .head_bucket("gwtls")
        .expect_err("an unknown CA was trusted");
    assert!(e.to_string().contains("certificate"), "{e}");
}

#[test]
fn backend_ca_needs_an_https_backend() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hipobj-server"))
        .args(["--listen", "127.0.0.1:0", "--anonymous"])
        .args([
            "--backend",
            "s3://127.0.0.1:1",
            "--backend-ca",
            "/etc/hostname",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--backend-ca goes with an https://"), "{err}");
}
