//! elbencho's `s3rdma-server` (GPL, built by scripts/build-s3rdma-server, only ever run as a
//! separate process): an independently written hipobj-rc-v2 server for the lane's interop tests.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `$HIPOBJ_S3RDMA_BIN`, else where scripts/build-s3rdma-server puts it.
pub fn binary() -> PathBuf {
    if let Ok(p) = std::env::var("HIPOBJ_S3RDMA_BIN") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/s3rdma/tools/s3rdma/server/bin/s3rdma-server")
}

/// The lane's IPv4 address of `device` (`HIPOBJ_VM_ADDRS`, "rxe0=169.254.77.1 ...").
pub fn lane_addr(device: &str) -> String {
    std::env::var("HIPOBJ_VM_ADDRS")
        .unwrap_or_default()
        .split_whitespace()
        .find_map(|a| a.strip_prefix(&format!("{device}=")).map(str::to_string))
        .unwrap_or_else(|| "127.0.0.1".to_string())
}

/// A running s3rdma-server on `device`'s address (HTTP and RDMA), `--verbose`; killed on drop.
pub struct Peer {
    child: Child,
    pub addr: SocketAddr,
    pub log: PathBuf,
    dir: PathBuf,
}

impl Peer {
    pub fn start(device: &str) -> Peer {
        let ip = lane_addr(device);
        let port = crate::server::free_port();
        let base = std::env::temp_dir().join(format!("s3rdma-{}-{port}", std::process::id()));
        let dir = base.join("data");
        std::fs::create_dir_all(&dir).expect("data dir");
        let log = base.join("server.log");
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = Command::new(binary())
            .args(["--dir", dir.to_str().unwrap_or_default(), "--addr", &ip])
            .args([
                "--port",
                &port.to_string(),
                "--rdma-addr",
                &ip,
                "--no-cuobj",
                "--verbose",
            ])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary().display()));
        let addr: SocketAddr = format!("{ip}:{port}").parse().expect("address");
        let peer = Peer {
            child,
            addr,
            log,
            dir: base,
        };
        peer.wait_listening();
        peer
    }

    fn wait_listening(&self) {
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "s3rdma-server did not listen on {}:\n{}",
            self.addr,
            self.log_text()
        );
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The server's own lines for RDMA transfers ("RDMA GET bkt/key: N bytes (hipobj-rc-v2)").
    pub fn rdma_lines(&self) -> Vec<String> {
        self.log_text()
            .lines()
            .filter(|l| l.contains("RDMA GET ") || l.contains("RDMA PUT "))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
