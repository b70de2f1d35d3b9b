//! s3s-fs 0.14.1 (the s3s project's own S3 server, crates.io) as a separate process: the real,
//! not-ours S3 store behind the gateway in the gateway tests. Installed by
//! `scripts/install-s3s-fs` into target/s3s-fs/ (or `HIPOBJ_S3SFS_BIN`). s3s-fs knows one
//! identity: the tests start it with the test identity's keys, the same keys the gateway's
//! credentials file holds (docs/gateway.md: the gateway signs as the requester).
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

/// A running s3s-fs with keys; killed (and its data removed) on drop.
pub struct Store {
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
        let root = std::env::temp_dir().join(format!(
            "hipobj-store-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&root).expect("store root");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let mut s = Store {
            child: None,
            addr,
            root,
            access_key: access_key.to_string(),
            secret_key: secret_key.to_string(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
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

    /// The stored bytes of `bucket/key`, read from the store's own files.
    pub fn stored(&self, bucket: &str, key: &str) -> Option<Vec<u8>> {
        std::fs::read(self.root.join(bucket).join(key)).ok()
    }

    pub fn kill(&mut self) {
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
        self.kill();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
