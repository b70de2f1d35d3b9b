//! Gateway mode: how the proxy backend reads the store's answer to CompleteMultipartUpload. S3 may
//! answer it `200 OK` and put an error document in the body (it answers before it has assembled
//! the object): a transient error there (`SlowDown`, `InternalError`) is retried and the upload
//! completes; a permanent one (`InvalidPart`) fails with its own error, sent once. The store is a
//! scripted double (`tests/support/scripted_store.rs`): no real store gives these on demand. The
//! gateway's backoff is a millisecond here (`S3ProxyBackend::with_retry`).

#[path = "../../tests/support/scripted_store.rs"]
mod scripted_store;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hipobj::engine::RetryPolicy;
use hipobj_server::backend::s3proxy::{Endpoint, Keyring};
use hipobj_server::backend::{Backend, CompletedPart, ObjectInfo, S3ProxyBackend, StorageError};
use scripted_store::{head_answer, xml_answer, Request, ScriptedStore};

const COMPLETED: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
    <CompleteMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>\
    <ETag>\"3858f62230ac3c915f300c664312c11f-2\"</ETag></CompleteMultipartUploadResult>";

/// An error document as S3 sends it inside a 200 (its XML declaration, then `<Error>`).
fn error_document(code: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\n<Error><Code>{code}</Code>\
         <Message>scripted {code}</Message><RequestId>req-1</RequestId></Error>"
    )
}

fn is_complete(r: &Request) -> bool {
    r.method == "POST" && r.target.starts_with("/b/k?uploadId=up-1")
}

/// A store whose first `failures` CompleteMultipartUploads are answered `status` with `code`'s
/// error document, every later one `200` with success; a HEAD of the object finds it.
fn store_failing(status: u16, code: &str, failures: u32) -> ScriptedStore {
    let failure = error_document(code);
    let completions = AtomicU32::new(0);
    ScriptedStore::start(move |r| match r.method.as_str() {
        "POST" if is_complete(r) => match completions.fetch_add(1, Ordering::SeqCst) {
            n if n < failures => xml_answer(status, &failure),
            _ => xml_answer(200, COMPLETED),
        },
        "HEAD" if r.target == "/b/k" => {
            head_answer(10 << 20, "\"3858f62230ac3c915f300c664312c11f-2\"")
        }
        _ => xml_answer(
            400,
            "<Error><Code>InvalidRequest</Code><Message>not scripted</Message></Error>",
        ),
    })
}

/// The proxy backend in front of `store`, anonymous (the double checks no signature), its
/// backoff a millisecond.
fn gateway(store: &ScriptedStore) -> Arc<dyn Backend> {
    let endpoint = Endpoint::parse(&store.url()).expect("endpoint");
    let fast = RetryPolicy {
        base: Duration::from_millis(1),
        max_backoff: Duration::from_millis(1),
        ..hipobj_server::backend::s3proxy::store_retry_policy()
    };
    let backend = S3ProxyBackend::new(endpoint, "us-east-1", Keyring::Anonymous)
        .expect("proxy")
        .with_retry(fast);
    Arc::new(backend)
}

fn part(part_number: u32, etag: &str) -> CompletedPart {
    CompletedPart {
        part_number,
        etag: etag.to_string(),
        checksums: Default::default(),
    }
}

/// The completion of upload `up-1` of `b/k`: part 1's ETag as a client sends it (quoted), part
/// 2's bare.
fn complete(b: &dyn Backend) -> Result<ObjectInfo, StorageError> {
    let parts = [part(1, "\"etag-one\""), part(2, "etag-two")];
    b.complete_upload("b", "k", "up-1", &parts, &Default::default())
}

fn completions(store: &ScriptedStore) -> Vec<Request> {
    store.requests().into_iter().filter(is_complete).collect()
}

/// A transient error inside a 200: retried, and the second answer completes the upload.
fn a_transient_error_in_a_200_is_retried(code: &str) {
    let store = store_failing(200, code, 1);
    let info = complete(gateway(&store).as_ref())
        .unwrap_or_else(|e| panic!("{code} in a 200 answer: the upload must complete, got {e}"));
    assert_eq!(info.size, 10 << 20);
    assert_eq!(info.etag, "3858f62230ac3c915f300c664312c11f-2");
    let sent = completions(&store);
    assert_eq!(sent.len(), 2, "{code}: the completion and one retry");
    assert!(
        sent[0].body == sent[1].body,
        "the retry sends the same parts"
    );
    let body = String::from_utf8_lossy(&sent[0].body);
    assert!(
        body.contains("<Part><PartNumber>1</PartNumber><ETag>\"etag-one\"</ETag></Part>")
            && body.contains("<Part><PartNumber>2</PartNumber><ETag>\"etag-two\"</ETag></Part>"),
        "every part's ETag quoted once: {body}"
    );
}

#[test]
fn slow_down_in_a_200_answer_is_retried_and_the_upload_completes() {
    a_transient_error_in_a_200_is_retried("SlowDown");
}

#[test]
fn internal_error_in_a_200_answer_is_retried_and_the_upload_completes() {
    a_transient_error_in_a_200_is_retried("InternalError");
}

#[test]
fn slow_down_with_its_503_is_retried_too() {
    let store = store_failing(503, "SlowDown", 2);
    complete(gateway(&store).as_ref()).expect("completed on the third attempt");
    assert_eq!(completions(&store).len(), 3);
}

#[test]
fn a_store_that_keeps_failing_is_tried_three_times_then_unavailable() {
    let store = store_failing(200, "InternalError", u32::MAX);
    match complete(gateway(&store).as_ref()) {
        Err(StorageError::Unavailable(why)) => assert_eq!(why, "it answered 200 InternalError"),
        other => panic!("expected the store unavailable (503 to the client), got {other:?}"),
    }
    assert_eq!(completions(&store).len(), 3, "the policy's three attempts");
}

#[test]
fn invalid_part_in_a_200_answer_fails_with_invalid_part_and_is_not_retried() {
    let store = store_failing(200, "InvalidPart", 1);
    match complete(gateway(&store).as_ref()) {
        Err(StorageError::InvalidPart) => {}
        other => panic!("InvalidPart in a 200 answer: expected InvalidPart, got {other:?}"),
    }
    assert_eq!(
        completions(&store).len(),
        1,
        "a permanent error is not retried"
    );
}
