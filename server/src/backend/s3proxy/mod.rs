//! `--backend s3://HOST:PORT`: the storage seam implemented by another S3 store (issue 14).
//!
//! Every call is one or a few S3 requests to the store, signed as the identity the gateway acts
//! for ([`Backend::acting_for`]: the requester of a token request, whose secret the gateway holds
//! in its credentials table, the same table as the store's), unsigned when serving anonymously.
//! The store therefore applies its own access rules to every byte the gateway moves. An identity
//! missing from that table fails closed: its calls are refused (403 `AccessDenied`) before any
//! byte reaches the store, never sent unsigned. Bytes stream: reads are ranged GETs pinned to the ETag seen at open
//! ([`reader::ProxySource`]), writes are PUTs (objects) or UploadParts whose body is fed while the
//! RDMA READs arrive ([`writer::StreamingPut`]); no object is ever held in memory. Plain S3
//! requests do not come here in gateway mode: they pass through untouched
//! ([`crate::passthrough`]).

mod client;
pub mod endpoint;
mod reader;
mod writer;

use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hipobj::engine::{Retrier, RetryPolicy};
use hipobj_s3client::ops::multipart::{self, PartEtag};
use hipobj_s3client::ops::xml::{self, Element};
use hipobj_s3client::ops::{etag, list};
use hipobj_s3client::reqwest::{self, blocking::Response};

use self::client::{
    object_path, query_value, Signing, StoreClient, StoreFailure, StoreKeys, StoreSession,
};
pub use self::endpoint::{Endpoint, EndpointError};
use self::reader::ProxySource;
use self::writer::{StreamingPut, Target};
use crate::credentials::Credentials;
use crate::identity::Identity;
use hipobj_s3client::http::Body;
use tracing::warn;

use super::{
    select_range, Backend, BucketInfo, Checksums, CompletedPart, ObjectInfo, ObjectMeta,
    ObjectReader, ObjectWriter, PartInfo, StorageError, StorageResult, UploadInfo, UploadOptions,
    WriteOptions,
};

/// Whose keys sign the requests to the store.
#[derive(Clone)]
pub enum Keyring {
    /// The identities of `--credentials` / `--access-key`: the same keys as at the store. The
    /// server's own live table: after a reload (SIGHUP) the next [`Backend::acting_for`] signs
    /// with the new keys; a view already handed out keeps the keys it was made with.
    Table(Credentials),
    /// `--anonymous`: requests to the store are unsigned.
    Anonymous,
}

pub struct S3ProxyBackend {
    keyring: Keyring,
    /// The store as this view reaches it (unsigned until [`Backend::acting_for`] names an
    /// identity).
    store: StoreSession,
    /// How a request the store failed with an error the SDKs retry is sent again
    /// ([`S3ProxyBackend::retried`]).
    retry: RetryPolicy,
}

/// How the gateway retries the store: the SDKs' three attempts, with a short backoff (the
/// gateway holds its client's request meanwhile; a client answered 503 retries on its own).
pub fn store_retry_policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        base: Duration::from_millis(100),
        max_backoff: Duration::from_secs(1),
        paced: false,
    }
}

impl S3ProxyBackend {
    /// The store at `endpoint` (SigV4 region `region`).
    pub fn new(endpoint: Endpoint, region: &str, keyring: Keyring) -> io::Result<S3ProxyBackend> {
        let client = Arc::new(StoreClient::new(endpoint, region.to_string())?);
        Ok(S3ProxyBackend {
            keyring,
            store: StoreSession {
                client,
                signing: Signing::Unsigned,
            },
            retry: store_retry_policy(),
        })
    }

    /// The same backend retrying the store by `policy` (tests: a backoff of milliseconds).
    pub fn with_retry(mut self, policy: RetryPolicy) -> S3ProxyBackend {
        self.retry = policy;
        self
    }

    pub fn endpoint(&self) -> &Endpoint {
        self.store.client.endpoint()
    }

    fn send(&self, method: &str, target: &str, body: Body) -> StorageResult<Response> {
        self.store.send(method, target, &[], body)
    }

    /// GET `target` and read its XML answer with root element `root`.
    fn get_xml<T>(
        &self,
        target: &str,
        root: &str,
        read: impl FnOnce(Element<'_, '_>) -> StorageResult<T>,
    ) -> StorageResult<T> {
        let body = self
            .send("GET", target, Body::Empty)?
            .bytes()
            .map_err(body_error)?;
        xml::read(&body, root, read)
    }

    /// Run `attempt` (one whole request to the store) again while it fails with an error the
    /// SDKs retry, by this backend's policy; the last failure as the seam's error.
    fn retried<T>(
        &self,
        what: &dyn Fn() -> String,
        attempt: impl FnMut() -> Result<T, StoreFailure>,
    ) -> StorageResult<T> {
        let never_cancelled = AtomicBool::new(false);
        Retrier::with_policy(&self.retry, &never_cancelled)
            .run(what, attempt)
            .map_err(StorageError::from)
    }

    /// A streaming PUT of `options.size` bytes to `target` in `bucket`. The bucket is asked for
    /// first, so that a missing bucket or a refused identity is answered (404, 403) before any
    /// pairing or RDMA; the PUT itself starts with the first byte.
    fn streaming_put(
        &self,
        bucket: &str,
        key: &str,
        target: String,
        options: WriteOptions,
    ) -> StorageResult<ObjectWriter> {
        let Some(len) = options.size else {
            return Err(StorageError::Io(io::Error::new(
                io::ErrorKind::Unsupported,
                "the S3 proxy backend needs the length before the first byte",
            )));
        };
        let mut headers = meta_headers(&options.meta);
        if let Some(md5) = &options.content_md5 {
            headers.push(("content-md5".into(), md5.clone()));
        }
        self.head_bucket(bucket)?;
        let to = Target {
            key: key.to_string(),
            target,
            headers,
            meta: options.meta,
        };
        Ok(Box::new(StreamingPut::new(self.store.clone(), to, len)))
    }
}

/// The standard object headers and `x-amz-meta-*` of `meta`, as request headers.
fn meta_headers(meta: &ObjectMeta) -> Vec<(String, String)> {
    let mut h = Vec::new();
    let fields = [
        ("content-type", &meta.content_type),
        ("content-encoding", &meta.content_encoding),
        ("content-disposition", &meta.content_disposition),
        ("content-language", &meta.content_language),
        ("cache-control", &meta.cache_control),
        ("expires", &meta.expires),
    ];
    for (name, value) in fields {
        if let Some(v) = value {
            h.push((name.to_string(), v.clone()));
        }
    }
    for (k, v) in &meta.user {
        h.push((format!("x-amz-meta-{k}"), v.clone()));
    }
    h
}

fn body_error(e: reqwest::Error) -> StorageError {
    StorageError::Io(io::Error::other(format!("reading the store's answer: {e}")))
}

/// How requests acting for `identity` reach the store: signed with its keys from the table,
/// unsigned when serving anonymously, and refused (fail closed) for an identity the table does not
/// hold: the gateway never sends a request it cannot sign as the requester.
fn signing_for(keyring: &Keyring, identity: &Identity) -> Signing {
    let Keyring::Table(credentials) = keyring else {
        return Signing::Unsigned;
    };
    // The table in use now: a reload by SIGHUP applies from the next view made.
    let table = credentials.current();
    match table.secret_of(identity.as_str()) {
        Some(secret) => Signing::As(StoreKeys {
            access_key: identity.to_string(),
            secret_key: secret.to_string(),
        }),
        None => {
            warn!(%identity, "identity not in the gateway's credentials table: refused unsent");
            Signing::UnknownIdentity(identity.to_string())
        }
    }
}

/// `ObjectInfo` from a HEAD/GET answer.
fn info_from_headers(key: &str, resp: &Response) -> StorageResult<ObjectInfo> {
    let headers = resp.headers();
    let header = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let size = header("content-length")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| StorageError::Io(io::Error::other("store sent no Content-Length")))?;
    let last_modified = header("last-modified")
        .and_then(|v| httpdate::parse_http_date(&v).ok())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let mut meta = ObjectMeta {
        content_type: header("content-type"),
        content_encoding: header("content-encoding"),
        content_disposition: header("content-disposition"),
        content_language: header("content-language"),
        cache_control: header("cache-control"),
        expires: header("expires"),
        ..Default::default()
    };
    for (name, value) in headers {
        if let (Some(k), Ok(v)) = (name.as_str().strip_prefix("x-amz-meta-"), value.to_str()) {
            meta.user.insert(k.to_string(), v.to_string());
        }
    }
    Ok(ObjectInfo {
        key: key.to_string(),
        size,
        etag: etag::unquoted(&header("etag").unwrap_or_default()).to_string(),
        last_modified,
        meta,
        checksums: Checksums::from_reply(header),
        parts: None,
        part_sizes: Vec::new(),
        part_checksums: Vec::new(),
    })
}

fn bucket_target(bucket: &str, query: &str) -> String {
    format!("{}?{query}", object_path(bucket, ""))
}

/// A timestamp of the store's XML (ISO 8601); the epoch when missing or unreadable.
fn timestamp(text: &str) -> SystemTime {
    s3s::dto::Timestamp::parse(s3s::dto::TimestampFormat::DateTime, text.trim())
        .ok()
        .map(|ts| SystemTime::from(time::OffsetDateTime::from(ts)))
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

impl Backend for S3ProxyBackend {
    fn acting_for(&self, identity: &Identity) -> Option<Arc<dyn Backend>> {
        Some(Arc::new(S3ProxyBackend {
            keyring: self.keyring.clone(),
            store: StoreSession {
                client: Arc::clone(&self.store.client),
                signing: signing_for(&self.keyring, identity),
            },
            retry: self.retry.clone(),
        }))
    }

    fn records_owners(&self) -> bool {
        false
    }

    fn create_bucket(&self, bucket: &str) -> StorageResult<()> {
        self.send("PUT", &object_path(bucket, ""), Body::Empty)
            .map(drop)
    }

    fn head_bucket(&self, bucket: &str) -> StorageResult<()> {
        match self.send("HEAD", &object_path(bucket, ""), Body::Empty) {
            Ok(_) => Ok(()),
            Err(StorageError::NoSuchKey) => Err(StorageError::NoSuchBucket),
            Err(e) => Err(e),
        }
    }

    fn delete_bucket(&self, bucket: &str) -> StorageResult<()> {
        self.send("DELETE", &object_path(bucket, ""), Body::Empty)
            .map(drop)
    }

    fn list_buckets(&self) -> StorageResult<Vec<BucketInfo>> {
        self.get_xml("/", "ListAllMyBucketsResult", |root| {
            let mut out: Vec<BucketInfo> = root
                .child("Buckets")
                .map(|b| {
                    b.all("Bucket")
                        .map(|e| BucketInfo {
                            name: e.text("Name"),
                            created: timestamp(&e.text("CreationDate")),
                        })
                        .collect()
                })
                .unwrap_or_default();
            out.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(out)
        })
    }

    /// Ownership is the store's (see [`Backend::records_owners`]): the proxy records none.
    fn bucket_owner(&self, bucket: &str) -> StorageResult<Option<String>> {
        self.head_bucket(bucket).map(|()| None)
    }

    fn set_bucket_owner(&self, _bucket: &str, _owner: &str) -> StorageResult<()> {
        Ok(())
    }

    fn open_read(
        &self,
        bucket: &str,
        key: &str,
        range: Option<&s3s::dto::Range>,
    ) -> StorageResult<ObjectReader> {
        let info = self.head_object(bucket, key)?;
        let selected = select_range(range, info.size)?;
        let source = ProxySource::new(
            self.store.clone(),
            object_path(bucket, key),
            info.etag.clone(),
            selected.clone(),
        );
        Ok(ObjectReader::new(info, selected, Box::new(source)))
    }

    /// The store's HEAD, asked for the object's checksums (`x-amz-checksum-mode: ENABLED`), which
    /// the gateway passes on: to its own HEAD and GET answers, and to an RDMA GET's (docs/protocol.md
    /// section 15).
    fn head_object(&self, bucket: &str, key: &str) -> StorageResult<ObjectInfo> {
        let mode = [("x-amz-checksum-mode".to_string(), "ENABLED".to_string())];
        let resp = self
            .store
            .send("HEAD", &object_path(bucket, key), &mode, Body::Empty)?;
        info_from_headers(key, &resp)
    }

    fn create_write(
        &self,
        bucket: &str,
        key: &str,
        options: WriteOptions,
    ) -> StorageResult<ObjectWriter> {
        self.streaming_put(bucket, key, object_path(bucket, key), options)
    }

    fn delete_object(&self, bucket: &str, key: &str) -> StorageResult<()> {
        self.send("DELETE", &object_path(bucket, key), Body::Empty)
            .map(drop)
    }

    fn list_objects(&self, bucket: &str, prefix: &str) -> StorageResult<Vec<ObjectInfo>> {
        let listed = list::objects(bucket, prefix, |request| {
            self.store.call(&request).map(|answer| answer.body)
        })?;
        let mut out: Vec<ObjectInfo> = listed
            .into_iter()
            .map(|o| ObjectInfo {
                key: o.key,
                size: o.size,
                etag: o.etag,
                last_modified: timestamp(&o.last_modified),
                meta: ObjectMeta::default(),
                checksums: Default::default(),
                parts: None,
                part_sizes: Vec::new(),
                part_checksums: Vec::new(),
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        options: UploadOptions,
    ) -> StorageResult<String> {
        let request = multipart::create(bucket, key, meta_headers(&options.meta));
        let answer = self.store.call(&request)?;
        Ok(multipart::upload_id(&answer.body)?)
    }

    fn create_part_write(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: u32,
        options: WriteOptions,
    ) -> StorageResult<ObjectWriter> {
        let target = multipart::part_target(bucket, key, upload_id, part_number);
        self.streaming_put(bucket, key, target, options)
    }

    fn upload_info(&self, bucket: &str, key: &str, upload_id: &str) -> StorageResult<UploadInfo> {
        // ListParts answers only for an upload in progress.
        self.list_parts(bucket, key, upload_id)?;
        Ok(UploadInfo {
            bucket: bucket.to_string(),
            key: key.to_string(),
            upload_id: upload_id.to_string(),
            initiated: SystemTime::UNIX_EPOCH,
            options: UploadOptions::default(),
        })
    }

    fn list_parts(&self, bucket: &str, key: &str, upload_id: &str) -> StorageResult<Vec<PartInfo>> {
        let target = format!(
            "{}{}",
            object_path(bucket, key),
            multipart::upload_query(upload_id)
        );
        // RGW (Ceph 16) answers ListParts of an aborted or unknown upload 404 NoSuchKey, S3
        // NoSuchUpload: ListParts names an upload, so either means the upload is gone.
        let listed = self.get_xml(&target, "ListPartsResult", |root| {
            let mut parts = root
                .all("Part")
                .map(|p| {
                    Ok(PartInfo {
                        part_number: u32::try_from(p.number("PartNumber")?)
                            .map_err(|_| StorageError::InvalidPart)?,
                        size: p.number("Size")?,
                        etag: etag::unquoted(&p.text("ETag")).to_string(),
                        last_modified: timestamp(&p.text("LastModified")),
                        checksums: Default::default(),
                    })
                })
                .collect::<StorageResult<Vec<_>>>()?;
            parts.sort_by_key(|p| p.part_number);
            Ok(parts)
        });
        match listed {
            Err(StorageError::NoSuchKey) => Err(StorageError::NoSuchUpload),
            other => other,
        }
    }

    /// CompleteMultipartUpload at the store, retried while it fails with an error the SDKs
    /// retry: the store's `SlowDown` or `InternalError`, also inside a 200 (S3 may fail a
    /// completion after its status is sent). A permanent error (`InvalidPart`) is sent once and
    /// answered with its own code.
    fn complete_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[CompletedPart],
        _expected: &Checksums,
    ) -> StorageResult<ObjectInfo> {
        let parts = parts.iter().map(|p| PartEtag::new(p.part_number, &p.etag));
        let request = multipart::complete(bucket, key, upload_id, parts, Vec::new());
        let what = || format!("CompleteMultipartUpload {bucket}/{key} at the store");
        self.retried(&what, || {
            self.store.attempt(&request, multipart::completion_outcome)
        })?;
        self.head_object(bucket, key)
    }

    fn abort_upload(&self, bucket: &str, key: &str, upload_id: &str) -> StorageResult<()> {
        self.store
            .call(&multipart::abort(bucket, key, upload_id))
            .map(drop)
    }

    fn list_uploads(&self, bucket: &str, prefix: &str) -> StorageResult<Vec<UploadInfo>> {
        let query = format!("uploads&prefix={}", query_value(prefix));
        self.get_xml(
            &bucket_target(bucket, &query),
            "ListMultipartUploadsResult",
            |root| {
                let mut out: Vec<UploadInfo> = root
                    .all("Upload")
                    .map(|u| UploadInfo {
                        bucket: bucket.to_string(),
                        key: u.text("Key"),
                        upload_id: u.text("UploadId"),
                        initiated: timestamp(&u.text("Initiated")),
                        options: UploadOptions::default(),
                    })
                    .collect();
                out.sort_by(|a, b| (&a.key, a.initiated).cmp(&(&b.key, b.initiated)));
                Ok(out)
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::path::Path;
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::error::Fault;

    const KNOWN_KEY: &str = "known-key";
    const KNOWN_SECRET: &str = "known-secret-never-printed";

    /// A stand-in for the store: answers every request with `status` and no body, and keeps the
    /// head of each request it received.
    struct FakeStore {
        url: String,
        heads: Arc<Mutex<Vec<String>>>,
    }

    impl FakeStore {
        fn start(status: &'static str) -> FakeStore {
            let listener = TcpListener::bind("127.0.0.1:0").expect("store listener");
            let url = format!("http://{}", listener.local_addr().expect("store address"));
            let heads = Arc::new(Mutex::new(Vec::new()));
            let seen = Arc::clone(&heads);
            // Serves until the test process ends.
            std::thread::spawn(move || {
                for mut conn in listener.incoming().flatten() {
                    let head = read_head(&mut conn);
                    seen.lock().expect("heads").push(head);
                    let reply = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                    let _ = conn.write_all(reply.as_bytes());
                }
            });
            FakeStore { url, heads }
        }

        fn requests(&self) -> Vec<String> {
            self.heads.lock().expect("heads").clone()
        }
    }

    /// The head of the request on `conn` (up to the blank line).
    fn read_head(conn: &mut TcpStream) -> String {
        let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && matches!(conn.read(&mut byte), Ok(1)) {
            head.push(byte[0]);
        }
        String::from_utf8_lossy(&head).into_owned()
    }

    /// A gateway whose credentials table holds only [`KNOWN_KEY`], in front of `store`.
    fn gateway(store: &FakeStore) -> S3ProxyBackend {
        let text = format!("{KNOWN_KEY} {KNOWN_SECRET}\n");
        let table =
            crate::credentials::CredentialsTable::parse(Path::new("gateway-credentials"), &text)
                .expect("table");
        let endpoint = Endpoint::parse(&store.url).expect("endpoint");
        S3ProxyBackend::new(
            endpoint,
            "us-east-1",
            Keyring::Table(Credentials::fixed(table)),
        )
        .expect("proxy")
    }

    #[test]
    fn an_identity_unknown_to_the_gateway_is_refused_before_the_store_hears_of_it() {
        // A store that refuses what reaches it, as a store refuses an unsigned request.
        let store = FakeStore::start("403 Forbidden");
        let view = gateway(&store)
            .acting_for(&Identity::new("stranger"))
            .expect("a view per identity");
        let sized = WriteOptions {
            size: Some(4),
            ..Default::default()
        };
        let refusals = [
            view.head_bucket("bkt").err(),
            view.head_object("bkt", "k").err(),
            view.open_read("bkt", "k", None).err(),
            view.create_write("bkt", "k", sized).err(),
            view.list_parts("bkt", "k", "upload").err(),
            // The shared operations (`hipobj_s3client::ops`), the retried completion included.
            view.list_objects("bkt", "").err(),
            view.create_upload("bkt", "k", UploadOptions::default())
                .err(),
            view.complete_upload("bkt", "k", "upload", &[], &Checksums::default())
                .err(),
            view.abort_upload("bkt", "k", "upload").err(),
        ];
        let reached = store.requests();
        assert!(
            reached.is_empty(),
            "requests reached the store: {reached:?}"
        );
        for refusal in refusals {
            let Some(StorageError::UnknownIdentity(who)) = refusal else {
                panic!("not refused as an unknown identity: {refusal:?}");
            };
            assert_eq!(who, "stranger");
            let fault = Fault::from(StorageError::UnknownIdentity(who));
            assert_eq!(fault.status(), 403);
            assert_eq!(fault.code(), s3s::S3ErrorCode::AccessDenied);
            let message = fault.message();
            assert!(
                message.contains("\"stranger\" is unknown to the gateway"),
                "{message}"
            );
            assert!(!message.contains(KNOWN_SECRET), "{message}");
        }
    }

    #[test]
    fn a_known_identity_signs_as_itself() {
        let store = FakeStore::start("200 OK");
        let view = gateway(&store)
            .acting_for(&Identity::new(KNOWN_KEY))
            .expect("a view per identity");
        view.head_bucket("bkt").expect("the store answered 200");
        let requests = store.requests();
        assert_eq!(requests.len(), 1, "{requests:?}");
        let head = requests[0].to_ascii_lowercase();
        assert!(head.starts_with("head /bkt"), "{head}");
        let credential = format!("authorization: aws4-hmac-sha256 credential={KNOWN_KEY}/");
        assert!(
            head.contains(&credential),
            "not signed as {KNOWN_KEY}: {head}"
        );
        assert!(!head.contains(KNOWN_SECRET), "{head}");
    }
}

#[cfg(test)]
mod keyring_tests {
    use super::*;
    use crate::credentials::{CredentialsSource, Secret, SecretFrom, SingleIdentity};
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_keys_come_from_the_table_in_use_at_each_call() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("creds");
        let write = |text: &str| {
            std::fs::write(&file, text).expect("write");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        };
        write("alice old-secret\n");
        let live = Credentials::load(CredentialsSource {
            file: Some(file.clone()),
            single: Some(SingleIdentity {
                access_key: "carol".into(),
                secret: Secret::new("carol-secret"),
                from: SecretFrom::Environment,
            }),
        })
        .expect("load");
        let keyring = Keyring::Table(live.clone());
        let alice = Identity::new("alice");
        let secret_of = |id: &Identity| match signing_for(&keyring, id) {
            Signing::As(k) => Some(k.secret_key),
            _ => None,
        };
        assert_eq!(secret_of(&alice).as_deref(), Some("old-secret"));
        write("alice new-secret\n");
        live.reload().expect("reload");
        assert_eq!(secret_of(&alice).as_deref(), Some("new-secret"));
        write("bob bob-Sekr1t\n");
        live.reload().expect("reload");
        assert_eq!(secret_of(&alice), None, "removed: refused unsent");
        assert!(matches!(
            signing_for(&keyring, &alice),
            Signing::UnknownIdentity(_)
        ));
        assert_eq!(
            secret_of(&Identity::new("carol")).as_deref(),
            Some("carol-secret")
        );
        let Signing::As(keys) = signing_for(&keyring, &Identity::new("bob")) else {
            panic!("bob signs as himself")
        };
        assert_eq!(keys.secret_key, "bob-Sekr1t");
        assert!(!format!("{keys:?}").contains("Sekr1t"), "{keys:?}");
        assert!(matches!(
            signing_for(&Keyring::Anonymous, &alice),
            Signing::Unsigned
        ));
    }
}
