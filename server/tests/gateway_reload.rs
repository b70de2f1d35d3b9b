//! Issue 52's acceptance for the gateway's credentials reload, on the real binaries (loopback, no
//! RDMA): a gateway (`--backend`) in front of the embedded store serving anonymously (a store that
//! lets anyone read, so a request the gateway let through unsigned would be served). An identity
//! removed from the gateway's file and reloaded with SIGHUP gets 403 from the gateway, also on a
//! keep-alive connection it opened before the reload, and the store's log shows no request after
//! the reload for its attempts; a known identity still passes the gateway.
//!
//! What "passes" means here: the gateway checks only token requests (docs/gateway.md,
//! Authentication; token-less requests go to the store as they came, with the client's own
//! signature, and the store decides). With RDMA off, a token request that passes every check of
//! the gateway is answered 501 (as in `http_security.rs`), so 501 is "the gateway let it
//! through" and 403 "refused". The store sees no request for either: that the store's log would
//! show one is proved on the same connections by token-less GETs the gateway passes through
//! (unsigned: the anonymous store knows no access key, so it refuses every signed request).

mod common;

use std::io::{BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::sigv4::{Placement, Signer};
use common::{Response, Server};
use hipobj::token::{Token, Transport};

const ALICE: Signer = Signer {
    access_key: "alice",
    secret_key: "alice-secret-0123456789abcdef",
};
const BOB: Signer = Signer {
    access_key: "bob",
    secret_key: "bob-secret-0123456789abcdef",
};

fn identities(who: &[Signer]) -> String {
    who.iter()
        .map(|s| format!("{} {}\n", s.access_key, s.secret_key))
        .collect()
}

/// The store: `hipobj-server --anonymous` on the embedded fs store, its log (`s3s=debug`: one
/// `req=Request { .. }` line per request it receives, written before it answers) in a file.
struct Store {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// One request in the store's log.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    method: String,
    uri: String,
    /// The access key of its SigV4 `Credential=`, if it was signed.
    access_key: Option<String>,
}

impl Store {
    fn start() -> Store {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("store.log");
        let file = std::fs::File::create(&log).expect("store log");
        let (child, addr) = common::spawn_logging(
            "127.0.0.1:0",
            &dir.path().join("data"),
            &["--anonymous".to_string()],
            "warn,s3s=debug",
            Stdio::from(file),
        );
        Store {
            child,
            addr,
            log,
            _dir: dir,
        }
    }

    fn client(&self) -> common::s3::S3 {
        common::s3::S3 {
            addr: self.addr,
            timeout: Duration::from_secs(30),
            signer: None,
        }
    }

    /// The S3 requests the store received so far, in order (its own counters' route left out).
    fn requests(&self) -> Vec<Seen> {
        let text = std::fs::read_to_string(&self.log).expect("store log");
        text.lines()
            .filter_map(|line| line.split_once("s3s::service: req=Request { ").map(|x| x.1))
            .map(|req| {
                let field = |name: &str| {
                    req.split_once(name)
                        .and_then(|(_, rest)| rest.split(',').next())
                        .unwrap_or("")
                        .to_string()
                };
                let access_key = req
                    .split_once("Credential=")
                    .and_then(|(_, rest)| rest.split('/').next())
                    .map(str::to_string);
                Seen {
                    method: field("method: "),
                    uri: field("uri: "),
                    access_key,
                }
            })
            .filter(|seen| !seen.uri.starts_with("/_hipobj/"))
            .collect()
    }

    /// One of the store's counters (`/_hipobj/stats`, served unsigned to loopback).
    fn counter(&self, name: &str) -> u64 {
        let r = self.client().get("_hipobj", "stats").expect("store stats");
        assert_eq!(r.status, 200, "{}", r.text());
        counter(&r.text(), name)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `"name":N` of a counters document.
fn counter(json: &str, name: &str) -> u64 {
    let key = format!("\"{name}\":");
    json.split_once(&key)
        .and_then(|(_, rest)| rest.split([',', '}']).next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no counter {name} in {json}"))
}

/// A well-formed RC token for `length` bytes whose client GID is `::ffff:127.0.0.1`, the HTTP
/// peer of these requests (docs/protocol.md rule 9.4).
fn loopback_token(length: u64) -> String {
    Token {
        transport: Transport::Rc,
        qp_num: 0x1234,
        gid: Ipv4Addr::LOCALHOST.to_ipv6_mapped().octets(),
        rkey: 0x99,
        remote_addr: 0x7f00_0000_1000,
        length,
        port: 1,
        lid: 0,
    }
    .encode_hex()
}

/// One keep-alive HTTP/1.1 connection to the gateway. Every answer must leave it open, so that
/// each answer on it comes from this same connection (a closed one fails the next request).
struct Connection {
    host: String,
    stream: BufReader<TcpStream>,
}

impl Connection {
    fn open(server: &Server) -> Connection {
        let addr = server.target_addr();
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        Connection {
            host: addr.to_string(),
            stream: BufReader::new(stream),
        }
    }

    /// `GET target` with `headers`, signed by `signer` (every header signed) or unsigned.
    fn get(&mut self, signer: Option<Signer>, target: &str, headers: &[(&str, &str)]) -> Response {
        self.send("GET", signer, target, headers)
    }

    /// `method target` with `headers`, signed by `signer` (every header signed) or unsigned.
    fn send(
        &mut self,
        method: &str,
        signer: Option<Signer>,
        target: &str,
        headers: &[(&str, &str)],
    ) -> Response {
        let (target, signature) = match signer {
            Some(s) => {
                let signed = s.sign(Placement::Header, method, &self.host, target, headers, b"");
                (signed.target, signed.headers)
            }
            None => (target.to_string(), Vec::new()),
        };
        let mut head = format!(
            "{method} {target} HTTP/1.1\r\nHost: {}\r\nConnection: keep-alive\r\nContent-Length: 0\r\n",
            self.host
        );
        let signature = signature.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        for (k, v) in headers.iter().copied().chain(signature) {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        self.stream
            .get_mut()
            .write_all(head.as_bytes())
            .expect("send on the kept connection");
        let r = common::s3::read_response(&mut self.stream, method == "HEAD")
            .expect("an answer on the kept connection");
        assert!(
            !r.header("connection")
                .is_some_and(|v| v.eq_ignore_ascii_case("close")),
            "the gateway closes the connection after {target}: {}",
            r.status
        );
        // Nothing more may be waiting on it (one answer per request).
        assert!(
            self.stream.buffer().is_empty(),
            "stray bytes after {target}"
        );
        r
    }

    /// A token GET of `target` signed by `signer`, the token in its `SignedHeaders`.
    fn token_get(&mut self, signer: Signer, target: &str, length: u64) -> Response {
        let token = loopback_token(length);
        self.get(
            Some(signer),
            target,
            &[("x-amz-rdma-token", token.as_str())],
        )
    }
}

/// Poll `ready` (a fresh request each time) until it holds; fails after 30 s.
fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(Instant::now() < deadline, "no {what} within 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn write_identities(file: &Path, who: &[Signer]) {
    common::write_private(file, &identities(who));
}

#[test]
fn an_identity_removed_by_sighup_is_refused_by_the_gateway_and_never_reaches_the_store() {
    let store = Store::start();
    let data = common::pattern(256 << 10);
    let len = data.len() as u64;
    assert_eq!(
        store.client().create_bucket("pub").expect("bucket").status,
        200
    );
    assert_eq!(
        store.client().put("pub", "obj", &data).expect("put").status,
        200
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("gateway-identities");
    write_identities(&file, &[ALICE, BOB]);
    let url = format!("http://{}", store.addr);
    let file_arg = file.display().to_string();
    let gateway = Server::start(&["--backend", &url, "--credentials", &file_arg]);
    let stats_as = |signer: Signer| {
        gateway.request_as(
            Some(signer),
            Placement::Header,
            "GET",
            "/_hipobj/stats",
            &[],
            b"",
        )
    };
    let reloads = || counter(&stats_as(BOB).text(), "credential_reloads");
    assert_eq!(reloads(), 0);

    // Each identity's keep-alive connection, opened before the reload: its token GET passes the
    // gateway (501: every check passed, RDMA is off here), and a token-less GET on the same
    // connection (unsigned: the anonymous store refuses signatures) brings the object from the
    // store through the gateway, byte for byte, and shows in the store's log.
    let mut alice = Connection::open(&gateway);
    let mut bob = Connection::open(&gateway);
    for (who, conn) in [(ALICE, &mut alice), (BOB, &mut bob)] {
        let r = conn.token_get(who, "/pub/obj", len);
        assert_eq!(
            r.status,
            501,
            "{} before the reload: {}",
            who.access_key,
            r.text()
        );
        assert!(r.text().contains("NotImplemented"), "{}", r.text());
        let before = store.requests().len();
        let r = conn.get(None, "/pub/obj", &[]);
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.body == data, "the object's bytes through the gateway");
        assert_eq!(
            store.requests()[before..],
            [Seen {
                method: "GET".into(),
                uri: "/pub/obj".into(),
                access_key: None
            }],
            "the store's log shows the request the gateway passed through"
        );
    }

    // Alice removed; the gateway reloads on SIGHUP (its counter says when).
    write_identities(&file, &[BOB]);
    gateway.signal(libc::SIGHUP);
    wait_until("credential reload", || reloads() == 1);
    let stats = stats_as(BOB).text();
    assert_eq!(counter(&stats, "credential_reload_failures"), 0, "{stats}");
    let since_reload = store.requests().len();
    let (gets, tokens) = (store.counter("http_gets"), store.counter("token_requests"));

    // Alice: 403 from the gateway on the connection she opened before the reload, and on a new
    // one; none of her bytes, and nothing reaches the store.
    let r = alice.token_get(ALICE, "/pub/obj", len);
    assert_eq!(
        r.status,
        403,
        "alice on her connection from before the reload: {}",
        r.text()
    );
    assert!(r.text().contains("InvalidAccessKeyId"), "{}", r.text());
    assert!(r.body.len() < data.len() && !r.body.windows(64).any(|w| w == &data[..64]));
    let mut fresh = Connection::open(&gateway);
    let r = fresh.token_get(ALICE, "/pub/obj", len);
    assert_eq!(r.status, 403, "alice on a new connection: {}", r.text());
    assert!(r.text().contains("InvalidAccessKeyId"), "{}", r.text());
    assert_eq!(
        stats_as(ALICE).status,
        403,
        "alice's keys no longer open the counters"
    );
    assert_eq!(
        store.requests()[since_reload..],
        [],
        "the store heard of alice's attempts after the reload"
    );
    assert_eq!(store.counter("http_gets"), gets);
    assert_eq!(store.counter("token_requests"), tokens);

    // Bob still passes the gateway, on his connection from before and on a new one, and his
    // connection still reaches the store (the store's log shows that request, and only it: the
    // log was live all along).
    let r = bob.token_get(BOB, "/pub/obj", len);
    assert_eq!(r.status, 501, "bob after the reload: {}", r.text());
    let r = Connection::open(&gateway).token_get(BOB, "/pub/obj", len);
    assert_eq!(r.status, 501, "bob on a new connection: {}", r.text());
    let r = bob.get(None, "/pub/obj", &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.body == data, "the object's bytes through the gateway");
    let after = store.requests();
    assert_eq!(
        after[since_reload..],
        [Seen {
            method: "GET".into(),
            uri: "/pub/obj".into(),
            access_key: None
        }]
    );
    assert_eq!(store.counter("http_gets"), gets + 1);
    assert!(
        !after[since_reload..]
            .iter()
            .any(|seen| seen.access_key.as_deref() == Some(ALICE.access_key)),
        "a request of alice's in the store's log after the reload: {after:?}"
    );

    // A HEAD that carries a token reaches the gateway's S3 layer, which asks the store as the
    // requester (signed as bob; this store, which knows no keys, refuses that); alice's is
    // refused before the store hears of it.
    let token = loopback_token(len);
    let r = alice.send(
        "HEAD",
        Some(ALICE),
        "/pub/obj",
        &[("x-amz-rdma-token", &token)],
    );
    assert_eq!(r.status, 403, "alice's token HEAD after the reload");
    let seen = store.requests().len();
    assert_eq!(seen, after.len(), "alice's HEAD reached the store");
    bob.send(
        "HEAD",
        Some(BOB),
        "/pub/obj",
        &[("x-amz-rdma-token", &token)],
    );
    let heads = store.requests();
    assert_eq!(
        heads[seen..],
        [Seen {
            method: "HEAD".into(),
            uri: "/pub/obj".into(),
            access_key: Some(BOB.access_key.into())
        }],
        "bob's token HEAD reaches the store signed as bob"
    );
}
