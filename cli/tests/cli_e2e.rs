//! The `hipobj` command line against hipobj-server over the lane's rxe devices (real verbs): cp
//! both ways with byte checks, a range, chunked GETs, credentials from flags / AWS_* / a profile,
//! every failure's exit status, `bench --json`, `info`. The tests need an RDMA device, so they are
//! `#[ignore]`d (reported as ignored, not passed, elsewhere); the lane runs them with `--ignored`
//! (tests/vm/e2e.d/45-cli), and there a missing device fails them.

#[path = "../../tests/support/s3.rs"]
mod s3;
#[path = "../../tests/support/server.rs"]
mod server;

use server::{device_pair, Server};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ACCESS: &str = "clitestkey";
const SECRET: &str = "clitestsecret0123456789";

fn devices() -> (String, String) {
    device_pair().expect("an RDMA device")
}

/// A server with SigV4 required (`rdma`: on the second lane device; else RDMA disabled: 501).
fn start(rdma: bool) -> Server {
    let (_, srv) = devices();
    // The identity's secret in the server's environment, not on its command line.
    Server::start_with_env(
        rdma.then_some(srv.as_str()),
        &["--access-key", ACCESS],
        &[("HIPOBJ_SECRET_KEY", SECRET)],
    )
}

fn hipobj(server: &Server, args: &[&str]) -> Output {
    let (cli, _) = devices();
    Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(args)
        .env("AWS_ENDPOINT_URL", format!("http://{}", server.addr))
        .env("HIPOBJ_NIC", cli)
        // These tests exercise RDMA: forced (--transport auto would take plain HTTP below 1 MiB;
        // --http-fallback still means auto).
        .env("HIPOBJ_TRANSPORT", "rdma")
        .env("AWS_ACCESS_KEY_ID", ACCESS)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env_remove("AWS_PROFILE")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .output()
        .expect("run hipobj")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "hipobj failed: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn exit_code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hipobj-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 131 + i / 4093) as u8).collect()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn cp_both_ways_with_byte_check_range_and_chunks() {
    let server = start(true);
    let dir = scratch("cp");
    let input = dir.join("in");
    let bytes = data(3 * 1024 * 1024 + 1);
    std::fs::write(&input, &bytes).expect("write input");
    ok(hipobj(&server, &["mb", "s3://clib"]));

    let out = ok(hipobj(&server, &["cp", "-q", s(&input), "s3://clib/obj"]));
    println!("{out}");
    assert!(
        out.contains("3145729 bytes in") && out.contains("MB/s") && out.contains("RDMA via rxe"),
        "{out}"
    );

    let back = dir.join("back");
    let out = ok(hipobj(&server, &["cp", "-q", "s3://clib/obj", s(&back)]));
    println!("{out}");
    assert!(out.contains("RDMA via rxe"), "{out}");
    // Checked end to end against the server's default checksum (docs/protocol.md section 15).
    assert!(out.contains("CRC64NVME verified"), "{out}");
    assert_eq!(
        std::fs::read(&back).expect("read back"),
        bytes,
        "downloaded bytes differ"
    );

    // several GET transfers into one registered buffer
    let chunked = dir.join("chunked");
    ok(hipobj(
        &server,
        &["cp", "-q", "--chunk", "1M", "s3://clib/obj", s(&chunked)],
    ));
    assert_eq!(
        std::fs::read(&chunked).expect("read chunked"),
        bytes,
        "chunked download differs"
    );

    let part = dir.join("part");
    let out = ok(hipobj(
        &server,
        &[
            "cp",
            "-q",
            "--range",
            "1000-200999",
            "s3://clib/obj",
            s(&part),
        ],
    ));
    assert!(out.contains("200000 bytes in"), "{out}");
    assert!(out.contains("unchecked: a range of the object"), "{out}");
    assert_eq!(
        std::fs::read(&part).expect("read part"),
        &bytes[1000..201000],
        "range differs"
    );

    // a range of the local file as the object
    ok(hipobj(
        &server,
        &["cp", "-q", "--range", "5-", s(&input), "s3://clib/tail"],
    ));
    let tail = dir.join("tail");
    ok(hipobj(&server, &["cp", "-q", "s3://clib/tail", s(&tail)]));
    assert_eq!(
        std::fs::read(&tail).expect("read tail"),
        &bytes[5..],
        "uploaded range differs"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A stored object whose bytes changed on the server's disk after its checksum was stored (a bit
/// rot, a bad disk): the download lands the changed bytes by RDMA, the check sees it, reads
/// the object again once, and fails naming the algorithm and both values, with no destination
/// left behind. `--checksum-mode off` takes the bytes as they are.
#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn a_download_of_bytes_changed_on_the_server_fails_and_leaves_nothing() {
    let server = start(true);
    let dir = scratch("rot");
    let input = dir.join("in");
    let bytes = data(2 * 1024 * 1024 + 3);
    std::fs::write(&input, &bytes).expect("write input");
    ok(hipobj(&server, &["mb", "s3://rot"]));
    ok(hipobj(&server, &["cp", "-q", s(&input), "s3://rot/obj"]));
    // One byte changed in place: same file, same size, the stored checksum unchanged.
    let stored = server.data_dir.join("rot").join("obj");
    let mut on_disk = std::fs::read(&stored).expect("the stored object");
    assert_eq!(on_disk, bytes);
    on_disk[1_500_000] ^= 0x20;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&stored)
            .expect("open the stored object");
        f.write_all_at(&on_disk[1_500_000..1_500_001], 1_500_000)
            .expect("change one byte");
    }
    let back = dir.join("back");
    let o = hipobj(
        &server,
        &["cp", "-q", "--chunk", "1M", "s3://rot/obj", s(&back)],
    );
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("CRC64NVME mismatch") && t.contains("read twice"),
        "names the algorithm: {t}"
    );
    let want = hipobj::checksum::CrcAlgo::Crc64Nvme;
    let (expected, got) = (want.encode(want.of(&bytes)), want.encode(want.of(&on_disk)));
    assert!(
        t.contains(&expected) && t.contains(&got),
        "both values ({expected}, {got}): {t}"
    );
    assert!(!back.exists(), "no destination left behind");
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .expect("scratch")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .filter(|n| n != "in")
        .collect();
    assert!(
        leftovers.is_empty(),
        "no temporary file left: {leftovers:?}"
    );
    // Unchecked on request: the changed bytes arrive as they are.
    let out = ok(hipobj(
        &server,
        &[
            "cp",
            "-q",
            "--checksum-mode",
            "off",
            "s3://rot/obj",
            s(&back),
        ],
    ));
    assert!(out.contains("unchecked: checksums off"), "{out}");
    assert_eq!(std::fs::read(&back).expect("read back"), on_disk);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn credentials_from_a_profile() {
    let server = start(true);
    let dir = scratch("profile");
    let creds = dir.join("credentials");
    std::fs::write(&creds, format!("[default]\naws_access_key_id = nobody\naws_secret_access_key = x\n\n[lab]\naws_access_key_id = {ACCESS}\naws_secret_access_key = {SECRET}\n")).expect("write credentials");
    let (cli, _) = devices();
    let run = |profile: &str| {
        Command::new(env!("CARGO_BIN_EXE_hipobj"))
            .args(["mb", "s3://profb", "--profile", profile])
            .env("AWS_ENDPOINT_URL", format!("http://{}", server.addr))
            .env("HIPOBJ_NIC", &cli)
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env("AWS_SHARED_CREDENTIALS_FILE", &creds)
            .output()
            .expect("run hipobj")
    };
    ok(run("lab"));
    let refused = run("default");
    assert_eq!(
        exit_code(&refused),
        5,
        "wrong profile keys: {}",
        text(&refused)
    );
    let missing = run("nosuch");
    assert_eq!(
        exit_code(&missing),
        2,
        "unknown profile: {}",
        text(&missing)
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn every_failure_has_its_exit_status() {
    let server = start(true);
    let dir = scratch("codes");
    let input = dir.join("in");
    std::fs::write(&input, data(65536)).expect("write input");
    ok(hipobj(&server, &["mb", "s3://codes"]));
    ok(hipobj(&server, &["cp", "-q", s(&input), "s3://codes/k"]));
    let out = dir.join("out");

    let missing = hipobj(&server, &["cp", "-q", "s3://codes/nosuch", s(&out)]);
    assert_eq!(exit_code(&missing), 6, "404: {}", text(&missing));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("NoSuchKey"),
        "the server's code and message: {}",
        text(&missing)
    );
    let no_bucket = hipobj(&server, &["cp", "-q", "s3://nosuchbucket/k", s(&out)]);
    assert_eq!(exit_code(&no_bucket), 6, "404: {}", text(&no_bucket));
    assert!(
        String::from_utf8_lossy(&no_bucket.stderr).contains("NoSuchBucket"),
        "the server's code: {}",
        text(&no_bucket)
    );
    // the server names the reason a bucket cannot be made
    let short = hipobj(&server, &["mb", "s3://ab"]);
    assert_eq!(exit_code(&short), 7, "400: {}", text(&short));
    assert!(
        String::from_utf8_lossy(&short.stderr).contains("InvalidBucketName"),
        "the server's reason: {}",
        text(&short)
    );

    let denied = hipobj(
        &server,
        &[
            "cp",
            "-q",
            "--secret-key",
            "wrong",
            "--access-key",
            ACCESS,
            "s3://codes/k",
            s(&out),
        ],
    );
    assert_eq!(exit_code(&denied), 5, "403: {}", text(&denied));
    let denied_put = hipobj(
        &server,
        &[
            "cp",
            "-q",
            "--secret-key",
            "wrong",
            "--access-key",
            ACCESS,
            s(&input),
            "s3://codes/k2",
        ],
    );
    assert_eq!(
        exit_code(&denied_put),
        5,
        "403 on the token PUT: {}",
        text(&denied_put)
    );

    let no_nic = hipobj(
        &server,
        &["cp", "-q", "--nic", "nosuchdev", "s3://codes/k", s(&out)],
    );
    assert_eq!(exit_code(&no_nic), 3, "no NIC: {}", text(&no_nic));

    let gpu = hipobj(
        &server,
        &["cp", "-q", "--gpu", "0", "s3://codes/k", s(&out)],
    );
    assert_eq!(exit_code(&gpu), 8, "no GPU in the lane: {}", text(&gpu));

    let usage = hipobj(&server, &["cp", s(&input), s(&out)]);
    assert_eq!(exit_code(&usage), 2, "two local paths: {}", text(&usage));
    let bad_range = hipobj(
        &server,
        &["cp", "--range", "70000-80000", "s3://codes/k", s(&out)],
    );
    assert_eq!(
        exit_code(&bad_range),
        2,
        "range outside the object: {}",
        text(&bad_range)
    );

    // a server without RDMA: 501 -> exit 4, or plain HTTP with --http-fallback
    let plain = start(false);
    ok(hipobj(&plain, &["mb", "s3://codes"]));
    let declined = hipobj(&plain, &["cp", "-q", s(&input), "s3://codes/k"]);
    assert_eq!(exit_code(&declined), 4, "501: {}", text(&declined));
    let fell_back = ok(hipobj(
        &plain,
        &["cp", "-q", "--http-fallback", s(&input), "s3://codes/k"],
    ));
    assert!(fell_back.contains("plain HTTP"), "{fell_back}");
    let declined_get = hipobj(&plain, &["cp", "-q", "s3://codes/k", s(&out)]);
    assert_eq!(
        exit_code(&declined_get),
        4,
        "501 on GET: {}",
        text(&declined_get)
    );
    ok(hipobj(
        &plain,
        &["cp", "-q", "--http-fallback", "s3://codes/k", s(&out)],
    ));
    assert_eq!(
        std::fs::read(&out).expect("read"),
        data(65536),
        "fallback bytes differ"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn bench_json_parses() {
    let server = start(true);
    let out = ok(hipobj(
        &server,
        &[
            "bench",
            "--json",
            "--sizes",
            "4K,256K",
            "--concurrency",
            "1,2",
            "--iterations",
            "3",
            // the auto column beside the forced ones (the helper's environment forces rdma)
            "--transport",
            "auto",
        ],
    ));
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("bench --json: {e}\n{out}"));
    let cells = v["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 2 * 2 * 2, "ops x sizes x concurrency");
    for c in cells {
        for path in ["rdma", "http", "auto"] {
            let st = &c[path];
            assert!(st["mb_per_s"].as_f64().unwrap_or(0.0) > 0.0, "{c}");
            assert!(
                st["p99_ms"].as_f64().unwrap_or(0.0) >= st["p50_ms"].as_f64().unwrap_or(f64::MAX),
                "{c}"
            );
            assert_eq!(
                st["operations"].as_u64(),
                Some(3 * c["concurrency"].as_u64().unwrap_or(0)),
                "{c}"
            );
        }
        assert!(c["ratio_mb_per_s"].as_f64().unwrap_or(0.0) > 0.0, "{c}");
        assert!(c["ratio_auto"].as_f64().unwrap_or(0.0) > 0.0, "{c}");
    }
    // Every timed operation is in the decision's counters: forced RDMA, forced HTTP, and auto's.
    let t = &v["transport"];
    let timed: u64 = cells
        .iter()
        .map(|c| 3 * 3 * c["concurrency"].as_u64().unwrap_or(0))
        .sum();
    let counted =
        t["rdma_transfers"].as_u64().unwrap_or(0) + t["http_transfers"].as_u64().unwrap_or(0);
    assert_eq!(counted, timed, "{t}");
    assert_eq!(
        t["rdma_by_reason"]["forced"].as_u64(),
        Some(timed / 3),
        "{t}"
    );
    assert_eq!(
        t["http_by_reason"]["forced"].as_u64(),
        Some(timed / 3),
        "{t}"
    );
    assert!(v["nic"].as_str().unwrap_or("").starts_with("rxe"), "{v}");
    // the bench's own count of its RDMA transfers is what the server served over RDMA
    let stats: serde_json::Value = serde_json::from_str(&server.stats()).expect("server stats");
    let served = ["rdma_gets", "rdma_puts"]
        .iter()
        .map(|k| stats[*k].as_u64().unwrap_or(0))
        .sum::<u64>();
    assert_eq!(
        v["rdma_transfers"].as_u64(),
        Some(served),
        "bench's rdma_transfers against the server's rdma_gets + rdma_puts: {stats}"
    );
}

#[test]
#[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
fn info_lists_the_devices_and_the_choice() {
    let server = start(false);
    let (cli, srv) = devices();
    let out = ok(hipobj(&server, &["info", "--nic", &cli]));
    println!("{out}");
    for dev in [&cli, &srv] {
        assert!(
            out.lines().any(|l| l.starts_with(dev.as_str())),
            "{dev} not listed:\n{out}"
        );
    }
    assert!(
        out.contains("<- chosen") && out.contains("RoceV2Ipv4"),
        "{out}"
    );
    assert!(
        out.contains("active MTU") && out.contains("max message size"),
        "{out}"
    );
    assert!(out.contains("memory windows:"), "{out}");
    assert!(
        out.contains(&format!("hipObject would use: {cli}")),
        "{out}"
    );
    // The GPU runtime as the library loads it (HIP or CUDA), or why there is none.
    assert!(out.lines().any(|l| l.starts_with("GPU: ")), "{out}");
}

// ---- the transfer engine (issue 21): run by tests/vm/e2e.d/46-cli-engine (`--ignored engine_`),
// big files under $TMPDIR, which that script puts on the work tree (the guest's /tmp is small).

/// Run hipobj to the end: its output and its peak resident memory (KiB, from wait4's rusage).
#[allow(clippy::zombie_processes)] // reaped by wait4 below, which std's Child cannot do
fn hipobj_measured(server: &Server, args: &[&str]) -> (Output, i64) {
    use std::os::unix::process::ExitStatusExt;
    let (cli, _) = devices();
    let dir = scratch("measured");
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let child = Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(args)
        .env("AWS_ENDPOINT_URL", format!("http://{}", server.addr))
        .env("HIPOBJ_NIC", cli)
        .env("HIPOBJ_TRANSPORT", "rdma")
        .env("AWS_ACCESS_KEY_ID", ACCESS)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env_remove("AWS_PROFILE")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("run hipobj");
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to overwrite.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child's pid with valid out-pointers; the Child is not waited again.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t, "wait4");
    let output = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: std::fs::read(&out).unwrap_or_default(),
        stderr: std::fs::read(&err).unwrap_or_default(),
    };
    let _ = std::fs::remove_dir_all(dir);
    (output, usage.ru_maxrss)
}

/// A file of `len` pattern bytes, written in pieces.
fn write_data(path: &Path, len: u64) {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let block = data(1 << 20);
    let mut left = len;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        f.write_all(&block[..n]).expect("write");
        left -= n as u64;
    }
    f.flush().expect("flush");
}

fn same_files(a: &Path, b: &Path) -> bool {
    use std::io::Read;
    let (mut fa, mut fb) = (
        std::fs::File::open(a).expect("open a"),
        std::fs::File::open(b).expect("open b"),
    );
    let (mut x, mut y) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = fa.read(&mut x).expect("read a");
        let mut m = 0;
        while m < n {
            let k = fb.read(&mut y[m..n]).expect("read b");
            if k == 0 {
                return false;
            }
            m += k;
        }
        if n == 0 {
            return fb.read(&mut y).expect("read b") == 0;
        }
        if x[..n] != y[..n] {
            return false;
        }
    }
}

/// The "N retries" of a closing line.
fn retries_in(out: &str) -> u64 {
    out.split(", ")
        .find_map(|p| p.trim().strip_suffix(" retries"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no retry count in {out}"))
}

/// Wait until the server's counter `name` reaches `at_least` while the copy `child` still runs;
/// fails the test after 120 s, or when the copy ended first (then nothing would be tested).
fn wait_for_counter(
    server: &Server,
    name: &str,
    at_least: u64,
    child: &mut std::process::Child,
    what: &str,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while server.counter(name) < at_least {
        assert!(
            std::time::Instant::now() < deadline,
            "the {what} moved no part within 120 s: {}",
            server.stats()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let ended = child.try_wait().expect("try_wait");
    assert!(
        ended.is_none(),
        "the {what} ended ({ended:?}) before the server could be restarted under it"
    );
}

/// Multipart uploads the server still holds open for `bucket` (in its `.uploads` directory; a
/// completed one keeps only its `completed.json`, so a repeated Complete answers the same).
fn open_uploads(server: &Server, bucket: &str) -> usize {
    std::fs::read_dir(server.data_dir.join(bucket).join(".uploads"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|u| !u.path().join("completed.json").exists())
        .count()
}

#[test]
#[ignore = "lane: tests/vm/e2e.d/46-cli-engine"]
fn engine_recursive_many_small_and_three_large() {
    devices();
    let server = start(true);
    let dir = scratch("recursive");
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("sub/deeper")).expect("dirs");
    for i in 0..200usize {
        let sub = if i % 3 == 0 { "sub/" } else { "" };
        let d = data(1 + i * 97);
        std::fs::write(src.join(format!("{sub}small-{i:03}")), &d).expect("small");
    }
    for (i, mb) in [(0, 9u64), (1, 17), (2, 24)] {
        write_data(&src.join(format!("sub/deeper/large-{i}")), (mb << 20) + i);
    }
    ok(hipobj(&server, &["mb", "s3://rec"]));
    let up = ok(hipobj(
        &server,
        &[
            "cp",
            "-q",
            "-r",
            "--concurrency",
            "4",
            s(&src),
            "s3://rec/tree",
        ],
    ));
    println!("{up}");
    assert!(
        up.contains("203 of 203 files") && up.contains("RDMA via rxe"),
        "{up}"
    );
    assert_eq!(
        open_uploads(&server, "rec"),
        0,
        "every multipart upload completed"
    );
    let back = dir.join("back");
    let down = ok(hipobj(
        &server,
        &["cp", "-q", "--recursive", "s3://rec/tree/", s(&back)],
    ));
    println!("{down}");
    assert!(down.contains("203 of 203 files"), "{down}");
    let mut checked = 0;
    let mut pending = vec![src.clone()];
    while let Some(d) = pending.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                pending.push(p);
                continue;
            }
            let rel = p.strip_prefix(&src).expect("rel");
            assert!(same_files(&p, &back.join(rel)), "{} differs", rel.display());
            checked += 1;
        }
    }
    assert_eq!(checked, 203);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
#[ignore = "lane: tests/vm/e2e.d/46-cli-engine"]
fn engine_interrupted_copy_leaves_no_multipart_upload() {
    use std::os::unix::process::CommandExt;
    devices();
    let server = start(true);
    let dir = scratch("interrupt");
    let big = dir.join("big");
    // 1 GiB; sparse: its bytes do not matter, only that the copy is cut midway.
    std::fs::File::create(&big)
        .and_then(|f| f.set_len(1 << 30))
        .expect("big file");
    ok(hipobj(&server, &["mb", "s3://intr"]));
    let (cli, _) = devices();
    let child = Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(["cp", "-q", "--concurrency", "4", s(&big), "s3://intr/big"])
        .env("AWS_ENDPOINT_URL", format!("http://{}", server.addr))
        .env("HIPOBJ_NIC", cli)
        .env("AWS_ACCESS_KEY_ID", ACCESS)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env_remove("AWS_PROFILE")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("run hipobj");
    // Wait until the upload has parts on the server, then Ctrl-C.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let parts = |server: &Server| -> usize {
        std::fs::read_dir(server.data_dir.join("intr").join(".uploads"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|u| std::fs::read_dir(u.path()).map(|d| d.count()).unwrap_or(0))
            .sum()
    };
    while parts(&server) < 4 {
        assert!(std::time::Instant::now() < deadline, "no part arrived");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let out = child.wait_with_output().expect("wait");
    println!("{}", text(&out));
    assert!(
        !out.status.success(),
        "an interrupted copy fails: {}",
        text(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("interrupted"),
        "{}",
        text(&out)
    );
    assert_eq!(open_uploads(&server, "intr"), 0, "the upload was aborted");
    let missing = hipobj(&server, &["cp", "-q", "s3://intr/big", s(&dir.join("x"))]);
    assert_eq!(exit_code(&missing), 6, "no object: {}", text(&missing));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
#[ignore = "lane: tests/vm/e2e.d/46-cli-engine"]
fn engine_copy_survives_a_server_restart() {
    devices();
    let mut server = start(true);
    let dir = scratch("restart");
    let src = dir.join("src");
    write_data(&src, 192 << 20);
    ok(hipobj(&server, &["mb", "s3://rst"]));
    // The counter of the server's /_hipobj/stats that one part of each copy moves.
    for (what, part_counter, args) in [
        (
            "upload",
            "rdma_parts",
            vec!["cp", "-q", "--concurrency", "4", s(&src), "s3://rst/obj"],
        ),
        (
            "download",
            "rdma_gets",
            vec![
                "cp",
                "-q",
                "--concurrency",
                "4",
                "s3://rst/obj",
                s(&dir.join("back")),
            ],
        ),
    ] {
        let (cli, _) = devices();
        let mut child = Command::new(env!("CARGO_BIN_EXE_hipobj"))
            .args(&args)
            .env("AWS_ENDPOINT_URL", format!("http://{}", server.addr))
            .env("HIPOBJ_NIC", cli)
            .env("AWS_ACCESS_KEY_ID", ACCESS)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .env_remove("AWS_PROFILE")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
            // The restart takes the server a moment under TCG: more attempts, as AWS_MAX_ATTEMPTS
            // gives the AWS CLI (the default stays standard mode's 3).
            .env("AWS_MAX_ATTEMPTS", "6")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run hipobj");
        // Restart once the copy is observably under way: the server has moved its first part.
        wait_for_counter(&server, part_counter, 1, &mut child, what);
        server.restart();
        let out = child.wait_with_output().expect("wait");
        let stdout = ok(out);
        // The copy went on against the restarted server: its counters (fresh with the process)
        // show parts moved after the restart. Whether the restart also costs a retry depends on
        // where it lands: between requests, hyper's fresh connection and a 428 re-pairing absorb
        // it (seen: 0 retries on a quiet host, 2 and 9 at load ~15).
        let after = server.counter(part_counter);
        println!(
            "{what} across a server restart: {stdout} ({} retries; {after} {part_counter} after the restart)",
            retries_in(&stdout)
        );
        assert!(
            after >= 1,
            "the {what} moved no part through the restarted server: {}",
            server.stats()
        );
    }
    assert!(same_files(&src, &dir.join("back")));
    let _ = std::fs::remove_dir_all(dir);
}

/// One RDMA operation failed on purpose in each direction (`--inject-rdma-failures 1`: the
/// server moves the paired QP to ERR before its first transfer's first work request, a real verbs
/// failure answered 500, the pairing destroyed): each copy retries with a fresh token and a new
/// pairing, finishes byte-exact and says that it used a retry. The restart between the two copies
/// arms the injection again (and drops every pairing, which costs a 428, not a retry). Needs a
/// server built with the feature `fault-injection` (46-cli-engine: target/e2e/hipobj-server-faults).
#[test]
#[ignore = "lane: tests/vm/e2e.d/46-cli-engine"]
fn engine_copy_survives_a_failed_rdma_operation() {
    let (_, srv) = devices();
    let mut server = Server::start_with_env(
        Some(srv.as_str()),
        &["--access-key", ACCESS, "--inject-rdma-failures", "1"],
        &[("HIPOBJ_SECRET_KEY", SECRET)],
    );
    let dir = scratch("injected");
    let src = dir.join("src");
    write_data(&src, (40 << 20) + 5);
    ok(hipobj(&server, &["mb", "s3://inj"]));
    let up = ok(hipobj(
        &server,
        &["cp", "-q", "--concurrency", "4", s(&src), "s3://inj/obj"],
    ));
    server.restart();
    let back = dir.join("back");
    let down = ok(hipobj(
        &server,
        &["cp", "-q", "--concurrency", "4", "s3://inj/obj", s(&back)],
    ));
    println!("upload with one injected RDMA failure: {up}\ndownload with one: {down}");
    assert!(same_files(&src, &back), "the copy differs");
    for (what, out) in [("upload", &up), ("download", &down)] {
        assert!(
            retries_in(out) >= 1,
            "{what}: the failure was not retried: {out}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The issue's large copy (HIPOBJ_E2E_LARGE_MB, 4608 = 4.5 GiB: past one registration and one
/// PUT): each way byte-exact, with the client's peak RSS. tests/vm/e2e-large runs it.
#[test]
#[ignore = "lane: tests/vm/e2e-large"]
fn engine_large_copy_each_way() {
    devices();
    let mb: u64 = std::env::var("HIPOBJ_E2E_LARGE_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4608);
    let server = start(true);
    let dir = scratch("large");
    let src = dir.join("src");
    write_data(&src, (mb << 20) + 7);
    ok(hipobj(&server, &["mb", "s3://large"]));
    // The command line's default concurrency (the library's max_transfers, 16) unless
    // HIPOBJ_E2E_LARGE_STREAMS names one. At 16, before the engine's pace (src/engine/pace.rs),
    // 16 transfers x 8 outstanding 1 MiB RDMA READs overran the emulated NIC (status 12, the copy
    // failed after 14 retries, measured 2026-12-02); the closing line says how often the pace cut.
    let streams = std::env::var("HIPOBJ_E2E_LARGE_STREAMS").ok();
    let cp = |from: &str, to: &str| {
        let mut args = vec!["cp", "-q"];
        if let Some(n) = &streams {
            args.extend(["--concurrency", n.as_str()]);
        }
        args.extend([from, to]);
        hipobj_measured(&server, &args)
    };
    let (up, up_rss) = cp(s(&src), "s3://large/obj");
    let up = ok(up);
    println!("{up}\nupload peak RSS {} MiB", up_rss / 1024);
    let back = dir.join("back");
    let (down, down_rss) = cp("s3://large/obj", s(&back));
    let down = ok(down);
    println!("{down}\ndownload peak RSS {} MiB", down_rss / 1024);
    assert!(same_files(&src, &back), "the download differs");
    // 16 transfers x two 8 MiB ring buffers plus the runtime: far below the object.
    for rss in [up_rss, down_rss] {
        assert!(rss < 512 * 1024, "peak RSS {} MiB", rss / 1024);
    }
    let _ = std::fs::remove_dir_all(dir);
}
