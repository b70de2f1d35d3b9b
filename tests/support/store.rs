//! s3s-fs 0.14.1 (the s3s project's own S3 server, crates.io) as a separate process: the real,
//! not-ours S3 store behind the gateway in the gateway tests. Installed by
//! `scripts/install-s3s-fs` into target/s3s-fs/ (or `HIPOBJ_S3SFS_BIN`). s3s-fs knows one
//! identity: the tests start it with the test identity's keys, the same keys the gateway's
//! credentials file holds (docs/gateway.md: the gateway signs as the requester).
//!
//! With `HIPOBJ_TEST_STORE=ceph` the store is instead the Ceph RADOS Gateway that
//! `scripts/ceph-cluster start` runs (its `env` output in the environment): the test identity
//! becomes an RGW user with the same keys, stored bytes are read back from RGW itself, and a kill
//! is a SIGKILL of radosgw (`scripts/ceph-cluster kill-rgw`, then `start-rgw`).
#![allow(dead_code)]

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn s3sfs_binary() -> PathBuf {
    if let Ok(p) = std::env::var("HIPOBJ_S3SFS_BIN") {
        return PathBuf::from(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for dir in [root.clone(), root.join("..")] {
        let p = dir.join("target/s3s-fs/bin/s3s-fs");
        if p.exists() {
            return p;
        }
    }
    panic!("s3s-fs not installed: run scripts/install-s3s-fs (or set HIPOBJ_S3SFS_BIN)");
}

/// The Ceph cluster of `scripts/ceph-cluster` (`HIPOBJ_TEST_STORE=ceph`).
struct Ceph {
    script: PathBuf,
    conf: String,
}

/// Whether the tests run against Ceph RGW (`HIPOBJ_TEST_STORE=ceph`).
pub fn ceph_wanted() -> bool {
    std::env::var("HIPOBJ_TEST_STORE").is_ok_and(|v| v == "ceph")
}

fn env_required(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("HIPOBJ_TEST_STORE=ceph needs {name}: eval \"$(scripts/ceph-cluster env)\"")
    })
}

impl Ceph {
    fn script() -> PathBuf {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        for dir in [root.clone(), root.join("..")] {
            let p = dir.join("scripts/ceph-cluster");
            if p.exists() {
                return p;
            }
        }
        panic!("scripts/ceph-cluster not found");
    }

    fn run(&self, what: &str) {
        let st = Command::new(&self.script)
            .arg(what)
            .status()
            .unwrap_or_else(|e| panic!("{:?} {what}: {e}", self.script));
        assert!(st.success(), "scripts/ceph-cluster {what}: {st}");
    }

    /// Make `access_key` an RGW user with `secret_key` (idempotent).
    fn ensure_user(&self, access_key: &str, secret_key: &str) {
        let out = Command::new("radosgw-admin")
            .args(["-c", &self.conf, "user", "create"])
            .arg(format!("--uid={access_key}"))
            .arg(format!("--display-name={access_key}"))
            .arg(format!("--access-key={access_key}"))
            .arg(format!("--secret={secret_key}"))
            .output()
            .expect("radosgw-admin");
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || text.contains("exists"),
            "radosgw-admin user create: {text}"
        );
    }
}

/// `key` percent-encoded for a URL path ('/' and RFC 3986 unreserved kept).
fn encode_key(key: &str) -> String {
    key.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A running s3s-fs with keys; killed (and its data removed) on drop. Or RGW (see above).
pub struct Store {
    ceph: Option<Ceph>,
    child: Option<Child>,
    pub addr: SocketAddr,
    pub root: PathBuf,
    access_key: String,
    secret_key: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl Store {
    /// Start on a free loopback port with an empty root; requests must be signed with these keys.
    pub fn start(access_key: &str, secret_key: &str) -> Store {
        if ceph_wanted() {
            return Store::ceph(access_key, secret_key);
        }
        let root = std::env::temp_dir().join(format!(
            "hipobj-store-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&root).expect("store root");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let mut s = Store {
            ceph: None,
            child: None,
            addr,
            root,
            access_key: access_key.to_string(),
            secret_key: secret_key.to_string(),
        };
        s.spawn();
        s
    }

    /// RGW of the running Ceph cluster, with `access_key` as a user of it.
    fn ceph(access_key: &str, secret_key: &str) -> Store {
        let endpoint = env_required("HIPOBJ_CEPH_ENDPOINT");
        let ceph = Ceph {
            script: Ceph::script(),
            conf: env_required("HIPOBJ_CEPH_CONF"),
        };
        ceph.ensure_user(access_key, secret_key);
        let addr = endpoint
            .trim_start_matches("http://")
            .parse()
            .unwrap_or_else(|e| panic!("HIPOBJ_CEPH_ENDPOINT {endpoint}: {e}"));
        Store {
            ceph: Some(ceph),
            child: None,
            addr,
            root: PathBuf::new(),
            access_key: access_key.to_string(),
            secret_key: secret_key.to_string(),
        }
    }

    /// A signed request straight to RGW with curl (the payload declared unsigned, as RGW
    /// requires the header); the body, or `None` unless 2xx.
    fn rgw(&self, method: &str, path: &str) -> Option<Vec<u8>> {
        let out = Command::new("curl")
            .args(["-s", "-f", "--aws-sigv4", "aws:amz:us-east-1:s3"])
            .arg("-u")
            .arg(format!("{}:{}", self.access_key, self.secret_key))
            .args(["-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"])
            .args(if method == "HEAD" {
                vec!["-I"]
            } else {
                vec!["-X", method]
            })
            .arg(format!("http://{}{path}", self.addr))
            .output()
            .expect("curl");
        out.status.success().then_some(out.stdout)
    }

    /// Whether the store has `bucket`.
    pub fn has_bucket(&self, bucket: &str) -> bool {
        match &self.ceph {
            Some(_) => self.rgw("HEAD", &format!("/{bucket}")).is_some(),
            None => self.root.join(bucket).is_dir(),
        }
    }

    fn spawn(&mut self) {
        if let Some(ceph) = &self.ceph {
            ceph.run("start-rgw");
            return;
        }
        // s3s-fs 0.14.1 (unmodified, not ours) takes its keys on the command line only: no
        // environment variable or file (its clap `Opt` has none). The keys are the tests' own.
        let child = Command::new(s3sfs_binary())
            .arg("--host")
            .arg(self.addr.ip().to_string())
            .arg("--port")
            .arg(self.addr.port().to_string())
            .arg("--access-key")
            .arg(&self.access_key)
            .arg("--secret-key")
            .arg(&self.secret_key)
            .arg(&self.root)
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", s3sfs_binary()));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(self.addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "s3s-fs did not listen within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `s3://ADDR`, for `--backend`.
    pub fn url(&self) -> String {
        format!("s3://{}", self.addr)
    }

    /// The gateway flags that put this store behind it.
    pub fn gateway_args(&self) -> Vec<String> {
        vec!["--backend".into(), self.url()]
    }

    /// A bucket, made the way s3s-fs keeps them (a directory of its root).
    pub fn make_bucket(&self, name: &str) {
        std::fs::create_dir_all(self.root.join(name)).expect("bucket dir");
    }

    /// The stored bytes of `bucket/key`, read from the store's own files (RGW: from RGW
    /// directly, not through the gateway).
    pub fn stored(&self, bucket: &str, key: &str) -> Option<Vec<u8>> {
        if self.ceph.is_some() {
            return self.rgw("GET", &format!("/{bucket}/{}", encode_key(key)));
        }
        std::fs::read(self.root.join(bucket).join(key)).ok()
    }

    /// The PUTs s3s-fs is still receiving: it writes each body to `.tmp.N.internal.part` in its
    /// root and renames that file (stored) or removes it (the request failed) when the request
    /// ends. RGW: none visible from outside (empty).
    pub fn puts_in_progress(&self) -> Vec<String> {
        if self.ceph.is_some() {
            return Vec::new();
        }
        std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".tmp.") && n.ends_with(".internal.part"))
            .collect()
    }

    /// Wait until the store has ended every PUT it received; panics (the test fails) after `limit`.
    pub fn wait_for_puts_to_end(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let open = self.puts_in_progress();
            if open.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the store still receives PUTs after {limit:?}: {open:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill(&mut self) {
        if let Some(ceph) = &self.ceph {
            ceph.run("kill-rgw");
            return;
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start again on the same address and data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if self.ceph.is_some() {
            // The cluster belongs to whoever started it; a killed radosgw is brought back.
            if self.rgw("GET", "/").is_none() {
                self.spawn();
            }
            return;
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
