//! Gateway mode against a real S3 store that is not ours (s3s-fs 0.14.1, a separate process):
//! the proxy backend through the storage seam (what the RDMA data path calls), and the
//! pass-through of token-less requests. No RDMA here; the lane test `tests/gateway_rdma.rs`
//! moves the bytes with real verbs.

mod common;
#[path = "../../tests/support/store.rs"]
mod store;

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use common::sigv4::{Placement, OTHER_SIGNER, TEST_ACCESS_KEY, TEST_SECRET_KEY, TEST_SIGNER};
use hipobj_server::backend::s3proxy::{Endpoint, Keyring};
use hipobj_server::backend::{
    Backend, CompletedPart, S3ProxyBackend, StorageError, WriteOptions, MIN_PART_SIZE,
};
use hipobj_server::credentials::{Credentials, CredentialsTable};
use hipobj_server::identity::Identity;
use store::Store;

/// The test store: s3s-fs with the test identity's keys.
fn test_store() -> Store {
    Store::start(TEST_ACCESS_KEY, TEST_SECRET_KEY)
}

/// The proxy backend acting for the test identity, whose secret in the gateway's table is
/// `secret`.
fn proxy(store: &Store, secret: &str) -> Arc<dyn Backend> {
    let text = format!("{TEST_ACCESS_KEY} {secret}\n");
    let table = CredentialsTable::parse(Path::new("gateway-credentials"), &text).expect("table");
    let gateway = S3ProxyBackend::new(
        Endpoint::parse(&store.url()).expect("endpoint"),
        "us-east-1",
        Keyring::Table(Credentials::fixed(table)),
    )
    .expect("proxy");
    assert!(!gateway.records_owners(), "ownership is the store's");
    gateway
        .acting_for(&Identity::new(TEST_ACCESS_KEY))
        .expect("a view per identity")
}

fn sized(len: usize) -> WriteOptions {
    WriteOptions {
        size: Some(len as u64),
        ..Default::default()
    }
}

/// Write `data` in `chunk`-byte appends, as the RDMA PUT path does.
fn put(b: &dyn Backend, bucket: &str, key: &str, data: &[u8], chunk: usize) {
    let mut w = b
        .create_write(bucket, key, sized(data.len()))
        .expect("create");
    for c in data.chunks(chunk) {
        w.append(c).expect("append");
    }
    let info = w.commit().expect("commit");
    assert_eq!(info.size, data.len() as u64);
}

fn read_range(b: &dyn Backend, bucket: &str, key: &str, first: u64, last: u64) -> Vec<u8> {
    let range = s3s::dto::Range::Int {
        first,
        last: Some(last),
    };
    let mut r = b.open_read(bucket, key, Some(&range)).expect("open");
    let mut out = Vec::new();
    r.read_to_end(&mut out).expect("read");
    out
}

#[test]
fn objects_stream_through_the_seam_byte_exact() {
    let store = test_store();
    let b = proxy(&store, TEST_SECRET_KEY);
    b.create_bucket("gwb").expect("bucket");
    b.head_bucket("gwb").expect("head bucket");
    assert!(matches!(
        b.head_bucket("nope"),
        Err(StorageError::NoSuchBucket)
    ));
    let data = common::pattern(3 << 20 | 777);
    put(b.as_ref(), "gwb", "dir/obj one", &data, 1 << 20);
    assert_eq!(
        store.stored("gwb", "dir/obj one").as_deref(),
        Some(&data[..])
    );
    let info = b.head_object("gwb", "dir/obj one").expect("head");
    assert_eq!(info.size, data.len() as u64);
    assert_eq!(info.etag.len(), 32, "md5 etag {:?}", info.etag);
    // Whole object, then ranges; narrowing (what the RDMA GET does) asks for no more.
    let mut all = Vec::new();
    b.open_read("gwb", "dir/obj one", None)
        .expect("open")
        .read_to_end(&mut all)
        .expect("read");
    assert!(all == data);
    for (first, last) in [
        (0, 0),
        (1, 4096),
        (1 << 20, (2 << 20) + 5),
        (3 << 20, (3 << 20) + 776),
    ] {
        let got = read_range(b.as_ref(), "gwb", "dir/obj one", first, last);
        assert!(
            got == data[first as usize..=last as usize],
            "range {first}-{last}"
        );
    }
    let mut r = b.open_read("gwb", "dir/obj one", None).expect("open");
    r.narrow(100..200);
    let mut got = Vec::new();
    r.read_to_end(&mut got).expect("narrowed read");
    assert!(got == data[100..200]);
    let keys: Vec<String> = b
        .list_objects("gwb", "dir/")
        .expect("list")
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(keys, ["dir/obj one"]);
    assert!(b
        .list_buckets()
        .expect("buckets")
        .iter()
        .any(|x| x.name == "gwb"));
    assert!(matches!(
        b.head_object("gwb", "missing"),
        Err(StorageError::NoSuchKey)
    ));
    assert!(matches!(
        b.open_read("gwb", "missing", None),
        Err(StorageError::NoSuchKey)
    ));
    b.delete_object("gwb", "dir/obj one").expect("delete");
    assert!(store.stored("gwb", "dir/obj one").is_none());
}

#[test]
fn aborted_and_short_writes_store_nothing() {
    let store = test_store();
    let b = proxy(&store, TEST_SECRET_KEY);
    b.create_bucket("gwb").expect("bucket");
    let data = common::pattern(2 << 20);
    put(b.as_ref(), "gwb", "keep", &data, 1 << 20);
    // An aborted replacement leaves the old object as it was.
    let mut w = b
        .create_write("gwb", "keep", sized(data.len()))
        .expect("create");
    w.append(&vec![0xee; 1 << 20]).expect("append");
    w.abort();
    let mut w = b
        .create_write("gwb", "new", sized(data.len()))
        .expect("create");
    w.append(&data[..4096]).expect("append");
    drop(w);
    // A commit before the announced length is an error, nothing stored.
    let mut w = b
        .create_write("gwb", "short", sized(data.len()))
        .expect("create");
    w.append(&data[..1000]).expect("append");
    assert!(w.commit().is_err());
    // More than announced is refused at once.
    let mut w = b.create_write("gwb", "long", sized(10)).expect("create");
    assert!(w.append(&data[..11]).is_err());
    w.abort();
    // A missing bucket is answered before any byte moves.
    assert!(matches!(
        b.create_write("nobucket", "k", sized(10)),
        Err(StorageError::NoSuchBucket)
    ));
    // An empty object is a commit without writes.
    let w = b.create_write("gwb", "empty", sized(0)).expect("create");
    assert_eq!(w.commit().expect("empty commit").size, 0);
    assert_eq!(store.stored("gwb", "empty").as_deref(), Some(&b""[..]));
    // Without a length the proxy cannot stream: a clear error, nothing started.
    assert!(b
        .create_write("gwb", "nolen", WriteOptions::default())
        .is_err());
    // Every writer above has returned, and with it joined its PUT's thread (abort, drop and a
    // failed commit join it): the proxy's requests have ended, none with its whole body. What
    // is left is the store's side: it must have ended them too (no body file in progress), so
    // nothing can be stored after the checks below.
    store.wait_for_puts_to_end(std::time::Duration::from_secs(30));
    assert_eq!(store.stored("gwb", "keep").as_deref(), Some(&data[..]));
    for k in ["new", "short", "long", "nolen"] {
        assert!(store.stored("gwb", k).is_none(), "{k} stored");
        assert!(
            matches!(b.head_object("gwb", k), Err(StorageError::NoSuchKey)),
            "{k}"
        );
    }
}

#[test]
fn multipart_parts_stream_and_assemble() {
    let store = test_store();
    let b = proxy(&store, TEST_SECRET_KEY);
    b.create_bucket("gwb").expect("bucket");
    let id = b
        .create_upload("gwb", "big", Default::default())
        .expect("create upload");
    assert!(!id.is_empty());
    let p1 = common::pattern(MIN_PART_SIZE as usize + 3);
    let p2: Vec<u8> = common::pattern(1 << 20).iter().map(|x| x ^ 0x5a).collect();
    let mut etags = Vec::new();
    for (n, part) in [(1u32, &p1), (2, &p2)] {
        let mut w = b
            .create_part_write("gwb", "big", &id, n, sized(part.len()))
            .expect("part");
        for c in part.chunks(1 << 20) {
            w.append(c).expect("append");
        }
        etags.push(w.commit().expect("part commit").etag);
    }
    let parts = b.list_parts("gwb", "big", &id).expect("list parts");
    assert_eq!(
        parts.iter().map(|p| p.part_number).collect::<Vec<_>>(),
        [1, 2]
    );
    assert_eq!(parts[1].size, p2.len() as u64);
    b.upload_info("gwb", "big", &id).expect("upload info");
    let completed: Vec<CompletedPart> = etags
        .iter()
        .enumerate()
        .map(|(i, e)| CompletedPart {
            part_number: i as u32 + 1,
            etag: e.clone(),
            checksums: Default::default(),
        })
        .collect();
    let info = b
        .complete_upload("gwb", "big", &id, &completed, &Default::default())
        .expect("complete");
    assert_eq!(info.size, (p1.len() + p2.len()) as u64);
    let mut want = p1.clone();
    want.extend_from_slice(&p2);
    assert!(store.stored("gwb", "big").as_deref() == Some(&want[..]));
    let got = read_range(
        b.as_ref(),
        "gwb",
        "big",
        p1.len() as u64 - 10,
        p1.len() as u64 + 10,
    );
    assert!(got == want[p1.len() - 10..=p1.len() + 10]);
    // An aborted upload is gone: its parts are dropped and it cannot be completed. (s3s-fs
    // answers ListParts for any upload id, so "gone" is shown by what the store keeps.)
    let id2 = b
        .create_upload("gwb", "gone", Default::default())
        .expect("create");
    let part = common::pattern(1000);
    let mut w = b
        .create_part_write("gwb", "gone", &id2, 1, sized(part.len()))
        .expect("part");
    w.append(&part).expect("append");
    let etag = w.commit().expect("part commit").etag;
    assert_eq!(b.list_parts("gwb", "gone", &id2).expect("parts").len(), 1);
    b.abort_upload("gwb", "gone", &id2).expect("abort");
    // An aborted upload: s3s-fs lists no parts, RGW (like S3) answers NoSuchUpload.
    match b.list_parts("gwb", "gone", &id2) {
        Ok(parts) => assert!(parts.is_empty(), "parts of an aborted upload: {parts:?}"),
        Err(e) => assert!(matches!(e, StorageError::NoSuchUpload), "{e:?}"),
    }
    let late = [CompletedPart {
        part_number: 1,
        etag,
        checksums: Default::default(),
    }];
    assert!(b
        .complete_upload("gwb", "gone", &id2, &late, &Default::default())
        .is_err());
    assert!(matches!(
        b.head_object("gwb", "gone"),
        Err(StorageError::NoSuchKey)
    ));
}

#[test]
fn replaced_object_mid_read_is_an_error_not_a_mix() {
    let store = test_store();
    let b = proxy(&store, TEST_SECRET_KEY);
    b.create_bucket("gwb").expect("bucket");
    put(b.as_ref(), "gwb", "k", &common::pattern(1 << 20), 1 << 20);
    let mut r = b.open_read("gwb", "k", None).expect("open");
    put(b.as_ref(), "gwb", "k", &vec![7u8; 1 << 20], 1 << 20);
    let mut buf = vec![0u8; 4096];
    assert!(
        r.read(&mut buf).is_err(),
        "read of a replaced object succeeded"
    );
}

/// The gateway signs with the table in use when it starts acting for an identity: after a reload
/// (what SIGHUP does) a fixed secret works and a removed identity's requests are refused before
/// they reach the store (fail closed: `UnknownIdentity`, 403 to the client); a view made before
/// the reload, as a transfer in flight holds it, keeps its keys until it is done.
#[test]
fn the_gateway_signs_with_the_reloaded_table() {
    use hipobj_server::credentials::CredentialsSource;
    use std::os::unix::fs::PermissionsExt;
    let store = test_store();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("credentials");
    let write = |text: String| {
        std::fs::write(&file, text).expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    };
    write(format!("{TEST_ACCESS_KEY} not-the-secret\n"));
    let live = Credentials::load(CredentialsSource {
        file: Some(file.clone()),
        single: None,
    })
    .expect("credentials");
    let gateway = S3ProxyBackend::new(
        Endpoint::parse(&store.url()).expect("endpoint"),
        "us-east-1",
        Keyring::Table(live.clone()),
    )
    .expect("proxy");
    let me = Identity::new(TEST_ACCESS_KEY);
    let before = gateway.acting_for(&me).expect("view");
    assert!(matches!(
        before.create_bucket("rot"),
        Err(StorageError::AccessDenied)
    ));
    write(format!("{TEST_ACCESS_KEY} {TEST_SECRET_KEY}\n"));
    live.reload().expect("reload");
    let fixed = gateway.acting_for(&me).expect("view");
    fixed
        .create_bucket("rot")
        .expect("signed with the reloaded secret");
    assert!(
        matches!(before.head_bucket("rot"), Err(StorageError::AccessDenied)),
        "a view keeps the keys it was made with"
    );
    // A write under way (its first bytes already sent to the store) when the identity is
    // removed: new views are refused unsent; the write finishes.
    let data = b"in flight across the reload";
    let mut w = fixed
        .create_write("rot", "k", sized(data.len()))
        .expect("create");
    w.append(&data[..10]).expect("append");
    write("someone-else x\n".to_string());
    live.reload().expect("reload");
    let removed = gateway.acting_for(&me).expect("view");
    assert!(matches!(
        removed.head_bucket("rot"),
        Err(StorageError::UnknownIdentity(who)) if who == TEST_ACCESS_KEY
    ));
    w.append(&data[10..]).expect("append");
    w.commit().expect("the write in flight finishes");
    assert_eq!(store.stored("rot", "k").as_deref(), Some(&data[..]));
}

#[test]
fn wrong_keys_and_a_dead_store_are_clear_errors() {
    let mut store = test_store();
    // The store's own access rules: a wrong secret, or an unsigned request (a gateway serving
    // anonymously), is refused by the store. An identity the gateway has no keys for never
    // reaches it (the proxy's unit tests).
    let bad = proxy(&store, "not-the-secret");
    assert!(matches!(
        bad.create_bucket("gwb"),
        Err(StorageError::AccessDenied)
    ));
    let unsigned = S3ProxyBackend::new(
        Endpoint::parse(&store.url()).expect("endpoint"),
        "us-east-1",
        Keyring::Anonymous,
    )
    .expect("proxy");
    assert!(matches!(
        unsigned.create_bucket("gwb"),
        Err(StorageError::AccessDenied)
    ));
    let b = proxy(&store, TEST_SECRET_KEY);
    b.create_bucket("gwb").expect("bucket");
    store.kill();
    // Unavailable (503 on every route, revision 5 rule 2), with the reason.
    match b.head_object("gwb", "k") {
        Err(StorageError::Unavailable(why)) => assert!(why.contains("unreachable"), "{why}"),
        other => panic!("dead store: {other:?}"),
    }
    store.restart();
    put(b.as_ref(), "gwb", "k", b"after restart", 4);
    assert_eq!(
        store.stored("gwb", "k").as_deref(),
        Some(&b"after restart"[..])
    );
}

#[test]
fn token_less_requests_pass_through_with_the_stores_semantics() {
    let mut store = test_store();
    let args = store.gateway_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = common::Server::start(&args);
    // Signed by the client as the test identity, checked by the store, not the gateway.
    let signed = |method: &str, target: &str, body: &[u8]| gw.request(method, target, &[], body);
    // The client's own signature, checked by the store.
    assert_eq!(signed("PUT", "/pass", b"").status, 200);
    let body = common::pattern(300_000);
    assert_eq!(signed("PUT", "/pass/obj", &body).status, 200);
    assert_eq!(store.stored("pass", "obj").as_deref(), Some(&body[..]));
    let got = signed("GET", "/pass/obj", b"");
    assert_eq!(got.status, 200);
    assert!(got.body == body);
    // The store's answer, not ours: an unsigned request, and one of an identity the store does
    // not know (the gateway does), are refused by the store.
    let unsigned = gw.request_as(None, Placement::Header, "GET", "/pass/obj", &[], b"");
    assert_eq!(unsigned.status, 403, "{}", unsigned.text());
    let other = gw.request_as(
        Some(OTHER_SIGNER),
        Placement::Header,
        "GET",
        "/pass/obj",
        &[],
        b"",
    );
    assert_eq!(other.status, 403, "{}", other.text());
    // A presigned URL passes through too.
    let presigned = gw.request_as(
        Some(TEST_SIGNER),
        Placement::Query,
        "GET",
        "/pass/obj",
        &[],
        b"",
    );
    assert_eq!(presigned.status, 200, "{}", presigned.text());
    assert!(presigned.body == body);
    let missing = signed("GET", "/pass/none", b"");
    assert_eq!(missing.status, 404);
    assert!(missing.text().contains("NoSuchKey"));
    // The request target reaches the store byte for byte, dot segments included: S3 signs the
    // path as sent, so a client that resolved `a/..` (as reqwest's WHATWG `Url` does) would
    // address another key under a signature the store refuses. This is why the pass-through
    // stays on hyper's client with an `http::Uri` (docs in server/src/passthrough.rs).
    let dotted = signed("GET", "/pass/a/../obj", b"");
    assert_ne!(dotted.status, 403, "{}", dotted.text());
    assert!(!dotted.text().contains("SignatureDoesNotMatch"));
    // The gateway's own endpoint stays the gateway's.
    assert!(gw.stats().contains("token_requests"));
    // Store down: 503 ServiceUnavailable with Retry-After, then service resumes.
    store.kill();
    let down = signed("GET", "/pass/obj", b"");
    assert_eq!(down.status, 503);
    assert!(down.text().contains("ServiceUnavailable"));
    assert!(down.header("retry-after").is_some());
    store.restart();
    let back = signed("GET", "/pass/obj", b"");
    assert_eq!(back.status, 200);
    assert!(back.body == body);
}

/// The store's checksums reach the gateway's view of an object (`head_object`, which the RDMA
/// GET path and the gateway's own HEAD and GET answers read): an object PUT to the store with a
/// CRC32 keeps it through the gateway (docs/protocol.md section 15).
#[test]
fn the_stores_checksums_pass_through_the_gateway() {
    let store = test_store();
    let args = store.gateway_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = common::Server::start(&args);
    assert_eq!(gw.request("PUT", "/sums", &[], b"").status, 200);
    // CRC32("123456789") as S3 writes it.
    let crc32 = [("x-amz-checksum-crc32", "y/Q5Jg==".to_string())];
    let put = gw.request("PUT", "/sums/obj", &crc32, b"123456789");
    assert_eq!(put.status, 200, "{}", put.text());
    let info = proxy(&store, TEST_SECRET_KEY)
        .head_object("sums", "obj")
        .expect("head");
    assert_eq!(info.checksums.crc32.as_deref(), Some("y/Q5Jg=="));
    assert!(!info.checksums.composite);
}
