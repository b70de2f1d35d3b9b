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
    Server::start(
        rdma.then_some(srv.as_str()),
        &["--access-key", ACCESS, "--secret-key", SECRET],
    )
}

fn hipobj(server: &Server, args: &[&str]) -> Output {
    let (cli, _) = devices();
    Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(args)
        .env("AWS_ENDPOINT_URL", format!("http://{}", server.addr))
        .env("HIPOBJ_NIC", cli)
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
        String::from_utf8_lossy(&missing.stderr).contains("404"),
        "{}",
        text(&missing)
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
        ],
    ));
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("bench --json: {e}\n{out}"));
    let cells = v["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 2 * 2 * 2, "ops x sizes x concurrency");
    for c in cells {
        for path in ["rdma", "http"] {
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
    }
    assert!(v["nic"].as_str().unwrap_or("").starts_with("rxe"), "{v}");
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
    assert!(out.contains("HIP:"), "{out}");
}
