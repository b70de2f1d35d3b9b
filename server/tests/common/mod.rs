//! A started `hipobj-server` binary, shared by the integration tests; requests go through the
//! tests' one S3 client (`tests/support/s3.rs`, with its SigV4 signing `sigv4`). The server runs
//! with authentication on (a credentials file with the two test identities) unless the test
//! passes its own `--anonymous`, `--credentials` or key flags; requests are signed as
//! `TEST_SIGNER` unless sent with `request_as(None, ..)`.
#![allow(dead_code)]

#[path = "../../../tests/support/s3.rs"]
pub mod s3;

pub use s3::{sigv4, Response};
use sigv4::{Placement, Signer, TEST_CREDENTIALS, TEST_SIGNER};

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
    listen: String,
    extra: Vec<String>,
    /// Requests are signed with this identity unless told otherwise.
    pub signer: Option<Signer>,
    /// Requests go to this address of the server (and so come from it: on one host the kernel
    /// picks the destination as the source); `None`: the address it printed.
    client_ip: Mutex<Option<IpAddr>>,
}

/// Whether the flags already say how to authenticate.
fn names_auth(extra: &[&str]) -> bool {
    extra
        .iter()
        .any(|a| ["--anonymous", "--credentials", "--access-key"].contains(a))
}

impl Server {
    /// Start on 127.0.0.1 with a fresh data directory.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_listening("127.0.0.1:0", extra)
    }

    /// Start on `listen` (e.g. `0.0.0.0:0`) with a fresh data directory.
    pub fn start_listening(listen: &str, extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let signer = if names_auth(&extra.iter().map(String::as_str).collect::<Vec<_>>()) {
            None
        } else {
            let creds = dir.path().join("credentials");
            write_private(&creds, TEST_CREDENTIALS);
            extra.push("--credentials".into());
            extra.push(creds.display().to_string());
            Some(TEST_SIGNER)
        };
        let data = dir.path().join("data");
        let (child, addr) = spawn(listen, &data, &extra, Stdio::inherit());
        Server {
            child,
            addr,
            dir,
            listen: listen.to_string(),
            extra,
            signer,
            client_ip: Mutex::new(None),
        }
    }

    /// Stop and start again on a new port with the same flags and data directory.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let data = self.dir.path().join("data");
        let (child, addr) = spawn(&self.listen, &data, &self.extra, Stdio::inherit());
        self.child = child;
        self.addr = addr;
    }

    /// Send the following requests to (and so from) `ip` (`None`: the printed address).
    pub fn send_from(&self, ip: Option<IpAddr>) {
        *self.client_ip.lock().unwrap_or_else(|e| e.into_inner()) = ip;
    }

    /// Where requests connect to.
    pub fn target_addr(&self) -> SocketAddr {
        match *self.client_ip.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(ip) => SocketAddr::new(ip, self.addr.port()),
            None if self.addr.ip().is_unspecified() => {
                SocketAddr::new(Ipv4Addr::LOCALHOST.into(), self.addr.port())
            }
            None => self.addr,
        }
    }

    pub fn request(
        &self,
        method: &str,
        target: &str,
        headers: &[(&str, String)],
        body: &[u8],
    ) -> Response {
        self.request_as(
            self.signer,
            Placement::Header,
            method,
            target,
            headers,
            body,
        )
    }

    /// A request signed by `signer` (`None`: unsigned), every header in `headers` signed.
    pub fn request_as(
        &self,
        signer: Option<Signer>,
        placement: Placement,
        method: &str,
        target: &str,
        headers: &[(&str, String)],
        body: &[u8],
    ) -> Response {
        self.request_with_unsigned(signer, placement, method, target, headers, &[], body)
    }

    /// Like `request_as`, plus `unsigned` headers left out of the signature.
    #[allow(clippy::too_many_arguments)]
    pub fn request_with_unsigned(
        &self,
        signer: Option<Signer>,
        placement: Placement,
        method: &str,
        target: &str,
        headers: &[(&str, String)],
        unsigned: &[(&str, String)],
        body: &[u8],
    ) -> Response {
        let mut all: Vec<(String, String)> = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect();
        let mut target = target.to_string();
        if let Some(signer) = signer {
            let host = self.target_addr().to_string();
            let pairs: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let signed = signer.sign(placement, method, &host, &target, &pairs, body);
            target = signed.target;
            all.extend(signed.headers);
        }
        all.extend(unsigned.iter().map(|(n, v)| (n.to_string(), v.clone())));
        self.raw_request(method, &target, &all, body)
    }

    /// Send the request as it is (already signed, or unsigned) on a fresh connection.
    fn raw_request(
        &self,
        method: &str,
        target: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Response {
        let client = s3::S3 {
            addr: self.target_addr(),
            timeout: Duration::from_secs(30),
            signer: None,
        };
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        client
            .request(method, target, &headers, body)
            .unwrap_or_else(|e| panic!("{method} {target}: {e}"))
    }

    pub fn get(&self, target: &str) -> Response {
        self.request("GET", target, &[], b"")
    }

    pub fn stats(&self) -> String {
        String::from_utf8(self.get("/_hipobj/stats").body).expect("utf8")
    }

    /// Where the server keeps its buckets.
    pub fn data_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("data")
    }

    /// The credentials file the server was started with (when the test named none).
    pub fn credentials_file(&self) -> std::path::PathBuf {
        self.dir.path().join("credentials")
    }

    /// Send `signal` (e.g. `libc::SIGHUP`) to the server.
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: plain kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill({signal})");
    }

    /// SIGTERM, then the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        // SAFETY: plain kill(2) on our own child's pid.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0);
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        panic!("server did not exit within 10 s of SIGTERM");
    }
}

/// Start the binary with `--listen LISTEN --data-dir DATA` and `extra`; wait for its ready line.
pub fn spawn(
    listen: &str,
    data: &std::path::Path,
    extra: &[String],
    stderr: Stdio,
) -> (Child, SocketAddr) {
    spawn_logging(listen, data, extra, "warn", stderr)
}

/// [`spawn`] with the log filter `log` (`HIPOBJ_LOG`, e.g. `warn,s3s=debug`: s3s logs every
/// request it receives), the log written to `stderr` without colours.
pub fn spawn_logging(
    listen: &str,
    data: &std::path::Path,
    extra: &[String],
    log: &str,
    stderr: Stdio,
) -> (Child, SocketAddr) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hipobj-server"));
    cmd.args(["--listen", listen]);
    // Gateway mode (`--backend`) has no data directory of its own.
    if !extra.iter().any(|a| a == "--backend") {
        cmd.arg("--data-dir").arg(data);
    }
    let mut child = cmd
        .args(extra)
        .env("HIPOBJ_LOG", log)
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn hipobj-server");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the ready line");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .parse()
        .expect("address");
    (child, addr)
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Write `text` to `path` with mode 0600: the server refuses a credentials file that group or
/// others may read.
pub fn write_private(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("credentials file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
}

pub fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8 ^ (i >> 10) as u8).collect()
}
