//! S3 requests through the project's S3 client (`hipobj-s3client`: SigV4, every header we add is
//! in SignedHeaders, the RDMA token included; key encoding; `reqwest`'s blocking client; the
//! shared operations of `hipobj_s3client::ops`, with their answers' errors classified there),
//! sent from a chosen local address (the RDMA NIC's, so the server sees the same address in the
//! HTTP peer and in the token's GID).

use crate::checksum::{CrcAlgo, ObjectChecksum, Unchecked};
use crate::client::credentials::Credentials;
use crate::client::failure::{Failure, Retryable};
use crate::engine::{CompletedPart, ErrorClass, PartHead, Retrier, RetryPolicy};
use crate::rcv2::negotiate::{Choice, Negotiation};
pub use hipobj_s3client::http::Answer;
use hipobj_s3client::http::{error_chain, Body, Outgoing};
use hipobj_s3client::ops::error::ErrorAnswer;
use hipobj_s3client::ops::multipart::{self, PartEtag};
use hipobj_s3client::ops::{list, OpRequest};
use hipobj_s3client::path::object_path;
use hipobj_s3client::reqwest::blocking::{Client, RequestBuilder};
use hipobj_s3client::reqwest::{self, Certificate};
use hipobj_s3client::sign::Signer;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

/// Longer than the server's RDMA retry window (docs/protocol.md rule 5.7), long enough for large
/// plain-HTTP bodies on a slow lane.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// `s3://bucket/key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectPath {
    pub bucket: String,
    pub key: String,
}

impl ObjectPath {
    /// `Some` for an `s3://` argument (which must then name a bucket and a key).
    pub fn parse(arg: &str) -> Option<Result<ObjectPath, Failure>> {
        let rest = arg.strip_prefix("s3://")?;
        Some(match rest.split_once('/') {
            Some((b, k)) if !b.is_empty() && !k.is_empty() => Ok(ObjectPath {
                bucket: b.to_owned(),
                key: k.to_owned(),
            }),
            _ => Err(Failure::Usage(format!("{arg}: expected s3://BUCKET/KEY"))),
        })
    }
}

impl std::fmt::Display for ObjectPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.key)
    }
}

/// The full-object CRC of an object a download is checked against, or why there is none.
pub type StoredChecksum = Result<ObjectChecksum, Unchecked>;

/// `Ok` for a 2xx, else the failure the server's answer stands for (`what` names it).
fn check_success(answer: &Answer, what: &str) -> Result<(), Failure> {
    match ErrorAnswer::of_failure(answer) {
        Some(e) => Err(Failure::of_reply(&e.reply, what)),
        None => Ok(()),
    }
}

/// The trust roots of an endpoint's TLS.
enum Roots {
    /// http: no TLS, so no certificates are read (reading the system's roots took about 1 s per
    /// HTTP client in the lane, twice per copy: one client per local address).
    None,
    /// https with the system's roots.
    System,
    /// https with the certificates of `--ca-bundle` (or `AWS_CA_BUNDLE`) only.
    Bundle(Vec<Certificate>),
}

/// An S3 endpoint with its credentials.
pub struct S3 {
    endpoint: String,
    credentials: Credentials,
    /// Which certificates an https endpoint is checked against (an http one needs none).
    roots: Roots,
    /// One connection pool per local address.
    clients: Mutex<HashMap<Option<IpAddr>, Client>>,
    /// The RDMA protocol choice, and what this endpoint was found to speak (docs/protocol.md 10.1).
    negotiation: Negotiation,
    /// How every request of a command is retried: standard mode, `AWS_MAX_ATTEMPTS` attempts.
    retry: RetryPolicy,
}

/// Standard mode's retries, with the AWS CLI's `AWS_MAX_ATTEMPTS` override of its 3 attempts.
fn retry_policy_from_env() -> RetryPolicy {
    let mut policy = RetryPolicy::standard();
    if let Some(n) = std::env::var("AWS_MAX_ATTEMPTS")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|&n| n >= 1)
    {
        policy.max_attempts = n;
    }
    policy
}

/// The certificates of a PEM bundle (at least one).
fn ca_bundle(path: &std::path::Path) -> Result<Vec<Certificate>, Failure> {
    let text = std::fs::read(path)
        .map_err(|e| Failure::Usage(format!("--ca-bundle {}: {e}", path.display())))?;
    let certs = Certificate::from_pem_bundle(&text)
        .map_err(|e| Failure::Usage(format!("--ca-bundle {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(Failure::Usage(format!(
            "--ca-bundle {}: no PEM certificate in the file",
            path.display()
        )));
    }
    Ok(certs)
}

impl S3 {
    pub fn new(endpoint: &str, credentials: Credentials) -> Result<S3, Failure> {
        let endpoint = endpoint.trim_end_matches('/').to_owned();
        let url = reqwest::Url::parse(&endpoint)
            .map_err(|e| Failure::Usage(format!("--endpoint {endpoint}: {e}")))?;
        if url.host_str().is_none() || !matches!(url.scheme(), "http" | "https") {
            return Err(Failure::Usage(format!(
                "--endpoint {endpoint}: expected http://HOST:PORT or https://HOST:PORT"
            )));
        }
        let roots = match (url.scheme(), &credentials.ca_bundle) {
            ("http", _) => Roots::None,
            (_, Some(path)) => Roots::Bundle(ca_bundle(path)?),
            (_, None) => Roots::System,
        };
        Ok(S3 {
            endpoint,
            credentials,
            roots,
            clients: Mutex::new(HashMap::new()),
            negotiation: Negotiation::default(),
            retry: retry_policy_from_env(),
        })
    }

    /// How this command's requests are retried.
    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.retry
    }

    /// The RDMA protocol to use (`v1`, `v2`, or negotiated: `auto`).
    pub fn with_protocol(mut self, choice: Choice) -> S3 {
        self.negotiation = Negotiation::new(choice);
        self
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn negotiation(&self) -> &Negotiation {
        &self.negotiation
    }

    fn client(&self, local: Option<IpAddr>) -> Result<Client, Failure> {
        let mut clients = self
            .clients
            .lock()
            .map_err(|_| Failure::Transfer("HTTP client table poisoned".into()))?;
        if let Some(c) = clients.get(&local) {
            return Ok(c.clone());
        }
        let mut builder = Client::builder()
            .local_address(local)
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(10));
        match &self.roots {
            Roots::System => {}
            Roots::None => builder = builder.tls_built_in_root_certs(false),
            Roots::Bundle(roots) => {
                builder = builder.tls_built_in_root_certs(false);
                for cert in roots {
                    builder = builder.add_root_certificate(cert.clone());
                }
            }
        }
        let c = builder
            .build()
            .map_err(|e| Failure::Http(format!("cannot build the HTTP client: {e}")))?;
        clients.insert(local, c.clone());
        Ok(c)
    }

    /// The URL of a bucket (`key` None) or object.
    pub fn url(&self, bucket: &str, key: Option<&str>) -> String {
        format!(
            "{}{}",
            self.endpoint,
            object_path(bucket, key.unwrap_or(""))
        )
    }

    /// One signed request from `local` (None: the system's choice). Any status is returned; only
    /// a failure to reach the server is an error.
    pub fn request(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
        local: Option<IpAddr>,
    ) -> Result<Answer, Failure> {
        let req = self.build(method, url, headers, body, local)?;
        send(req, method, url, local)
    }

    /// A signed request from `local`, ready to [`send`] (on any thread).
    pub fn build(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
        local: Option<IpAddr>,
    ) -> Result<RequestBuilder, Failure> {
        let signer = self.credentials.keys.as_ref().map(|k| Signer {
            access_key: &k.access_key,
            secret_key: &k.secret_key,
            session_token: k.session_token.as_deref(),
            region: &self.credentials.region,
        });
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        // Bodies are not hashed (large PUTs would pay for it twice): UNSIGNED-PAYLOAD.
        let body = if body.is_empty() {
            Body::Empty
        } else {
            Body::Bytes {
                data: body,
                hashed: false,
            }
        };
        let req = Outgoing {
            method,
            url,
            headers: &headers,
            body,
        };
        hipobj_s3client::http::build(&self.client(local)?, signer.as_ref(), req)
            .map_err(|e| Failure::Usage(e.to_string()))
    }

    /// HEAD of an object (retried): its size.
    pub fn object_size(&self, obj: &ObjectPath) -> Result<u64, Failure> {
        self.object_head(obj).map(|(size, _)| size)
    }

    /// HEAD of an object with its checksums asked for (`x-amz-checksum-mode: ENABLED`,
    /// retried): its size, and the full-object CRC a download is checked against (or why there
    /// is none).
    pub fn object_head(&self, obj: &ObjectPath) -> Result<(u64, StoredChecksum), Failure> {
        let url = self.url(&obj.bucket, Some(&obj.key));
        let what = || format!("HEAD {obj}");
        let mode = [("x-amz-checksum-mode", "ENABLED".to_owned())];
        let r = self
            .call_retried("HEAD", &url, &mode, &what)
            .map_err(|f| self.explain_head(&url, &what(), f))?;
        let size = r
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| Failure::Http(format!("HEAD {obj}: no Content-Length")))?;
        let checksum = ObjectChecksum::from_headers(|n| r.header(n).map(str::to_owned));
        Ok((size, checksum))
    }

    /// HEAD of an object (`key`) or a bucket (`None`), retried while the answer is retryable (no
    /// answer, a 5xx, a 429): the last status a reply carried (0: none came), and the object's
    /// length on success (0 for a bucket). A refusal names its cause by status (a HEAD's answer
    /// has no body).
    pub fn head(&self, bucket: &str, key: Option<&str>) -> (u16, Result<u64, Failure>) {
        let url = self.url(bucket, key);
        let what = || match key {
            Some(key) => format!("HEAD s3://{bucket}/{key}"),
            None => format!("HEAD bucket {bucket}"),
        };
        let status = std::cell::Cell::new(0u16);
        let never = std::sync::atomic::AtomicBool::new(false);
        let answer = Retrier::with_policy(&self.retry, &never).run(&what, || {
            let r = self
                .request("HEAD", &url, &[], Vec::new(), None)
                .map_err(|failure| Retryable::new(failure, ErrorClass::Transient))?;
            status.set(r.status);
            if (200..300).contains(&r.status) {
                return Ok(r);
            }
            let class = ErrorClass::of_status(r.status, None);
            Err(Retryable::new(
                head_refused(&what(), r.status, key.is_none()),
                class,
            ))
        });
        let size = answer.map_err(|r| r.failure).map(|r| {
            r.header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        });
        (status.get(), size)
    }

    /// HEAD of part `number` of a multipart object with its checksums asked for (`partNumber`,
    /// `x-amz-checksum-mode: ENABLED`; one request, classified for the engine's retry): the
    /// part's length and its own stored checksum.
    pub fn part_head(&self, obj: &ObjectPath, number: u32) -> Result<PartHead, Retryable> {
        let url = format!(
            "{}?partNumber={number}",
            self.url(&obj.bucket, Some(&obj.key))
        );
        let what = || format!("HEAD {obj} part {number}");
        let mode = [("x-amz-checksum-mode", "ENABLED".to_owned())];
        let r = self.call("HEAD", &url, &mode, Vec::new(), &what)?;
        let len = r
            .header("content-length")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                let failure = Failure::Http(format!("{}: no Content-Length", what()));
                Retryable::new(failure, ErrorClass::Fatal)
            })?;
        let checksum = ObjectChecksum::of_part(|n| r.header(n).map(str::to_owned));
        Ok(PartHead { len, checksum })
    }

    /// A HEAD's answer has no body, so a refused HEAD names no S3 error: ask the same object with
    /// a one-byte GET, whose refusal does (`NoSuchBucket` or `NoSuchKey`, a signature refused).
    /// Only on the failure path; the HEAD's failure stands if the GET tells no more.
    fn explain_head(&self, url: &str, what: &str, failure: Failure) -> Failure {
        if !matches!(failure, Failure::NotFound(_) | Failure::AuthRefused(_)) {
            return failure;
        }
        let range = [("range", "bytes=0-0".to_owned())];
        match self.request("GET", url, &range, Vec::new(), None) {
            Ok(r) if !(200..300).contains(&r.status) => match r.error() {
                Some(e) if e.code.is_some() => Failure::of_reply(&e, what),
                _ => failure,
            },
            _ => failure,
        }
    }

    /// Create a bucket unless it exists (and is ours).
    pub fn ensure_bucket(&self, bucket: &str) -> Result<(), Failure> {
        let url = self.url(bucket, None);
        let r = self.request("HEAD", &url, &[], Vec::new(), None)?;
        if r.status == 200 {
            return Ok(());
        }
        let r = self.request("PUT", &url, &[], Vec::new(), None)?;
        check_success(&r, &format!("create bucket {bucket}"))
    }

    /// Plain-HTTP GET (optionally a byte range `first..=last`): the body.
    pub fn get_plain(
        &self,
        obj: &ObjectPath,
        range: Option<(u64, u64)>,
    ) -> Result<Vec<u8>, Failure> {
        let url = self.url(&obj.bucket, Some(&obj.key));
        let headers: Vec<(&str, String)> = range
            .map(|(a, b)| vec![("range", format!("bytes={a}-{b}"))])
            .unwrap_or_default();
        let r = self.request("GET", &url, &headers, Vec::new(), None)?;
        check_success(&r, &format!("GET {obj}"))?;
        Ok(r.body)
    }

    /// [`S3::call`] without a body, retried by this command's policy (a server restarting, a
    /// dropped connection, a 503 SlowDown: as the AWS CLI retries every request).
    fn call_retried(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, String)],
        what: &dyn Fn() -> String,
    ) -> Result<Answer, Failure> {
        let never = std::sync::atomic::AtomicBool::new(false);
        Retrier::with_policy(&self.retry, &never)
            .run(what, || self.call(method, url, headers, Vec::new(), what))
            .map_err(|r| r.failure)
    }

    /// A request whose non-2xx answer is a failure, classified for a retry.
    fn call(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
        what: &dyn Fn() -> String,
    ) -> Result<Answer, Retryable> {
        let r = self
            .request(method, url, headers, body, None)
            .map_err(|failure| Retryable::new(failure, ErrorClass::Transient))?;
        match ErrorAnswer::of_failure(&r) {
            Some(e) => Err(Retryable::of_error(&e, &what())),
            None => Ok(r),
        }
    }

    /// [`S3::call`] of one request of the shared operations (`hipobj_s3client::ops`).
    fn call_op(&self, op: &OpRequest, what: &dyn Fn() -> String) -> Result<Answer, Retryable> {
        let headers: Vec<(&str, String)> = op
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.clone()))
            .collect();
        let url = op.url(&self.endpoint);
        self.call(op.method, &url, &headers, op.body.clone(), what)
    }

    /// CreateMultipartUpload, with `checksum` as the upload's FULL_OBJECT algorithm: the upload
    /// id.
    pub fn create_upload(
        &self,
        obj: &ObjectPath,
        checksum: Option<CrcAlgo>,
    ) -> Result<String, Retryable> {
        let what = || format!("CreateMultipartUpload {obj}");
        let headers: Vec<(String, String)> = match checksum {
            Some(algo) => vec![
                ("x-amz-checksum-algorithm".into(), algo.as_str().into()),
                ("x-amz-checksum-type".into(), "FULL_OBJECT".into()),
            ],
            None => Vec::new(),
        };
        let request = multipart::create(&obj.bucket, &obj.key, headers);
        let r = self.call_op(&request, &what)?;
        multipart::upload_id(&r.body).map_err(|e| {
            Retryable::new(Failure::Http(format!("{}: {e}", what())), ErrorClass::Fatal)
        })
    }

    /// CompleteMultipartUpload with the parts' numbers and ETags, and the whole object's checksum
    /// when known (the server compares it with what it assembled). An error the server put in a
    /// 200 answer is a failure too, classified by its code.
    pub fn complete_upload(
        &self,
        obj: &ObjectPath,
        upload_id: &str,
        parts: &[CompletedPart],
        checksum: Option<ObjectChecksum>,
    ) -> Result<(), Retryable> {
        let what = || format!("CompleteMultipartUpload {obj}");
        let parts = parts.iter().map(|p| PartEtag::new(p.number, &p.etag));
        let headers: Vec<(String, String)> = checksum
            .map(|c| (c.algo.header().to_owned(), c.encoded()))
            .into_iter()
            .collect();
        let request = multipart::complete(&obj.bucket, &obj.key, upload_id, parts, headers);
        let r = self.call_op(&request, &what)?;
        multipart::completion_outcome(&r).map_err(|e| Retryable::of_error(&e, &what()))
    }

    /// AbortMultipartUpload.
    pub fn abort_upload(&self, obj: &ObjectPath, upload_id: &str) -> Result<(), Retryable> {
        let request = multipart::abort(&obj.bucket, &obj.key, upload_id);
        self.call_op(&request, &|| format!("AbortMultipartUpload {obj}"))
            .map(drop)
    }

    /// Every object under `prefix` of `bucket`: (key, size), by ListObjectsV2 pages (each
    /// retried).
    pub fn list(&self, bucket: &str, prefix: &str) -> Result<Vec<(String, u64)>, Failure> {
        let what = || format!("ListObjectsV2 s3://{bucket}/{prefix}");
        let never = std::sync::atomic::AtomicBool::new(false);
        let retrier = Retrier::with_policy(&self.retry, &never);
        let listed = list::objects(bucket, prefix, |request| {
            retrier
                .run(&what, || self.call_op(&request, &what))
                .map(|r| r.body)
                .map_err(|r| r.failure)
        })?;
        Ok(listed.into_iter().map(|o| (o.key, o.size)).collect())
    }

    /// Bytes `first ..= last` of an object over plain HTTP (one ranged GET, its failure
    /// classified for a retry). S3 names no checksum for a range: the bytes are not checked here.
    pub fn get_range(&self, obj: &ObjectPath, first: u64, last: u64) -> Result<Vec<u8>, Retryable> {
        let url = self.url(&obj.bucket, Some(&obj.key));
        let what = || format!("GET {obj} bytes {first}-{last}");
        let range = [("range", format!("bytes={first}-{last}"))];
        let r = self.call("GET", &url, &range, Vec::new(), &what)?;
        if !(200..300).contains(&r.status) {
            let failure = Failure::Http(format!("{}: HTTP {}", what(), r.status));
            return Err(Retryable::new(
                failure,
                ErrorClass::of_status(r.status, None),
            ));
        }
        Ok(r.body)
    }

    /// A PUT of `body` over plain HTTP (an UploadPart with `query`, see
    /// [`multipart::part_query`]), with the checksum header of its bytes when given: the ETag
    /// the server answered.
    pub fn put_body(
        &self,
        obj: &ObjectPath,
        query: &str,
        body: Vec<u8>,
        checksum: Option<ObjectChecksum>,
    ) -> Result<Option<String>, Retryable> {
        let url = format!("{}{query}", self.url(&obj.bucket, Some(&obj.key)));
        let what = || format!("PUT {obj}{query}");
        let mut headers = vec![("content-type", "application/octet-stream".to_owned())];
        headers.extend(checksum.map(|c| (c.algo.header(), c.encoded())));
        let r = self.call("PUT", &url, &headers, body, &what)?;
        if !(200..300).contains(&r.status) {
            let failure = Failure::Http(format!("{}: HTTP {}", what(), r.status));
            return Err(Retryable::new(
                failure,
                ErrorClass::of_status(r.status, None),
            ));
        }
        Ok(r.header("etag").map(str::to_owned))
    }

    /// Plain-HTTP PUT of `body`.
    pub fn put_plain(&self, obj: &ObjectPath, body: Vec<u8>) -> Result<(), Failure> {
        let url = self.url(&obj.bucket, Some(&obj.key));
        let headers = [("content-type", "application/octet-stream".to_owned())];
        let r = self.request("PUT", &url, &headers, body, None)?;
        check_success(&r, &format!("PUT {obj}"))
    }
}

/// A HEAD refused with `status`, in words that name the likely cause.
fn head_refused(what: &str, status: u16, bucket: bool) -> Failure {
    match status {
        404 if bucket => Failure::NotFound(format!("{what}: HTTP 404 (no such bucket)")),
        404 => Failure::NotFound(format!("{what}: HTTP 404 (no such bucket or key)")),
        403 => Failure::AuthRefused(format!(
            "{what}: HTTP 403 (access denied: check the access and secret key)"
        )),
        _ => Failure::Http(format!("{what}: HTTP {status}")),
    }
}

/// Send a request made by [`S3::build`]: its answer, whatever the status.
pub fn send(
    req: RequestBuilder,
    method: &str,
    url: &str,
    local: Option<IpAddr>,
) -> Result<Answer, Failure> {
    let resp = req.send().map_err(|e| {
        let from = local.map(|a| format!(" from {a}")).unwrap_or_default();
        Failure::Http(format!("{method} {url}{from}: {}", error_chain(&e)))
    })?;
    Answer::read(resp).map_err(|e| Failure::Http(format!("{method} {url}: reading the body: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A server that answers each connection's first request with the next of `answers`.
    fn scripted(answers: Vec<&'static str>) -> (String, std::thread::JoinHandle<usize>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let server = std::thread::spawn(move || {
            let mut served = 0;
            for answer in answers {
                let (mut conn, _) = listener.accept().expect("accept");
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                conn.write_all(answer.as_bytes()).expect("answer");
                served += 1;
            }
            served
        });
        (url, server)
    }

    /// An anonymous client of `url`, and the object `s3://b/k`.
    fn anonymous(url: &str) -> (S3, ObjectPath) {
        let creds = Credentials {
            keys: None,
            region: "us-east-1".into(),
            ca_bundle: None,
        };
        let s3 = S3::new(url, creds).expect("endpoint");
        (s3, ObjectPath::parse("s3://b/k").unwrap().unwrap())
    }

    #[test]
    fn a_head_answered_503_is_retried() {
        let (url, server) = scripted(vec![
            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 42\r\nConnection: close\r\n\r\n",
        ]);
        let (s3, obj) = anonymous(&url);
        assert_eq!(s3.object_size(&obj).expect("retried"), 42);
        assert_eq!(
            server.join().expect("server"),
            2,
            "two requests: the 503 and its retry"
        );
    }

    /// Revision 5, rule 4: the retry after a 503 waits at least its Retry-After (2 s here; the
    /// first retry's backoff alone is under 1 s).
    #[test]
    fn a_retry_after_503_waits_at_least_retry_after() {
        let (url, server) = scripted(vec![
            "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 2\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 42\r\nConnection: close\r\n\r\n",
        ]);
        let (s3, obj) = anonymous(&url);
        let started = std::time::Instant::now();
        assert_eq!(s3.object_size(&obj).expect("retried"), 42);
        let waited = started.elapsed();
        assert!(waited >= std::time::Duration::from_secs(2), "{waited:?}");
        assert_eq!(server.join().expect("server"), 2);
    }

    /// CompleteMultipartUpload answered `200` with an error document: a failure, classified by
    /// its code through the shared layer (`SlowDown` retried, `InvalidPart` final).
    #[test]
    fn a_completion_failed_inside_a_200_is_classified_by_its_code() {
        let (url, server) = scripted(vec![
            "HTTP/1.1 200 OK\r\nContent-Length: 56\r\nConnection: close\r\n\r\n\
             <Error><Code>SlowDown</Code><Message>m</Message></Error>",
            "HTTP/1.1 200 OK\r\nContent-Length: 59\r\nConnection: close\r\n\r\n\
             <Error><Code>InvalidPart</Code><Message>m</Message></Error>",
        ]);
        let (s3, obj) = anonymous(&url);
        let parts = [CompletedPart {
            number: 1,
            etag: "\"e1\"".into(),
        }];
        let slow = s3
            .complete_upload(&obj, "up-1", &parts, None)
            .expect_err("SlowDown inside a 200");
        assert_eq!(slow.class, ErrorClass::Throttling);
        let invalid = s3
            .complete_upload(&obj, "up-1", &parts, None)
            .expect_err("InvalidPart inside a 200");
        assert_eq!(invalid.class, ErrorClass::Fatal);
        assert_eq!(
            invalid.to_string(),
            "HTTP: CompleteMultipartUpload s3://b/k: InvalidPart: m (200)"
        );
        assert_eq!(server.join().expect("server"), 2);
    }

    /// A refused HEAD has no body: the message is the one-byte GET's S3 error.
    #[test]
    fn a_refused_head_is_explained_by_the_servers_error() {
        let (url, server) = scripted(vec![
            "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 404 Not Found\r\nContent-Length: 94\r\nConnection: close\r\n\r\n\
             <Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>",
        ]);
        let (s3, obj) = anonymous(&url);
        let f = s3.object_size(&obj).expect_err("404");
        assert_eq!(f.code(), 6);
        assert_eq!(
            f.to_string(),
            "not found: HEAD s3://b/k: NoSuchBucket: The specified bucket does not exist (404)"
        );
        assert_eq!(server.join().expect("server"), 2);
    }

    #[test]
    fn only_an_https_endpoint_reads_its_ca_bundle() {
        let creds = Credentials {
            keys: None,
            region: "us-east-1".into(),
            ca_bundle: Some("/nonexistent/ca.pem".into()),
        };
        let http = S3::new("http://127.0.0.1:9", creds.clone()).expect("http reads no bundle");
        assert!(matches!(http.roots, Roots::None));
        assert!(
            S3::new("https://127.0.0.1:9", creds).is_err(),
            "https reads the bundle, and this one is missing"
        );
    }

    #[test]
    fn object_paths() {
        let p = ObjectPath::parse("s3://b/dir/k").unwrap().unwrap();
        assert_eq!((p.bucket.as_str(), p.key.as_str()), ("b", "dir/k"));
        assert!(ObjectPath::parse("s3://b").unwrap().is_err());
        assert!(ObjectPath::parse("s3:///k").unwrap().is_err());
        assert!(ObjectPath::parse("./file").is_none());
    }

    #[test]
    fn object_urls_are_percent_encoded() {
        let (s3, _) = anonymous("http://127.0.0.1:9");
        assert_eq!(
            s3.url("b", Some("a b/c+d~")),
            "http://127.0.0.1:9/b/a%20b/c%2Bd~"
        );
        assert_eq!(s3.url("b", None), "http://127.0.0.1:9/b");
    }
}
