//! docs/protocol.md section 9 over HTTP against the real binary (no RDMA needed): identities and a
//! credentials file, bucket ownership, the signed-token rule (9.2), the GID-is-the-peer rule
//! (9.4), the stats endpoint (9.5) and anonymous serving. Token requests here run on a server
//! whose RDMA is disabled, so a token that passes every check is answered 501: a 403 instead
//! shows that the check ran before any pairing or RDMA.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::sigv4::{Placement, Signer, OTHER_SIGNER, TEST_SIGNER};
use common::Server;

/// A token for client GID `::ffff:<ip>` (docs/protocol.md section 2), hex encoded.
fn token_from(ip: [u8; 4], length: u64) -> String {
    let mut b = Vec::with_capacity(44);
    b.push(1);
    b.extend_from_slice(&0x1234u32.to_le_bytes());
    b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
    b.extend_from_slice(&ip);
    b.extend_from_slice(&0x99u32.to_le_bytes());
    b.extend_from_slice(&0x7f00_0000_1000u64.to_le_bytes());
    b.extend_from_slice(&length.to_le_bytes());
    b.push(1);
    b.extend_from_slice(&0u16.to_le_bytes());
    b.iter().map(|x| format!("{x:02x}")).collect()
}

const LOOPBACK: [u8; 4] = [127, 0, 0, 1];

fn rdma_disabled_server(extra: &[&str]) -> Server {
    let mut flags = vec!["--device", "no-such-rdma-device0"];
    flags.extend_from_slice(extra);
    Server::start(&flags)
}

fn as_other(server: &Server, method: &str, target: &str, body: &[u8]) -> common::Response {
    server.request_as(
        Some(OTHER_SIGNER),
        Placement::Header,
        method,
        target,
        &[],
        body,
    )
}

#[test]
fn signatures_are_checked_against_the_credentials_file() {
    let server = Server::start(&[]);
    assert_eq!(server.request("PUT", "/sig", &[], b"").status, 200);
    assert_eq!(server.request("PUT", "/sig/k", &[], b"body").status, 200);
    assert_eq!(server.get("/sig/k").body, b"body");
    // Unsigned, a wrong secret, an unknown access key: 403, nothing read.
    let unsigned = server.request_as(None, Placement::Header, "GET", "/sig/k", &[], b"");
    assert_eq!(unsigned.status, 403, "{}", unsigned.text());
    let wrong = Signer {
        access_key: TEST_SIGNER.access_key,
        secret_key: "not-the-secret",
    };
    let r = server.request_as(Some(wrong), Placement::Header, "GET", "/sig/k", &[], b"");
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(!r.body.windows(4).any(|w| w == b"body"));
    let stranger = Signer {
        access_key: "nobody",
        secret_key: "x",
    };
    let r = server.request_as(Some(stranger), Placement::Header, "GET", "/sig/k", &[], b"");
    assert_eq!(r.status, 403, "{}", r.text());
    // A presigned URL of a known identity works.
    let r = server.request_as(
        Some(TEST_SIGNER),
        Placement::Query,
        "GET",
        "/sig/k",
        &[],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.body, b"body");
}

#[test]
fn another_identitys_bucket_is_403_for_every_operation() {
    let mut server = Server::start(&[]);
    assert_eq!(server.request("PUT", "/mine", &[], b"").status, 200);
    assert_eq!(server.request("PUT", "/mine/k", &[], b"owned").status, 200);
    let refused = |server: &Server| {
        for (method, target) in [
            ("GET", "/mine/k"),
            ("HEAD", "/mine/k"),
            ("PUT", "/mine/k"),
            ("PUT", "/mine/new"),
            ("DELETE", "/mine/k"),
            ("GET", "/mine?list-type=2"),
            ("HEAD", "/mine"),
            ("DELETE", "/mine"),
        ] {
            let r = as_other(server, method, target, b"intruder");
            assert_eq!(r.status, 403, "{method} {target}: {}", r.text());
            assert!(
                !r.body.windows(5).any(|w| w == b"owned"),
                "{method} {target}"
            );
        }
        // Creating it again: BucketAlreadyExists, owner unchanged.
        let r = as_other(server, "PUT", "/mine", b"");
        assert_eq!(r.status, 409, "{}", r.text());
        assert!(r.text().contains("BucketAlreadyExists"), "{}", r.text());
        // The owner still has everything, unchanged.
        assert_eq!(server.get("/mine/k").body, b"owned");
        assert_eq!(server.request("HEAD", "/mine/new", &[], b"").status, 404);
    };
    refused(&server);
    // A copy whose source is another identity's bucket, into one's own bucket: 403.
    assert_eq!(as_other(&server, "PUT", "/theirs", b"").status, 200);
    let copy = server.request_as(
        Some(OTHER_SIGNER),
        Placement::Header,
        "PUT",
        "/theirs/copy",
        &[("x-amz-copy-source", "/mine/k".into())],
        b"",
    );
    assert_eq!(copy.status, 403, "{}", copy.text());
    // The owner survives a restart (it is on disk).
    server.restart();
    refused(&server);
    let own = server.request("PUT", "/mine", &[], b"");
    assert_eq!(own.status, 409, "{}", own.text());
    assert!(
        own.text().contains("BucketAlreadyOwnedByYou"),
        "{}",
        own.text()
    );
}

#[test]
fn list_buckets_shows_only_your_own() {
    let server = Server::start(&[]);
    assert_eq!(server.request("PUT", "/alpha", &[], b"").status, 200);
    assert_eq!(as_other(&server, "PUT", "/beta", b"").status, 200);
    let mine = server.get("/").text();
    assert!(mine.contains("<Name>alpha</Name>"), "{mine}");
    assert!(!mine.contains("<Name>beta</Name>"), "{mine}");
    let theirs = as_other(&server, "GET", "/", b"").text();
    assert!(theirs.contains("<Name>beta</Name>"), "{theirs}");
    assert!(!theirs.contains("<Name>alpha</Name>"), "{theirs}");
}

#[test]
fn a_bucket_without_an_owner_belongs_to_nobody() {
    let server = Server::start(&[]);
    // As a revision-1 server left it: a bucket directory without an owner file.
    std::fs::create_dir_all(server.data_dir().join("legacy/.meta")).expect("mkdir");
    assert_eq!(server.get("/legacy?list-type=2").status, 403);
    assert_eq!(
        as_other(&server, "GET", "/legacy?list-type=2", b"").status,
        403
    );
    assert!(!server.get("/").text().contains("legacy"));
}

#[test]
fn a_token_left_out_of_the_signature_is_403_with_reply_403() {
    let server = rdma_disabled_server(&[]);
    assert_eq!(server.request("PUT", "/bkt", &[], b"").status, 200);
    assert_eq!(server.request("PUT", "/bkt/obj", &[], b"hello").status, 200);
    let token = token_from(LOOPBACK, 4096);
    for placement in [Placement::Header, Placement::Query] {
        for (method, target) in [("GET", "/bkt/obj"), ("PUT", "/bkt/new")] {
            let r = server.request_with_unsigned(
                Some(TEST_SIGNER),
                placement,
                method,
                target,
                &[],
                &[("x-amz-rdma-token", token.clone())],
                b"",
            );
            assert_eq!(r.status, 403, "{placement:?} {method}: {}", r.text());
            assert_eq!(
                r.header("x-amz-rdma-reply"),
                Some("403"),
                "{placement:?} {method}"
            );
            // Signed, the same token gets past the check (501: RDMA is disabled here).
            let ok = server.request_as(
                Some(TEST_SIGNER),
                placement,
                method,
                target,
                &[("x-amz-rdma-token", token.clone())],
                b"",
            );
            assert_eq!(ok.status, 501, "{placement:?} {method}: {}", ok.text());
        }
    }
    assert_eq!(server.request("HEAD", "/bkt/new", &[], b"").status, 404);
    let stats = server.stats();
    assert!(stats.contains("\"replies_403\":4"), "{stats}");
    assert!(
        stats.contains("\"token_requests\":4"),
        "only the signed ones: {stats}"
    );
}

#[test]
fn a_client_gid_that_is_not_the_peer_is_403_unless_relaxed() {
    let server = rdma_disabled_server(&[]);
    assert_eq!(server.request("PUT", "/bkt", &[], b"").status, 200);
    assert_eq!(server.request("PUT", "/bkt/obj", &[], b"hello").status, 200);
    let elsewhere = token_from([10, 9, 9, 9], 4096);
    let r = server.request(
        "GET",
        "/bkt/obj",
        &[("x-amz-rdma-token", elsewhere.clone())],
        b"",
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.header("x-amz-rdma-reply"), Some("403"));
    let own = token_from(LOOPBACK, 4096);
    let r = server.request("GET", "/bkt/obj", &[("x-amz-rdma-token", own)], b"");
    assert_eq!(r.status, 501, "{}", r.text());
    // A token request on another identity's bucket: 403 with the reply header too.
    let r = server.request_as(
        Some(OTHER_SIGNER),
        Placement::Header,
        "GET",
        "/bkt/obj",
        &[("x-amz-rdma-token", token_from(LOOPBACK, 4096))],
        b"",
    );
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.header("x-amz-rdma-reply"), Some("403"));

    let relaxed = rdma_disabled_server(&["--allow-gid-peer-mismatch"]);
    assert_eq!(relaxed.request("PUT", "/bkt", &[], b"").status, 200);
    assert_eq!(
        relaxed.request("PUT", "/bkt/obj", &[], b"hello").status,
        200
    );
    let r = relaxed.request("GET", "/bkt/obj", &[("x-amz-rdma-token", elsewhere)], b"");
    assert_eq!(r.status, 501, "{}", r.text());
}

#[test]
fn stats_need_a_signature() {
    let server = Server::start(&[]);
    let r = server.request_as(None, Placement::Header, "GET", "/_hipobj/stats", &[], b"");
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(!r.text().contains("http_gets"));
    let r = server.get("/_hipobj/stats");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("\"http_gets\":0"), "{}", r.text());
    // No bucket can take the endpoint's name.
    assert_eq!(server.request("PUT", "/_hipobj", &[], b"").status, 400);
}

/// How a start went: `Ok((ready line, stderr))` or `Err((exit code, stderr))`.
type Started = Result<(String, String), (i32, String)>;

/// Start with `flags` and stderr captured; `Ok(stderr up to the ready line)` when it serves,
/// `Err((exit code, stderr))` when it refuses to start.
fn start_capturing(flags: &[&str]) -> (std::process::Child, tempfile::TempDir, Started) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_hipobj-server"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(flags)
        .env("HIPOBJ_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut ready = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut ready)
        .expect("stdout");
    let mut err_lines = BufReader::new(child.stderr.take().expect("stderr"));
    if ready.is_empty() {
        let status = child.wait().expect("wait");
        let mut text = String::new();
        while err_lines.read_line(&mut text).unwrap_or(0) > 0 {}
        return (child, dir, Err((status.code().unwrap_or(-1), text)));
    }
    // Whatever stderr says within 3 s of the ready line (the banner comes before it).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        while err_lines.read_line(&mut line).unwrap_or(0) > 0 {
            if tx.send(std::mem::take(&mut line)).is_err() {
                return;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut text = String::new();
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) => text.push_str(&line),
            Err(_) => break,
        }
        if text.contains("serving without authentication") {
            break;
        }
    }
    (child, dir, Ok((ready, text)))
}

#[test]
fn anonymous_serving_works_and_is_announced() {
    let (child, _dir, started) = start_capturing(&["--anonymous"]);
    let _child = KillOnDrop(child);
    let (ready, stderr) = started.expect("serves");
    assert!(
        stderr.contains("WITHOUT AUTHENTICATION"),
        "banner on stderr: {stderr:?}"
    );
    let addr = ready
        .trim()
        .strip_prefix("listening on ")
        .expect("ready line");
    let s3 = AnonymousClient(addr.parse().expect("addr"));
    assert_eq!(s3.send("PUT", "/open").status, 200);
    let r = s3.send("GET", "/");
    assert!(r.text().contains("<Name>open</Name>"), "{}", r.text());
    // The counters: served on loopback.
    assert_eq!(s3.send("GET", "/_hipobj/stats").status, 200);
}

/// The server is killed however the test ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct AnonymousClient(std::net::SocketAddr);

impl AnonymousClient {
    fn send(&self, method: &str, target: &str) -> common::Response {
        let client = common::s3::S3 {
            addr: self.0,
            timeout: std::time::Duration::from_secs(30),
            signer: None,
        };
        client
            .request(method, target, &[], b"")
            .unwrap_or_else(|e| panic!("{method} {target}: {e}"))
    }
}

#[test]
fn refuses_to_start_without_authentication_or_with_a_bad_credentials_file() {
    let (_c, _d, r) = start_capturing(&[]);
    let (code, stderr) = r.expect_err("must not start");
    assert_eq!(code, 2);
    assert!(stderr.contains("--anonymous"), "{stderr}");

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("creds");
    for (text, want) in [
        ("alice a\nbob\n", ":2: only one field"),
        ("alice a b\n", ":1: more than two fields"),
        ("# c\nalice a\nalice b\n", ":3: duplicate access key"),
    ] {
        common::write_private(&file, text);
        let (_c, _d, r) = start_capturing(&["--credentials", &file.display().to_string()]);
        let (code, stderr) = r.expect_err(text);
        assert_eq!(code, 2, "{text:?}");
        assert!(stderr.contains(want), "{text:?}: {stderr}");
    }
}

/// A credentials file that group or others may read stops the start (exit 2), as ssh refuses
/// such a key: the message names the file, its mode and the fix.
#[test]
fn a_credentials_file_others_may_read_stops_the_start() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("creds");
    std::fs::write(&file, "alice alice-secret-key\n").expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let path = file.display().to_string();
    let (_c, _d, r) = start_capturing(&["--credentials", &path]);
    let (code, stderr) = r.expect_err("a file of mode 0644 must not be served");
    assert_eq!(code, 2, "{stderr}");
    for want in [path.as_str(), "0644", &format!("chmod 600 {path}")] {
        assert!(stderr.contains(want), "{want:?} in {stderr}");
    }
    assert!(!stderr.contains("alice-secret-key"), "{stderr}");
    // The fix works.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let (child, _d, r) = start_capturing(&["--credentials", &path]);
    let _child = KillOnDrop(child);
    r.expect("mode 600 serves");
}

/// Start with `flags` and `envs`, make one request signed by `signer`, stop (SIGTERM): the
/// request's status and everything the server wrote on stderr.
fn one_request_then_stderr(flags: &[&str], envs: &[(&str, &str)], signer: Signer) -> (u16, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_hipobj-server"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(flags)
        .env_remove("HIPOBJ_SECRET_KEY")
        .envs(envs.iter().copied())
        .env("HIPOBJ_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Drained on its own thread, so that a full pipe never blocks the server.
    let mut err = child.stderr.take().expect("stderr");
    let drain = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut text);
        text
    });
    let mut ready = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut ready)
        .expect("stdout");
    let child = KillOnDrop(child);
    let addr = ready
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("no ready line: {ready:?}"))
        .parse()
        .expect("addr");
    let s3 = common::s3::S3 {
        addr,
        timeout: std::time::Duration::from_secs(30),
        signer: Some(signer),
    };
    let status = s3.request("GET", "/", &[], b"").expect("GET /").status;
    // SAFETY: plain kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(child.0.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0, "SIGTERM");
    (status, drain.join().expect("stderr"))
}

/// `--access-key` takes its secret from HIPOBJ_SECRET_KEY, quietly; `--secret-key` still works
/// but warns that the command line is visible in `ps`. Neither start's output shows the secret.
#[test]
fn the_secret_from_the_environment_or_with_a_warning_from_argv() {
    const ME: Signer = Signer {
        access_key: "env-key",
        secret_key: "env-Sekr1t-0123",
    };
    let (status, stderr) = one_request_then_stderr(
        &["--access-key", ME.access_key],
        &[("HIPOBJ_SECRET_KEY", ME.secret_key)],
        ME,
    );
    assert_eq!(status, 200, "{stderr}");
    assert!(!stderr.contains("visible in ps"), "no warning: {stderr}");
    assert!(!stderr.contains(ME.secret_key), "{stderr}");
    let (status, stderr) = one_request_then_stderr(
        &["--access-key", ME.access_key, "--secret-key", ME.secret_key],
        &[],
        ME,
    );
    assert_eq!(status, 200, "{stderr}");
    assert!(
        stderr.contains("WARN")
            && stderr.contains("--secret-key")
            && stderr.contains("visible in ps")
            && stderr.contains("HIPOBJ_SECRET_KEY"),
        "the warning: {stderr}"
    );
    assert!(!stderr.contains(ME.secret_key), "{stderr}");
    // --access-key without any secret: refused at start, naming the variable.
    let (_c, _d, r) = start_capturing(&["--access-key", ME.access_key]);
    let (code, stderr) = r.expect_err("no secret");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("HIPOBJ_SECRET_KEY"), "{stderr}");
}

/// One keep-alive HTTP/1.1 connection, every request signed by the signer given with it; it
/// fails (the test with it) if the server closes it, so a second answer on it comes from the
/// same connection.
struct Connection {
    addr: std::net::SocketAddr,
    stream: BufReader<std::net::TcpStream>,
}

impl Connection {
    fn open(server: &Server) -> Connection {
        let addr = server.target_addr();
        let stream = std::net::TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .expect("timeout");
        Connection {
            addr,
            stream: BufReader::new(stream),
        }
    }

    /// Send the head of a request and the first `sent` bytes of `body`.
    fn start(&mut self, signer: Signer, method: &str, target: &str, body: &[u8], sent: usize) {
        use std::io::Write;
        let host = self.addr.to_string();
        let signed = signer.sign(Placement::Header, method, &host, target, &[], body);
        let mut head = format!(
            "{method} {} HTTP/1.1\r\nHost: {host}\r\nConnection: keep-alive\r\nContent-Length: {}\r\n",
            signed.target,
            body.len()
        );
        for (k, v) in &signed.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let out = self.stream.get_mut();
        out.write_all(head.as_bytes()).expect("send the head");
        out.write_all(&body[..sent]).expect("send the body");
    }

    /// Send the rest of the body (from `sent`) and read the answer.
    fn finish(&mut self, body: &[u8], sent: usize) -> common::Response {
        use std::io::Write;
        self.stream
            .get_mut()
            .write_all(&body[sent..])
            .expect("send the rest of the body");
        let r = common::s3::read_response(&mut self.stream, false).expect("an answer");
        assert!(
            !r.header("connection")
                .is_some_and(|v| v.eq_ignore_ascii_case("close")),
            "the server closes the connection"
        );
        r
    }

    fn send(&mut self, signer: Signer, method: &str, target: &str) -> common::Response {
        self.start(signer, method, target, b"", 0);
        self.finish(b"", 0)
    }
}

/// Poll `ready` (a fresh HTTP request each time) until it holds; fails after 30 s.
fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !ready() {
        assert!(
            std::time::Instant::now() < deadline,
            "no {what} within 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// SIGHUP reads the credentials file again: the new and rotated keys work at once, a changed or
/// removed key gets 403, also on a keep-alive connection opened before the reload; a PUT whose
/// body is still arriving across the reload is stored; a reload of a bad file (mode 0644,
/// malformed) keeps the identities in use.
#[test]
fn sighup_reloads_the_credentials_file() {
    const ROTATED: Signer = Signer {
        access_key: common::sigv4::TEST_ACCESS_KEY,
        secret_key: "hipobj-test-rotated-secret-4242",
    };
    const NEWCOMER: Signer = Signer {
        access_key: "hipobj-newcomer",
        secret_key: "hipobj-newcomer-secret-7777",
    };
    let server = Server::start(&[]);
    let stats_as = |signer: Signer| {
        server.request_as(
            Some(signer),
            Placement::Header,
            "GET",
            "/_hipobj/stats",
            &[],
            b"",
        )
    };
    assert_eq!(server.request("PUT", "/rot", &[], b"").status, 200);
    assert_eq!(server.request("PUT", "/rot/k", &[], b"before").status, 200);
    assert_eq!(as_other(&server, "PUT", "/theirs", b"").status, 200);

    // Connections opened before the reload, each with one answer already.
    let mut mine = Connection::open(&server);
    assert_eq!(mine.send(TEST_SIGNER, "GET", "/rot/k").body, b"before");
    let mut theirs = Connection::open(&server);
    assert_eq!(
        theirs
            .send(OTHER_SIGNER, "GET", "/theirs?list-type=2")
            .status,
        200
    );
    // A PUT whose body is still on its way: its writer exists (the signature was checked).
    let big = common::pattern(4 << 20);
    let mut upload = Connection::open(&server);
    upload.start(TEST_SIGNER, "PUT", "/rot/big", &big, 1 << 20);
    let tmp = server.data_dir().join(".tmp");
    wait_until("PUT in progress (a file under .tmp/)", || {
        std::fs::read_dir(&tmp).is_ok_and(|mut d| d.next().is_some())
    });

    // The rotation: hipobj-test's secret changed, hipobj-other removed, a newcomer.
    common::write_private(
        &server.credentials_file(),
        &format!(
            "{} {}\n{} {}\n",
            ROTATED.access_key, ROTATED.secret_key, NEWCOMER.access_key, NEWCOMER.secret_key
        ),
    );
    server.signal(libc::SIGHUP);
    wait_until("reload (the rotated key accepted)", || {
        stats_as(ROTATED).status == 200
    });
    let stats = stats_as(ROTATED).text();
    assert!(stats.contains("\"credential_reloads\":1"), "{stats}");
    assert!(
        stats.contains("\"credential_reload_failures\":0"),
        "{stats}"
    );

    // On the connections opened before: the rotated key works, the old secret and the removed
    // identity get 403.
    let r = mine.send(ROTATED, "GET", "/rot/k");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"before"[..]),
        "{}",
        r.text()
    );
    let r = mine.send(TEST_SIGNER, "GET", "/rot/k");
    assert_eq!(r.status, 403, "the old secret: {}", r.text());
    assert!(!r.body.windows(6).any(|w| w == b"before"));
    let r = theirs.send(OTHER_SIGNER, "GET", "/theirs?list-type=2");
    assert_eq!(r.status, 403, "a removed identity: {}", r.text());
    let r = server.request_as(
        Some(NEWCOMER),
        Placement::Header,
        "PUT",
        "/newcomer",
        &[],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // The PUT in flight finishes, and is stored.
    let r = upload.finish(&big, 1 << 20);
    assert_eq!(r.status, 200, "{}", r.text());
    let r = server.request_as(
        Some(ROTATED),
        Placement::Header,
        "GET",
        "/rot/big",
        &[],
        b"",
    );
    assert!(r.status == 200 && r.body == big, "{}", r.status);

    // Reloads that fail keep the table in use.
    let file = server.credentials_file();
    for (n, (text, mode)) in [
        (
            format!("{} {}\n", TEST_SIGNER.access_key, TEST_SIGNER.secret_key),
            0o644,
        ),
        ("hipobj-test\n".to_string(), 0o600),
    ]
    .into_iter()
    .enumerate()
    {
        use std::os::unix::fs::PermissionsExt;
        common::write_private(&file, &text);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("chmod");
        server.signal(libc::SIGHUP);
        let failures = format!("\"credential_reload_failures\":{}", n + 1);
        wait_until("the failed reload counted", || {
            stats_as(ROTATED).text().contains(&failures)
        });
        assert_eq!(stats_as(ROTATED).status, 200, "{mode:o}");
        assert_eq!(stats_as(NEWCOMER).status, 200, "{mode:o}");
        assert_eq!(stats_as(TEST_SIGNER).status, 403, "{mode:o}");
    }
    let r = mine.send(ROTATED, "GET", "/rot/k");
    assert_eq!(r.status, 200, "the connection still serves: {}", r.text());
}
