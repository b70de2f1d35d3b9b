//! The S3 core through s3s's HTTP layer (no RDMA, no authentication): status codes, headers and
//! bodies as a client sees them.

use std::sync::Arc;

use bytes::Bytes;
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::Body;

use super::HipobjS3;
use crate::backend::{Backend, FsBackend};
use crate::stats::Stats;

struct Server {
    _dir: tempfile::TempDir,
    service: S3Service,
}

fn server() -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn Backend> = Arc::new(FsBackend::open(dir.path()).expect("storage"));
    let stats = Arc::new(Stats::default());
    let mut builder = S3ServiceBuilder::new(HipobjS3::new(
        Arc::clone(&storage),
        None,
        Arc::clone(&stats),
    ));
    // Anonymous, as `--anonymous` serves (the access hook still runs).
    builder.set_auth(crate::credentials::CredentialsTable::default());
    builder.set_access(crate::access::AccessPolicy::new(storage, stats, true, true));
    Server {
        _dir: dir,
        service: builder.build(),
    }
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Bytes,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

async fn call(
    s: &Server,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    let mut req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "localhost");
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let mut req = req.body(Body::from(body.to_vec())).expect("request");
    req.extensions_mut()
        .insert(crate::identity::HttpPeer([127, 0, 0, 1].into()));
    let resp = s.service.call(req).await.expect("response");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut body = resp.into_body();
    let body = body.store_all_limited(1 << 26).await.expect("body");
    Answer {
        status,
        headers,
        body,
    }
}

/// The text between `<tag>` and `</tag>`, every occurrence.
fn tags(xml: &str, tag: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    xml.split(&open)
        .skip(1)
        .filter_map(|s| s.split(&close).next().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_upload_by_http_body() {
    let s = server();
    assert_eq!(call(&s, "PUT", "/bkt", &[], b"").await.status, 200);
    let created = call(
        &s,
        "POST",
        "/bkt/big?uploads",
        &[("content-type", "text/x")],
        b"",
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.text());
    let id = tags(&created.text(), "UploadId").remove(0);
    let part1 = vec![1u8; 5 * 1024 * 1024];
    let p1 = call(
        &s,
        "PUT",
        &format!("/bkt/big?partNumber=1&uploadId={id}"),
        &[],
        &part1,
    )
    .await;
    assert_eq!(p1.status, 200, "{}", p1.text());
    let p2 = call(
        &s,
        "PUT",
        &format!("/bkt/big?partNumber=2&uploadId={id}"),
        &[],
        b"tail",
    )
    .await;
    let (e1, e2) = (
        p1.header("etag").expect("etag"),
        p2.header("etag").expect("etag"),
    );
    let listed = call(&s, "GET", &format!("/bkt/big?uploadId={id}"), &[], b"").await;
    assert_eq!(tags(&listed.text(), "PartNumber"), ["1", "2"]);
    let uploads = call(&s, "GET", "/bkt?uploads", &[], b"").await;
    assert_eq!(tags(&uploads.text(), "UploadId"), std::slice::from_ref(&id));
    // Parts out of order: 400 InvalidPartOrder, nothing stored.
    let wrong = format!(
        "<CompleteMultipartUpload><Part><PartNumber>2</PartNumber><ETag>{e2}</ETag></Part>\
         <Part><PartNumber>1</PartNumber><ETag>{e1}</ETag></Part></CompleteMultipartUpload>"
    );
    let refused = call(
        &s,
        "POST",
        &format!("/bkt/big?uploadId={id}"),
        &[],
        wrong.as_bytes(),
    )
    .await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.text().contains("InvalidPartOrder"),
        "{}",
        refused.text()
    );
    assert_eq!(call(&s, "HEAD", "/bkt/big", &[], b"").await.status, 404);
    let right = format!(
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{e1}</ETag></Part>\
         <Part><PartNumber>2</PartNumber><ETag>{e2}</ETag></Part></CompleteMultipartUpload>"
    );
    let done = call(
        &s,
        "POST",
        &format!("/bkt/big?uploadId={id}"),
        &[],
        right.as_bytes(),
    )
    .await;
    assert_eq!(done.status, 200, "{}", done.text());
    let etag = tags(&done.text(), "ETag").remove(0);
    assert!(etag.trim_end_matches('"').ends_with("-2"), "{etag}");
    let got = call(&s, "GET", "/bkt/big", &[], b"").await;
    assert_eq!(got.body.len(), part1.len() + 4);
    assert_eq!(&got.body[part1.len()..], b"tail");
    assert_eq!(got.header("content-type"), Some("text/x"));
    let part2 = call(&s, "GET", "/bkt/big?partNumber=2", &[], b"").await;
    assert_eq!(part2.status, 206);
    assert_eq!(&part2.body[..], b"tail");
    assert_eq!(part2.header("x-amz-mp-parts-count"), Some("2"));
    // Aborting an unknown upload: 404 NoSuchUpload.
    let gone = call(&s, "DELETE", "/bkt/big?uploadId=00ff", &[], b"").await;
    assert_eq!(gone.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_conditions_copy_and_refusals() {
    let s = server();
    call(&s, "PUT", "/bkt", &[], b"").await;
    let put = call(
        &s,
        "PUT",
        "/bkt/k",
        &[
            ("x-amz-meta-color", "blue"),
            ("content-type", "text/plain"),
            ("cache-control", "no-cache"),
            // CRC32 of "hello" is 0x3610a686.
            ("x-amz-checksum-crc32", "NhCmhg=="),
        ],
        b"hello",
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.text());
    let etag = put.header("etag").expect("etag").to_string();
    let head = call(
        &s,
        "HEAD",
        "/bkt/k",
        &[("x-amz-checksum-mode", "ENABLED")],
        b"",
    )
    .await;
    assert_eq!(head.header("x-amz-meta-color"), Some("blue"));
    assert_eq!(head.header("cache-control"), Some("no-cache"));
    assert_eq!(head.header("x-amz-checksum-crc32"), Some("NhCmhg=="));
    // A wrong checksum stores nothing.
    let bad = call(
        &s,
        "PUT",
        "/bkt/k",
        &[("x-amz-checksum-crc32", "AAAAAA==")],
        b"other",
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.text());
    assert_eq!(
        &call(&s, "GET", "/bkt/k", &[], b"").await.body[..],
        b"hello"
    );
    // Conditional reads.
    assert_eq!(
        call(&s, "GET", "/bkt/k", &[("if-none-match", &etag)], b"")
            .await
            .status,
        304
    );
    assert_eq!(
        call(&s, "GET", "/bkt/k", &[("if-match", "\"nope\"")], b"")
            .await
            .status,
        412
    );
    assert_eq!(
        call(&s, "GET", "/bkt/k", &[("if-match", &etag)], b"")
            .await
            .status,
        200
    );
    let old = "Mon, 01 Jan 2001 00:00:00 GMT";
    assert_eq!(
        call(&s, "GET", "/bkt/k", &[("if-unmodified-since", old)], b"")
            .await
            .status,
        412
    );
    assert_eq!(
        call(&s, "GET", "/bkt/k", &[("if-modified-since", old)], b"")
            .await
            .status,
        200
    );
    // Conditional write.
    let again = call(&s, "PUT", "/bkt/k", &[("if-none-match", "*")], b"x").await;
    assert_eq!(again.status, 412);
    // Copy keeps metadata unless replaced; copying onto itself needs REPLACE.
    let copied = call(&s, "PUT", "/bkt/c", &[("x-amz-copy-source", "/bkt/k")], b"").await;
    assert_eq!(copied.status, 200, "{}", copied.text());
    let c = call(&s, "GET", "/bkt/c", &[], b"").await;
    assert_eq!(&c.body[..], b"hello");
    assert_eq!(c.header("x-amz-meta-color"), Some("blue"));
    let itself = call(&s, "PUT", "/bkt/k", &[("x-amz-copy-source", "/bkt/k")], b"").await;
    assert_eq!(itself.status, 400);
    let replaced = call(
        &s,
        "PUT",
        "/bkt/c",
        &[
            ("x-amz-copy-source", "/bkt/k"),
            ("x-amz-metadata-directive", "REPLACE"),
            ("x-amz-meta-shape", "round"),
        ],
        b"",
    )
    .await;
    assert_eq!(replaced.status, 200);
    let c = call(&s, "HEAD", "/bkt/c", &[], b"").await;
    assert_eq!(c.header("x-amz-meta-shape"), Some("round"));
    assert_eq!(c.header("x-amz-meta-color"), None);
    // Encryption is refused, never stored as plaintext.
    let sse = call(
        &s,
        "PUT",
        "/bkt/secret",
        &[("x-amz-server-side-encryption", "aws:kms")],
        b"x",
    )
    .await;
    assert_eq!(sse.status, 501, "{}", sse.text());
    assert_eq!(call(&s, "HEAD", "/bkt/secret", &[], b"").await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_and_multi_delete() {
    let s = server();
    call(&s, "PUT", "/bkt", &[], b"").await;
    for key in ["a/1", "a/2", "b", "c d"] {
        assert_eq!(
            call(
                &s,
                "PUT",
                &format!("/bkt/{}", key.replace(' ', "%20")),
                &[],
                b"x"
            )
            .await
            .status,
            200
        );
    }
    let v1 = call(&s, "GET", "/bkt?delimiter=/&max-keys=2", &[], b"").await;
    let text = v1.text();
    assert_eq!(tags(&text, "Prefix")[1..], ["a/".to_string()]);
    assert_eq!(tags(&text, "Key"), ["b"]);
    assert_eq!(tags(&text, "NextMarker"), ["b"]);
    assert_eq!(tags(&text, "IsTruncated"), ["true"]);
    let next = call(
        &s,
        "GET",
        "/bkt?delimiter=/&marker=b&encoding-type=url",
        &[],
        b"",
    )
    .await;
    assert_eq!(tags(&next.text(), "Key"), ["c%20d"]);
    let versions = call(&s, "GET", "/bkt?versions", &[], b"").await;
    assert_eq!(tags(&versions.text(), "VersionId").len(), 4);
    assert!(tags(&versions.text(), "VersionId")
        .iter()
        .all(|v| v == "null"));
    let delete = b"<Delete><Object><Key>a/1</Key></Object><Object><Key>b</Key></Object></Delete>";
    let md5 = {
        use md5::{Digest, Md5};
        base64_simd::STANDARD.encode_to_string(Md5::digest(delete))
    };
    let deleted = call(&s, "POST", "/bkt?delete", &[("content-md5", &md5)], delete).await;
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    assert_eq!(tags(&deleted.text(), "Key"), ["a/1", "b"]);
    let left = call(&s, "GET", "/bkt", &[], b"").await;
    assert_eq!(tags(&left.text(), "Key"), ["a/2", "c d"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_tags() {
    let s = server();
    assert_eq!(call(&s, "PUT", "/bkt", &[], b"").await.status, 200);
    let put = call(
        &s,
        "PUT",
        "/bkt/o",
        &[("x-amz-tagging", "foo=bar&bar")],
        b"x",
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.text());
    let got = call(&s, "GET", "/bkt/o?tagging", &[], b"").await;
    assert_eq!(got.status, 200);
    assert_eq!(tags(&got.text(), "Key"), ["bar", "foo"]);
    assert_eq!(tags(&got.text(), "Value"), ["", "bar"]);
    let head = call(&s, "HEAD", "/bkt/o", &[], b"").await;
    assert_eq!(head.header("x-amz-tagging-count"), Some("2"));
    let get = call(&s, "GET", "/bkt/o", &[], b"").await;
    assert_eq!(get.header("x-amz-tagging-count"), Some("2"));
    assert_eq!(&get.body[..], b"x");

    // Eleven tags: 400 InvalidTag, and the stored set is unchanged.
    let eleven: String = (0..11)
        .map(|i| format!("<Tag><Key>k{i}</Key><Value>v</Value></Tag>"))
        .collect();
    let body = format!("<Tagging><TagSet>{eleven}</TagSet></Tagging>");
    let refused = call(&s, "PUT", "/bkt/o?tagging", &[], body.as_bytes()).await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert!(refused.text().contains("InvalidTag"));
    let got = call(&s, "GET", "/bkt/o?tagging", &[], b"").await;
    assert_eq!(tags(&got.text(), "Key"), ["bar", "foo"]);
    // A PUT with too many tags in its header stores nothing.
    let header: Vec<String> = (0..11).map(|i| format!("k{i}=v")).collect();
    let refused = call(
        &s,
        "PUT",
        "/bkt/p",
        &[("x-amz-tagging", &header.join("&"))],
        b"y",
    )
    .await;
    assert_eq!(refused.status, 400);
    assert_eq!(call(&s, "HEAD", "/bkt/p", &[], b"").await.status, 404);

    let body = b"<Tagging><TagSet><Tag><Key>a</Key><Value>1</Value></Tag></TagSet></Tagging>";
    assert_eq!(
        call(&s, "PUT", "/bkt/o?tagging", &[], body).await.status,
        200
    );
    let got = call(&s, "GET", "/bkt/o?tagging", &[], b"").await;
    assert_eq!(tags(&got.text(), "Key"), ["a"]);
    // Copies take the source's tags unless told to replace them.
    let copied = call(&s, "PUT", "/bkt/c", &[("x-amz-copy-source", "/bkt/o")], b"").await;
    assert_eq!(copied.status, 200, "{}", copied.text());
    let got = call(&s, "GET", "/bkt/c?tagging", &[], b"").await;
    assert_eq!(tags(&got.text(), "Key"), ["a"]);
    let replaced = call(
        &s,
        "PUT",
        "/bkt/r",
        &[
            ("x-amz-copy-source", "/bkt/o"),
            ("x-amz-tagging-directive", "REPLACE"),
            ("x-amz-tagging", "z=9"),
        ],
        b"",
    )
    .await;
    assert_eq!(replaced.status, 200, "{}", replaced.text());
    let got = call(&s, "GET", "/bkt/r?tagging", &[], b"").await;
    assert_eq!(tags(&got.text(), "Key"), ["z"]);

    assert_eq!(
        call(&s, "DELETE", "/bkt/o?tagging", &[], b"").await.status,
        204
    );
    let got = call(&s, "GET", "/bkt/o?tagging", &[], b"").await;
    assert!(tags(&got.text(), "Key").is_empty());
    assert_eq!(
        call(&s, "HEAD", "/bkt/o", &[], b"")
            .await
            .header("x-amz-tagging-count"),
        None
    );
    assert_eq!(
        call(&s, "GET", "/bkt/none?tagging", &[], b"").await.status,
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_lifecycle() {
    let s = server();
    assert_eq!(call(&s, "PUT", "/bkt", &[], b"").await.status, 200);
    let missing = call(&s, "GET", "/bkt?lifecycle", &[], b"").await;
    assert_eq!(missing.status, 404);
    assert!(missing.text().contains("NoSuchLifecycleConfiguration"));
    let rules = b"<LifecycleConfiguration><Rule><ID>r1</ID><Filter><Prefix>logs/</Prefix></Filter>\
<Status>Enabled</Status><Expiration><Days>3</Days></Expiration></Rule><Rule><Filter><Prefix>up/</Prefix>\
</Filter><Status>Disabled</Status><AbortIncompleteMultipartUpload><DaysAfterInitiation>2\
</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule></LifecycleConfiguration>";
    let put = call(&s, "PUT", "/bkt?lifecycle", &[], rules).await;
    assert_eq!(put.status, 200, "{}", put.text());
    let got = call(&s, "GET", "/bkt?lifecycle", &[], b"").await;
    assert_eq!(got.status, 200);
    let ids = tags(&got.text(), "ID");
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[0], "r1");
    assert!(!ids[1].is_empty(), "a rule without ID gets one");
    assert_eq!(tags(&got.text(), "Days"), ["3"]);

    // A refused configuration leaves the stored one as it was.
    let bad =
        b"<LifecycleConfiguration><Rule><ID>r1</ID><Prefix>a/</Prefix><Status>enabled</Status>\
<Expiration><Days>1</Days></Expiration></Rule></LifecycleConfiguration>";
    let refused = call(&s, "PUT", "/bkt?lifecycle", &[], bad).await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    let transition = b"<LifecycleConfiguration><Rule><ID>t</ID><Prefix>a/</Prefix><Status>Enabled</Status>\
<Transition><Days>1</Days><StorageClass>GLACIER</StorageClass></Transition></Rule></LifecycleConfiguration>";
    let refused = call(&s, "PUT", "/bkt?lifecycle", &[], transition).await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert!(refused.text().contains("InvalidStorageClass"));
    let got = call(&s, "GET", "/bkt?lifecycle", &[], b"").await;
    assert_eq!(tags(&got.text(), "ID")[0], "r1");

    assert_eq!(
        call(&s, "DELETE", "/bkt?lifecycle", &[], b"").await.status,
        204
    );
    assert_eq!(
        call(&s, "GET", "/bkt?lifecycle", &[], b"").await.status,
        404
    );
    // A bucket whose only content was its lifecycle configuration is empty.
    let put = call(&s, "PUT", "/bkt?lifecycle", &[], rules).await;
    assert_eq!(put.status, 200);
    assert_eq!(call(&s, "DELETE", "/bkt", &[], b"").await.status, 204);
}

/// A COMPOSITE CRC32C multipart object (the checksum of the parts' checksums, `<value>-<parts>`),
/// as S3 reports it and the client's one parser (`hipobj::checksum`) reads it: the whole
/// object's HEAD says COMPOSITE with the part count (no download can compute that value), and a
/// HEAD or GET with `partNumber` gives that part's own CRC32C, its length and
/// `x-amz-mp-parts-count`: what the transfer engine checks a download against, part by part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_composite_objects_parts_report_their_own_checksums() {
    use hipobj::checksum::{Composite, CrcAlgo, ObjectChecksum, Unchecked};
    let s = server();
    call(&s, "PUT", "/bkt", &[], b"").await;
    let created = call(
        &s,
        "POST",
        "/bkt/mp?uploads",
        &[
            ("x-amz-checksum-algorithm", "CRC32C"),
            ("x-amz-checksum-type", "COMPOSITE"),
        ],
        b"",
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.text());
    let id = tags(&created.text(), "UploadId").remove(0);
    let parts: [Vec<u8>; 2] = [vec![7u8; 5 * 1024 * 1024], b"the last part".to_vec()];
    let mut xml = String::from("<CompleteMultipartUpload>");
    for (i, data) in parts.iter().enumerate() {
        let n = i + 1;
        let uri = format!("/bkt/mp?partNumber={n}&uploadId={id}");
        let up = call(&s, "PUT", &uri, &[], data).await;
        assert_eq!(up.status, 200, "{}", up.text());
        let etag = up.header("etag").expect("etag");
        xml += &format!("<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>");
    }
    xml += "</CompleteMultipartUpload>";
    let done = call(
        &s,
        "POST",
        &format!("/bkt/mp?uploadId={id}"),
        &[],
        xml.as_bytes(),
    )
    .await;
    assert_eq!(done.status, 200, "{}", done.text());

    let mode = [("x-amz-checksum-mode", "ENABLED")];
    let read = |a: &Answer| {
        let h = a.headers.clone();
        move |n: &str| h.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned)
    };
    let whole = call(&s, "HEAD", "/bkt/mp", &mode, b"").await;
    assert_eq!(whole.header("x-amz-checksum-type"), Some("COMPOSITE"));
    let algo = CrcAlgo::Crc32c;
    assert_eq!(
        ObjectChecksum::from_headers(read(&whole)),
        Err(Unchecked::Composite(Composite {
            algo,
            parts: Some(2)
        }))
    );
    for (i, data) in parts.iter().enumerate() {
        for method in ["HEAD", "GET"] {
            let a = call(
                &s,
                method,
                &format!("/bkt/mp?partNumber={}", i + 1),
                &mode,
                b"",
            )
            .await;
            assert!(matches!(a.status, 200 | 206), "{method} part {}", i + 1);
            let len = data.len().to_string();
            assert_eq!(a.header("content-length"), Some(len.as_str()));
            assert_eq!(a.header("x-amz-mp-parts-count"), Some("2"));
            let own = ObjectChecksum {
                algo,
                value: algo.of(data),
            };
            assert_eq!(ObjectChecksum::of_part(read(&a)), Ok(own), "{method} {i}");
        }
    }
}

/// An upload that says `Content-Encoding: aws-chunked` (the AWS SDKs' streaming uploads with a
/// trailing checksum; NIXL's OBJ plugin through aws-sdk-cpp): the object keeps no `aws-chunked`
/// encoding, on HEAD and GET alike, and any other encoding sent beside it stays. (The framing
/// itself is decoded by s3s's SigV4 layer, which this anonymous harness does not run: the body
/// here is sent plain.)
#[tokio::test]
async fn aws_chunked_framing_is_not_the_objects_encoding() {
    let s = server();
    assert_eq!(call(&s, "PUT", "/bkt", &[], b"").await.status, 200);
    for (key, sent, kept) in [
        ("plain", "aws-chunked", None),
        ("gzip", "aws-chunked,gzip", Some("gzip")),
        ("br", "br", Some("br")),
    ] {
        let put = call(
            &s,
            "PUT",
            &format!("/bkt/{key}"),
            &[("content-encoding", sent)],
            b"hello",
        )
        .await;
        assert_eq!(put.status, 200, "{key}: {}", put.text());
        for method in ["HEAD", "GET"] {
            let got = call(&s, method, &format!("/bkt/{key}"), &[], b"").await;
            assert_eq!(got.status, 200, "{method} {key}");
            assert_eq!(got.header("content-encoding"), kept, "{method} {key}");
        }
    }
}

/// A range reports no checksum, as S3: not even one that covers the whole object (an SDK would
/// validate it; the library's clients check ranges otherwise). Without a range, the object's.
#[tokio::test]
async fn a_range_reports_no_checksum_even_of_the_whole_object() {
    let s = server();
    assert_eq!(call(&s, "PUT", "/bkt", &[], b"").await.status, 200);
    // CRC32 of "hello" is 0x3610a686.
    let put = call(
        &s,
        "PUT",
        "/bkt/k",
        &[("x-amz-checksum-crc32", "NhCmhg==")],
        b"hello",
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.text());
    for (range, reported) in [
        (None, true),
        (Some("bytes=0-4"), false),
        (Some("bytes=1-4"), false),
    ] {
        let mut headers = vec![("x-amz-checksum-mode", "ENABLED")];
        headers.extend(range.map(|r| ("range", r)));
        let got = call(&s, "GET", "/bkt/k", &headers, b"").await;
        assert!(matches!(got.status, 200 | 206), "{range:?}: {}", got.status);
        let crc = got.header("x-amz-checksum-crc32");
        assert_eq!(crc, reported.then_some("NhCmhg=="), "{range:?}");
    }
}
