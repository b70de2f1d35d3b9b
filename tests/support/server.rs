//! Start and stop `hipobj-server` for end-to-end tests and the demo.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "lane.rs"]
mod lane;
pub use lane::rdma_devices;

/// (client device, server device): two devices when there are two, else both on the one.
/// The lane's (client, server) devices; panics without one: every caller is an RDMA test that
/// must fail, not pass, where it finds no device (they are `#[ignore]`d outside the lane).
#[allow(dead_code)]
pub fn required_device_pair() -> (String, String) {
    device_pair().expect(
        "no RDMA device with an active port: this test needs one (run it in the lane: make e2e)",
    )
}

pub fn device_pair() -> Option<(String, String)> {
    let d = rdma_devices();
    match d.len() {
        0 => None,
        1 => Some((d[0].clone(), d[0].clone())),
        _ => Some((d[0].clone(), d[1].clone())),
    }
}

/// Path of the server binary next to the test binary's target directory.
pub fn server_binary() -> PathBuf {
    if let Ok(p) = std::env::var("HIPOBJ_SERVER_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/<test> or target/<profile>/examples/<ex>
    let profile_dir = exe
        .parent()
        .and_then(|p| p.parent())
        .map(PathBuf::from)
        .unwrap_or_default();
    profile_dir.join("hipobj-server")
}

/// Write `text` to `path` with mode 0600, as a credentials file must be.
pub fn write_private(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("credentials file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(19000)
}

/// A running server; killed on drop.
pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    device: Option<String>,
    extra: Vec<String>,
    envs: Vec<(String, String)>,
}

impl Server {
    /// Start on a free loopback port with a fresh data dir.
    pub fn start(device: Option<&str>, extra: &[&str]) -> Server {
        Self::start_with_env(device, extra, &[])
    }

    /// [`Server::start`] with extra environment variables for the server process.
    pub fn start_with_env(device: Option<&str>, extra: &[&str], envs: &[(&str, &str)]) -> Server {
        let data_dir =
            std::env::temp_dir().join(format!("hipobj-e2e-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&data_dir).expect("data dir");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
        let mut s = Server {
            child: None,
            addr,
            data_dir,
            device: device.map(str::to_string),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            envs: envs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        // Authentication on: the test identities of `sigv4::TEST_CREDENTIALS`, which `S3` signs
        // with. The file sits beside (not in) the data directory, mode 600 (the server refuses
        // a credentials file that group or others may read).
        let credentials = self.data_dir.with_extension("credentials");
        write_private(&credentials, crate::s3::sigv4::TEST_CREDENTIALS);
        let mut cmd = Command::new(server_binary());
        cmd.arg("--listen").arg(self.addr.to_string());
        // Gateway mode (`--backend`) has no data directory of its own.
        if !self.extra.iter().any(|a| a == "--backend") {
            cmd.arg("--data-dir").arg(&self.data_dir);
        }
        cmd.arg("--credentials").arg(&credentials);
        // docs/protocol.md rule 9.4 stays on: the tests' callbacks bind their HTTP socket to the NIC
        // address of the token (`s3::token_nic`, what hipObjTokenClientNic returns).
        if let Some(d) = &self.device {
            cmd.arg("--device").arg(d);
        }
        cmd.args(&self.extra)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {:?}: {e}", server_binary()));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            let mut sent = false;
            while r.read_line(&mut line).unwrap_or(0) > 0 {
                if !sent && line.contains("listening on") {
                    let _ = tx.send(());
                    sent = true;
                }
                line.clear();
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        while rx.recv_timeout(Duration::from_millis(100)).is_err() {
            assert!(
                Instant::now() < deadline,
                "hipobj-server did not start within 60 s"
            );
            if let Ok(Some(st)) = child.try_wait() {
                panic!("hipobj-server exited at start: {st}");
            }
        }
        self.child = Some(child);
    }

    /// Kill and start again on the same address and data dir (its pairings are gone).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Freeze the server process (SIGSTOP) / let it run again (SIGCONT): a stalled peer.
    pub fn pause(&self, stop: bool) {
        if let Some(c) = &self.child {
            let sig = if stop { libc::SIGSTOP } else { libc::SIGCONT };
            // SAFETY: kill(2) on our own child's pid; no memory is involved.
            unsafe { libc::kill(c.id() as libc::pid_t, sig) };
        }
    }

    /// The server's counters (`GET /_hipobj/stats`), as text.
    pub fn stats(&self) -> String {
        crate::s3::S3::new(self.addr)
            .request("GET", "/_hipobj/stats", &[], &[])
            .map(|r| String::from_utf8_lossy(&r.body).into_owned())
            .unwrap_or_default()
    }

    /// The counter `name` of [`Server::stats`].
    pub fn counter(&self, name: &str) -> u64 {
        json_counter(&self.stats(), name)
    }

    /// The counter `name` of RDMA device `device` (`"devices":{"rxe1":{...}}` of the stats).
    pub fn device_counter(&self, device: &str, name: &str) -> u64 {
        let stats = self.stats();
        let at = stats
            .find(&format!("\"{device}\":{{"))
            .unwrap_or_else(|| panic!("no device {device} in {stats}"));
        let object = &stats[at..];
        json_counter(&object[..object.find('}').unwrap_or(object.len())], name)
    }
}

/// The number after `"name":` in `json`.
fn json_counter(json: &str, name: &str) -> u64 {
    let at = json
        .find(&format!("\"{name}\""))
        .unwrap_or_else(|| panic!("no {name} in {json}"));
    json[at + name.len() + 2..]
        .trim_start_matches([':', ' '])
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("{name} in {json}"))
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.data_dir);
        let _ = std::fs::remove_file(self.data_dir.with_extension("credentials"));
    }
}
