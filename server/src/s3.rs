//! The `S3` trait: plain S3 over HTTP, delegating to the storage seam (`backend`), and token
//! requests (GET/PUT with `x-amz-rdma-token`), delegating to `rdma`. Errors become `S3Error` in
//! `error`. The op bodies live in one module per concept: `objects` (GET/HEAD/PUT/DELETE, copy,
//! DeleteObjects), `multipart`, `listing`, `tagging`, `lifecycle`; `headers` and `conditions` are shared by them; `wire`
//! corrects the few response bytes s3s writes unlike S3.

mod acl;
mod attributes;
mod conditions;
mod headers;
#[cfg(test)]
mod http_tests;
pub mod lifecycle;
mod listing;
mod multipart;
mod objects;
mod presign;
pub mod rcv2;
mod tagging;
pub mod wire;

use std::sync::Arc;

use hipobj::checksum::RDMA_CHECKSUM;
use hipobj::reply::Reply;
use hipobj::token::Transport;
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, S3};
use tracing::debug;

use crate::access;
use crate::backend::checksum::moved_checksum;
use crate::backend::{Backend, ObjectInfo, StorageError};
use crate::error::{self, Fault, RDMA_BYTES, RDMA_REPLY, RDMA_TOKEN};
use crate::identity::Identity;
use crate::ownership;
use crate::rdma::token_header::parse_token_header;
use crate::rdma::worker::RdmaWorkers;
use crate::rdma::{JobKind, RdmaJob, RdmaOutcome};
use crate::stats::Stats;

#[derive(Clone)]
pub struct HipobjS3 {
    storage: Arc<dyn Backend>,
    /// `None`: RDMA disabled, token requests get 501.
    rdma: Option<Arc<RdmaWorkers>>,
    stats: Arc<Stats>,
}

impl HipobjS3 {
    pub fn new(
        storage: Arc<dyn Backend>,
        rdma: Option<Arc<RdmaWorkers>>,
        stats: Arc<Stats>,
    ) -> Self {
        HipobjS3 {
            storage,
            rdma,
            stats,
        }
    }

    /// Run a blocking storage call off the executor.
    async fn blocking<T, F>(&self, f: F) -> S3Result<T>
    where
        F: FnOnce(&dyn Backend) -> Result<T, StorageError> + Send + 'static,
        T: Send + 'static,
    {
        self.blocking_with(Arc::clone(&self.storage), f).await
    }

    /// [`Self::blocking`] on the store as `who` reaches it (gateway mode: signed as `who`).
    async fn blocking_as<T, F>(&self, who: Option<&Identity>, f: F) -> S3Result<T>
    where
        F: FnOnce(&dyn Backend) -> Result<T, StorageError> + Send + 'static,
        T: Send + 'static,
    {
        let storage = match who {
            Some(who) => crate::backend::acting_for(&self.storage, who),
            None => Arc::clone(&self.storage),
        };
        self.blocking_with(storage, f).await
    }

    async fn blocking_with<T, F>(&self, storage: Arc<dyn Backend>, f: F) -> S3Result<T>
    where
        F: FnOnce(&dyn Backend) -> Result<T, StorageError> + Send + 'static,
        T: Send + 'static,
    {
        tokio::task::spawn_blocking(move || f(storage.as_ref()))
            .await
            .map_err(error::internal)?
            .map_err(error::storage_error)
    }

    /// The request's token, parsed and checked (RC, RDMA on here) with its requester, before
    /// anything else of the operation runs; `None` for plain S3.
    fn checked_token(
        &self,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
    ) -> Option<S3Result<CheckedToken<'_>>> {
        let value = headers.get(RDMA_TOKEN)?;
        Stats::bump(&self.stats.token_requests);
        let token = match parse_token_header(value.as_bytes()) {
            Ok(t) => t,
            Err(why) => {
                debug!(why = why.0, "malformed x-amz-rdma-token");
                return Some(Err(error::rejected(Fault::BAD_TOKEN, &self.stats)));
            }
        };
        if token.transport != Transport::Rc {
            return Some(Err(error::rejected(Fault::NO_RDMA, &self.stats)));
        }
        let Some(rdma) = &self.rdma else {
            return Some(Err(error::rejected(Fault::NO_RDMA, &self.stats)));
        };
        let requester = match access::requester(extensions) {
            Ok(r) => r.clone(),
            Err(e) => return Some(Err(e)),
        };
        Some(Ok(CheckedToken {
            rdma,
            token,
            requester,
        }))
    }
}

impl HipobjS3 {
    /// The `Range` a token GET asks the RDMA job for: the request's own, or the bytes of part
    /// `partNumber` (S3's selection, as a plain GET makes it, from the object as it is now; the
    /// job moves that range of the object it opens).
    async fn token_get_range(
        &self,
        input: &GetObjectInput,
        checked: &CheckedToken<'_>,
    ) -> S3Result<Option<s3s::dto::Range>> {
        if input.part_number.is_none() {
            return Ok(input.range);
        }
        let (b, k) = (input.bucket.clone(), input.key.clone());
        let who = Some(&checked.requester.identity);
        let info = self
            .blocking_as(who, move |s| s.head_object(&b, &k))
            .await?;
        let selected = objects::selection(&info, input.part_number, input.range.as_ref())?;
        Ok(selected.map(|r| s3s::dto::Range::Int {
            first: r.start,
            last: r.end.checked_sub(1),
        }))
    }
}

/// A well-formed RC token of a checked requester, ready to become an RDMA job.
struct CheckedToken<'s> {
    rdma: &'s RdmaWorkers,
    token: hipobj::token::Token,
    requester: crate::identity::Requester,
}

impl CheckedToken<'_> {
    async fn submit(self, bucket: &str, key: &str, kind: JobKind) -> RdmaOutcome {
        let job = RdmaJob {
            token: self.token,
            requester: self.requester,
            bucket: bucket.to_string(),
            key: key.to_string(),
            kind,
        };
        let started = std::time::Instant::now();
        let outcome = self.rdma.submit(job).await;
        debug!(
            elapsed_us = started.elapsed().as_micros() as u64,
            "token request: RDMA job answered"
        );
        outcome
    }
}

fn reply_headers(reply: &Reply) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    if let Ok(v) = http::HeaderValue::from_str(&reply.encode()) {
        h.insert(RDMA_REPLY, v);
    }
    h
}

fn etag(info: &ObjectInfo) -> ETag {
    headers::etag(&info.etag)
}

#[async_trait::async_trait]
impl S3 for HipobjS3 {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let owner = access::requester(&req.extensions)?.identity.clone();
        let bucket = req.input.bucket;
        self.blocking(move |s| ownership::create_owned_bucket(s, &bucket, &owner))
            .await?;
        Ok(S3Response::new(CreateBucketOutput::default()))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let bucket = req.input.bucket;
        self.blocking(move |s| s.delete_bucket(&bucket)).await?;
        Ok(S3Response::new(DeleteBucketOutput::default()))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        let bucket = req.input.bucket;
        self.blocking(move |s| s.head_bucket(&bucket)).await?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let me = access::requester(&req.extensions)?.identity.clone();
        let buckets = self
            .blocking(move |s| ownership::own_buckets(s, &me))
            .await?;
        let buckets = buckets
            .into_iter()
            .map(|b| Bucket {
                name: Some(b.name),
                creation_date: Some(Timestamp::from(b.created)),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        presign::check_expiry(&req.uri)?;
        let Some(checked) = self.checked_token(&req.headers, &req.extensions) else {
            return self.get_plain(req.input).await;
        };
        let checked = checked?;
        let range = self.token_get_range(&req.input, &checked).await?;
        let kind = JobKind::Get { range };
        match checked
            .submit(&req.input.bucket, &req.input.key, kind)
            .await
        {
            RdmaOutcome::Fetched {
                server,
                bytes,
                info,
                range,
            } => {
                let mut headers = reply_headers(&Reply::Done(server));
                headers.insert(RDMA_BYTES, http::HeaderValue::from(bytes));
                // docs/protocol.md section 16: the stored checksum of what moved, in the one
                // header no S3 SDK checks against the empty body; never `x-amz-checksum-*`.
                let moved = range.clone().unwrap_or(0..info.size);
                if let Some(stored) = moved_checksum(&info, &moved) {
                    if let Ok(v) = http::HeaderValue::from_str(&stored.header_value()) {
                        headers.insert(RDMA_CHECKSUM, v);
                    }
                }
                let output = GetObjectOutput {
                    accept_ranges: Some("bytes".into()),
                    content_range: range.map(|r| objects::content_range(&r, info.size)),
                    e_tag: Some(etag(&info)),
                    last_modified: Some(objects::timestamp(&info)),
                    parts_count: info
                        .parts
                        .filter(|_| req.input.part_number.is_some())
                        .map(|p| p as i32),
                    ..Default::default()
                };
                Ok(S3Response::with_headers(output, headers))
            }
            other => Err(error::unfinished(other, &self.stats)),
        }
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        presign::check_expiry(&req.uri)?;
        let checked = match self.checked_token(&req.headers, &req.extensions) {
            None => return self.put_plain(req.input).await,
            Some(checked) => checked?,
        };
        let options = self
            .put_write(&req.input, Some(&checked.requester.identity))
            .await
            .map_err(|e| error::token_error(e, &self.stats))?;
        let kind = JobKind::Put {
            options: Box::new(headers::token_digests(options, checked.token.length)),
        };
        match checked
            .submit(&req.input.bucket, &req.input.key, kind)
            .await
        {
            RdmaOutcome::Stored { server, info } => {
                let mut output = PutObjectOutput {
                    e_tag: Some(etag(&info)),
                    size: Some(info.size as i64),
                    ..Default::default()
                };
                objects::put_checksums!(output, info.checksums);
                Ok(S3Response::with_headers(
                    output,
                    reply_headers(&Reply::Done(server)),
                ))
            }
            other => Err(error::unfinished(other, &self.stats)),
        }
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        presign::check_expiry(&req.uri)?;
        // As the requester reaches the store (gateway mode: signed as them, refused when the
        // gateway does not know them), never through the unsigned base view.
        let who = access::requester(&req.extensions)?.identity.clone();
        self.head(req.input, Some(&who)).await
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        presign::check_expiry(&req.uri)?;
        self.delete(req).await
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        self.delete_many(req.input).await
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<GetObjectAttributesInput>,
    ) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        self.attributes(req.input).await
    }

    async fn get_object_acl(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        self.object_acl(req).await
    }

    async fn get_bucket_acl(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        self.bucket_acl(req).await
    }

    async fn get_object_tagging(
        &self,
        req: S3Request<GetObjectTaggingInput>,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        self.get_tags(req.input).await
    }

    async fn put_object_tagging(
        &self,
        req: S3Request<PutObjectTaggingInput>,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        self.put_tags(req.input).await
    }

    async fn delete_object_tagging(
        &self,
        req: S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        self.delete_tags(req.input).await
    }

    async fn put_bucket_lifecycle_configuration(
        &self,
        req: S3Request<PutBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
        self.put_lifecycle(req.input).await
    }

    async fn get_bucket_lifecycle_configuration(
        &self,
        req: S3Request<GetBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
        self.get_lifecycle(req.input).await
    }

    async fn delete_bucket_lifecycle(
        &self,
        req: S3Request<DeleteBucketLifecycleInput>,
    ) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
        self.delete_lifecycle(req.input).await
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        self.copy(req.input).await
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        listing::check_unordered(&req.uri, req.input.delimiter.as_deref())?;
        let owner = acl::owner_of(&req);
        self.list_v1(req.input, owner).await
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        listing::check_unordered(&req.uri, req.input.delimiter.as_deref())?;
        let owner = acl::owner_of(&req);
        self.list_v2(req.input, owner).await
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let owner = acl::owner_of(&req);
        self.list_versions(req.input, owner).await
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        self.create_upload(req.input).await
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        presign::check_expiry(&req.uri)?;
        match self.checked_token(&req.headers, &req.extensions) {
            None => self.upload_part_plain(req.input).await,
            Some(Err(e)) => Err(e),
            Some(Ok(checked)) => self.upload_part_rdma(req.input, checked).await,
        }
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        self.upload_part_copy(req.input).await
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        self.complete_upload(req.input).await
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        self.abort_upload(req.input).await
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        self.parts(req.input).await
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        self.uploads(req.input).await
    }
}

#[cfg(test)]
mod tests {
    //! The whole token flow through s3s (status codes, reply headers), with the in-memory RDMA
    //! double behind real worker threads.
    use super::*;
    use crate::rdma::test_double::DoublePort;
    use crate::rdma::test_fixture;
    use bytes::Bytes;
    use hipobj::token::Token;
    use s3s::service::{S3Service, S3ServiceBuilder};
    use s3s::Body;
    use std::sync::atomic::Ordering;

    const RKEY: u32 = 0x31;
    const BASE: u64 = 0x5000_0000;

    struct Harness {
        _dir: tempfile::TempDir,
        service: S3Service,
        port: DoublePort,
        stats: Arc<Stats>,
    }

    fn harness() -> Harness {
        let test_fixture::Fixture {
            dir,
            port,
            engine,
            stats,
            storage,
        } = test_fixture::fixture_with(DoublePort::new(), &test_fixture::front_settings());
        front(dir, port, engine, storage, stats)
    }

    /// A gateway (the S3 proxy backend, anonymous) whose store is at `store_url`, with the
    /// in-memory RDMA double behind real worker threads.
    fn gateway_harness(store_url: &str) -> Harness {
        use crate::backend::s3proxy::{Endpoint, Keyring};
        let endpoint = Endpoint::parse(store_url).expect("endpoint");
        let storage: Arc<dyn Backend> = Arc::new(
            crate::backend::S3ProxyBackend::new(endpoint, "us-east-1", Keyring::Anonymous)
                .expect("proxy"),
        );
        let stats = Arc::new(Stats::default());
        let port = DoublePort::new();
        let engine = crate::rdma::engine::Engine::new(
            port.clone(),
            &test_fixture::front_settings(),
            Arc::clone(&storage),
            Arc::clone(&stats),
        );
        let dir = tempfile::tempdir().expect("tempdir");
        front(dir, port, engine, storage, stats)
    }

    /// The S3 front over `storage` with `engine` behind real worker threads, anonymous, as
    /// `--anonymous` serves (the access hook still runs).
    fn front(
        dir: tempfile::TempDir,
        port: DoublePort,
        engine: crate::rdma::engine::Engine<DoublePort>,
        storage: Arc<dyn Backend>,
        stats: Arc<Stats>,
    ) -> Harness {
        let workers = test_fixture::start_workers(engine, &stats);
        let mut builder = S3ServiceBuilder::new(HipobjS3::new(
            Arc::clone(&storage),
            Some(workers),
            Arc::clone(&stats),
        ));
        builder.set_auth(crate::credentials::CredentialsTable::default());
        builder.set_access(crate::access::AccessPolicy::new(
            storage,
            Arc::clone(&stats),
            true,
            true,
        ));
        Harness {
            _dir: dir,
            service: builder.build(),
            port,
            stats,
        }
    }

    /// The client GID of [`token`]: the address [`call`]'s requests come from.
    const CLIENT_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3];

    fn token(len: u64, lid: u16) -> String {
        token_from_gid(CLIENT_GID, len, lid)
    }

    fn token_from_gid(gid: [u8; 16], len: u64, lid: u16) -> String {
        Token {
            transport: Transport::Rc,
            qp_num: 0x4242,
            gid,
            rkey: RKEY,
            remote_addr: BASE,
            length: len,
            port: 1,
            lid,
        }
        .encode_hex()
    }

    async fn call(
        h: &Harness,
        method: &str,
        uri: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, http::HeaderMap, Bytes) {
        let mut req = http::Request::builder()
            .method(method)
            .uri(uri)
            .header("host", "localhost");
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        let mut req = req.body(Body::from(body.to_vec())).expect("request");
        // The accept loop's tag: the request came from the token GID's address.
        req.extensions_mut()
            .insert(crate::identity::HttpPeer([10, 1, 2, 3].into()));
        let resp = h.service.call(req).await.expect("response");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let mut body = resp.into_body();
        let bytes = body.store_all_limited(1 << 24).await.expect("body");
        (status, headers, bytes)
    }

    /// A token request answered `503 ServiceUnavailable` with `Retry-After` and reply `503` (it
    /// started nothing); its message.
    fn assert_unavailable(
        method: &str,
        status: u16,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> String {
        assert_eq!(status, 503, "{method}: {}", String::from_utf8_lossy(body));
        assert_eq!(reply(headers), Reply::Code(503));
        assert_eq!(
            headers.get(http::header::RETRY_AFTER).map(|v| v.as_bytes()),
            Some(crate::error::RETRY_AFTER_SECS.as_bytes())
        );
        assert_eq!(xml_value(body, "Code"), "ServiceUnavailable");
        xml_value(body, "Message")
    }

    fn reply(headers: &http::HeaderMap) -> Reply {
        let v = headers.get(RDMA_REPLY).expect("x-amz-rdma-reply");
        Reply::parse(v.as_bytes()).expect("valid reply")
    }

    /// Issue 40: the one device facing the client is down: 503 `ServiceUnavailable` with
    /// `Retry-After` and `x-amz-rdma-reply: 503`, nothing posted, the pairing kept (the GET after
    /// the link is back moves at once, no 428), counted per device.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_token_request_facing_a_down_port_is_503_and_keeps_its_pairing() {
        let h = harness();
        assert_eq!(call(&h, "PUT", "/bkt", &[], b"").await.0, 200);
        assert_eq!(call(&h, "PUT", "/bkt/obj", &[], b"0123456789").await.0, 200);
        h.port.add_region(RKEY, BASE, vec![0; 16]);
        let (status, headers, _) = call(
            &h,
            "GET",
            "/bkt/obj",
            &[("x-amz-rdma-token", &token(16, 0))],
            b"",
        )
        .await;
        assert_eq!(status, 428);
        let Reply::PairingNeeded(server) = reply(&headers) else {
            panic!("expected 428:<token>")
        };
        let paired = token(16, server.lid);
        h.port.set_down(true);
        let logged = h.port.log().len();
        for method in ["GET", "PUT"] {
            let (status, headers, body) = call(
                &h,
                method,
                "/bkt/obj",
                &[("x-amz-rdma-token", &paired)],
                b"",
            )
            .await;
            let message = assert_unavailable(method, status, &headers, &body);
            assert!(message.contains("double0"), "{message}");
        }
        assert_eq!(h.port.log().len(), logged, "nothing posted, no QP made");
        h.port.set_down(false);
        let (status, headers, _) =
            call(&h, "GET", "/bkt/obj", &[("x-amz-rdma-token", &paired)], b"").await;
        assert_eq!(status, 200);
        assert_eq!(reply(&headers), Reply::Done(server));
        assert_eq!(&h.port.region(RKEY)[..10], b"0123456789");
        let stats: serde_json::Value = serde_json::from_str(&h.stats.to_json()).expect("JSON");
        assert_eq!(stats["replies_503"], 2);
        assert_eq!(stats["pairings_created"], 1);
        assert_eq!(stats["pairings_failed"], 0);
        assert_eq!(stats["devices"]["double0"]["port_down_refusals"], 2);
        assert_eq!(stats["devices"]["double0"]["transfers"], 1);
    }

    /// Rule 9.4 for every GID form on the v1 route: a token whose client GID is an IPv6 address
    /// of another host, a link-local GID, or another host's IPv4-mapped GID is 403 with reply
    /// `403`, before any QP is made.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_token_whose_gid_is_not_the_peer_is_403_in_every_form() {
        let h = harness();
        assert_eq!(call(&h, "PUT", "/bkt", &[], b"").await.0, 200);
        assert_eq!(call(&h, "PUT", "/bkt/obj", &[], b"0123456789").await.0, 200);
        let ipv6_elsewhere = "2001:db8::1".parse::<std::net::Ipv6Addr>();
        let link_local = "fe80::200:ff:fe00:1".parse::<std::net::Ipv6Addr>();
        let ipv4_elsewhere = "::ffff:10.9.9.9".parse::<std::net::Ipv6Addr>();
        for gid in [ipv6_elsewhere, link_local, ipv4_elsewhere] {
            let gid = gid.expect("a GID").octets();
            for method in ["GET", "PUT"] {
                let t = token_from_gid(gid, 16, 0);
                let (status, headers, body) =
                    call(&h, method, "/bkt/obj", &[("x-amz-rdma-token", &t)], b"").await;
                let from = std::net::Ipv6Addr::from(gid);
                assert_eq!(status, 403, "{method} from GID {from}: {body:?}");
                assert_eq!(reply(&headers), Reply::Code(403));
                assert_eq!(xml_value(&body, "Code"), "AccessDenied");
            }
        }
        assert!(
            h.port.log().is_empty(),
            "a QP was touched: {:?}",
            h.port.log()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn token_get_and_put_through_s3s() {
        let h = harness();
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 241) as u8).collect();
        let created = call(&h, "PUT", "/bkt", &[], b"").await;
        assert_eq!(created.0, 200, "{:?}", created.2);
        assert_eq!(call(&h, "PUT", "/bkt/obj", &[], &data).await.0, 200);
        h.port.add_region(RKEY, BASE, vec![0; 32_768]);

        // First request of an unpaired connection: 428 with the server token.
        let t0 = token(32_768, 0);
        let (status, headers, _) =
            call(&h, "GET", "/bkt/obj", &[("x-amz-rdma-token", &t0)], b"").await;
        assert_eq!(status, 428);
        let Reply::PairingNeeded(server) = reply(&headers) else {
            panic!("expected 428:<token>")
        };
        assert!(
            h.port.region(RKEY).iter().all(|&b| b == 0),
            "428 moves no data"
        );

        // Paired: 200 + 200:<token> + bytes transferred, no body.
        let t1 = token(32_768, server.lid);
        let (status, headers, body) =
            call(&h, "GET", "/bkt/obj", &[("x-amz-rdma-token", &t1)], b"").await;
        assert_eq!(status, 200);
        assert_eq!(reply(&headers), Reply::Done(server));
        assert_eq!(
            headers.get(RDMA_BYTES).map(|v| v.as_bytes()),
            Some(&b"20000"[..])
        );
        assert!(body.is_empty());
        assert_eq!(&h.port.region(RKEY)[..20_000], &data[..]);
        // docs/protocol.md section 16: the stored full-object CRC64NVME in x-amz-rdma-checksum,
        // unasked, and no x-amz-checksum-* for an S3 SDK to check against the empty body, asked
        // or not (boto3 asks on every GetObject).
        let crc = hipobj::checksum::CrcAlgo::Crc64Nvme;
        let want = format!("CRC64NVME {}", crc.encode(crc.of(&data)));
        for asked in [&[][..], &[("x-amz-checksum-mode", "ENABLED")][..]] {
            let mut with = vec![("x-amz-rdma-token", t1.as_str())];
            with.extend_from_slice(asked);
            let (status, headers, _) = call(&h, "GET", "/bkt/obj", &with, b"").await;
            assert_eq!(status, 200);
            assert_eq!(
                headers.get(RDMA_CHECKSUM).map(|v| v.as_bytes()),
                Some(want.as_bytes()),
                "{asked:?}"
            );
            let sdk_checked = headers
                .keys()
                .find(|n| n.as_str().starts_with("x-amz-checksum-"));
            assert_eq!(sdk_checked, None, "{asked:?}");
        }
        // partNumber=1 of a plain object is the whole object: the same value.
        let (status, headers, _) = call(
            &h,
            "GET",
            "/bkt/obj?partNumber=1",
            &[("x-amz-rdma-token", &t1)],
            b"",
        )
        .await;
        assert!(status == 200 || status == 206, "{status}");
        assert_eq!(
            headers.get(RDMA_CHECKSUM).map(|v| v.as_bytes()),
            Some(want.as_bytes())
        );

        // Ranged: 206, and a range has no checksum of its own.
        let (status, headers, _) = call(
            &h,
            "GET",
            "/bkt/obj",
            &[
                ("x-amz-rdma-token", &t1),
                ("range", "bytes=100-199"),
                ("x-amz-checksum-mode", "ENABLED"),
            ],
            b"",
        )
        .await;
        assert_eq!(status, 206);
        assert!(
            headers.get("x-amz-checksum-crc64nvme").is_none()
                && headers.get(RDMA_CHECKSUM).is_none(),
            "a range has no checksum of its own"
        );
        assert_eq!(
            headers.get(RDMA_BYTES).map(|v| v.as_bytes()),
            Some(&b"100"[..])
        );
        assert_eq!(&h.port.region(RKEY)[..100], &data[100..200]);

        // Missing object with a token: 404 + reply 404.
        let (status, headers, _) =
            call(&h, "GET", "/bkt/missing", &[("x-amz-rdma-token", &t1)], b"").await;
        assert_eq!(status, 404);
        assert_eq!(reply(&headers), Reply::Code(404));

        // Buffer too small: 400.
        let small = token(10, server.lid);
        let (status, headers, _) =
            call(&h, "GET", "/bkt/obj", &[("x-amz-rdma-token", &small)], b"").await;
        assert_eq!(status, 400);
        assert_eq!(reply(&headers), Reply::Code(400));

        // PUT over the same pairing: the client's buffer becomes the object.
        let upload: Vec<u8> = (0..32_768u32).map(|i| (i * 3 % 256) as u8).collect();
        h.port.add_region(RKEY, BASE, upload.clone());
        let (status, headers, _) =
            call(&h, "PUT", "/bkt/up", &[("x-amz-rdma-token", &t1)], b"").await;
        assert_eq!(status, 200);
        assert_eq!(reply(&headers), Reply::Done(server));
        assert!(headers.get("etag").is_some());
        let (status, _, body) = call(&h, "GET", "/bkt/up", &[], b"").await;
        assert_eq!(status, 200);
        assert_eq!(&body[..], &upload[..]);

        let json = h.stats.to_json();
        for want in [
            "\"replies_428\":1",
            "\"pairings_created\":1",
            "\"rdma_gets\":5",
            "\"rdma_puts\":1",
            "\"replies_404\":1",
            "\"replies_400\":1",
        ] {
            assert!(json.contains(want), "{want} in {json}");
        }
    }

    /// The text between `<tag>` and `</tag>` in an XML body.
    fn xml_value(body: &[u8], tag: &str) -> String {
        let text = String::from_utf8_lossy(body);
        let open = format!("<{tag}>");
        let start = text.find(&open).expect(tag) + open.len();
        let end = text[start..].find(&format!("</{tag}>")).expect(tag) + start;
        text[start..end].to_string()
    }

    /// Issue 36: a missing bucket is `NoSuchBucket` and a missing key `NoSuchKey` (404 both),
    /// over plain HTTP and over v1 token requests alike (unpaired and paired, GET and PUT); and
    /// (revision 5) the 404s start nothing: the pairing stays and the next GET on the same
    /// connection moves its bytes with no new pairing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn missing_bucket_and_missing_key_have_their_own_codes_on_every_route() {
        let h = harness();
        assert_eq!(call(&h, "PUT", "/bkt", &[], b"").await.0, 200);
        assert_eq!(call(&h, "PUT", "/bkt/obj", &[], b"0123456789").await.0, 200);
        h.port.add_region(RKEY, BASE, vec![0; 64]);
        let code = |uri: &'static str, method: &'static str, token: Option<String>| {
            let h = &h;
            async move {
                let headers: Vec<(&str, &str)> = token
                    .as_deref()
                    .map(|t| vec![("x-amz-rdma-token", t)])
                    .unwrap_or_default();
                let (status, headers, body) = call(h, method, uri, &headers, b"").await;
                if token.is_some() {
                    assert_eq!(reply(&headers), Reply::Code(i32::from(status)), "{uri}");
                }
                (status, xml_value(&body, "Code"))
            }
        };
        let unpaired = Some(token(64, 0));
        let bucket = (404, "NoSuchBucket".to_string());
        let key = (404, "NoSuchKey".to_string());
        // Plain HTTP, then v1 tokens of an unpaired connection (refused before any pairing).
        let cases = [
            ("/nob/obj", "GET", None, &bucket),
            ("/bkt/missing", "GET", None, &key),
            ("/nob/obj", "GET", unpaired.clone(), &bucket),
            ("/bkt/missing", "GET", unpaired.clone(), &key),
            ("/nob/obj", "PUT", unpaired, &bucket),
        ];
        for (uri, method, t, want) in cases {
            assert_eq!(&code(uri, method, t).await, want, "{method} {uri}");
        }
        assert_eq!(h.stats.pairings_created.load(Ordering::Relaxed), 0);
        // Pair, then the same refusals on the paired connection.
        let paired = paired_token(&h, "/bkt/obj", 64).await;
        for (uri, want) in [("/nob/obj", &bucket), ("/bkt/missing", &key)] {
            assert_eq!(&code(uri, "GET", Some(paired.clone())).await, want, "{uri}");
        }
        let (status, headers, _) =
            call(&h, "GET", "/bkt/obj", &[("x-amz-rdma-token", &paired)], b"").await;
        assert_eq!(status, 200);
        assert!(matches!(reply(&headers), Reply::Done(_)));
        assert_eq!(&h.port.region(RKEY)[..10], b"0123456789");
        let json = h.stats.to_json();
        for want in [
            "\"pairings_created\":1",
            "\"pairings_live\":1",
            "\"pairings_failed\":0",
            "\"replies_428\":1",
            "\"replies_404\":5",
        ] {
            assert!(json.contains(want), "{want} in {json}");
        }
    }

    /// Revision 5, rule 2: a gateway whose store refuses the connection answers token requests
    /// 503 + `Retry-After` + `ServiceUnavailable` naming the store's failure, before any
    /// pairing (never 500); nothing is created on the RDMA side.
    ///
    /// A plain test: the store's blocking HTTP client is made and dropped outside the runtime.
    #[test]
    fn a_gateway_with_its_store_down_answers_503_with_retry_after() {
        // A port nobody listens on: bound, then released.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let h = gateway_harness(&format!("http://127.0.0.1:{closed}"));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        for method in ["GET", "PUT"] {
            let t = token(64, 0);
            let (status, headers, body) = runtime.block_on(call(
                &h,
                method,
                "/bkt/obj",
                &[("x-amz-rdma-token", &t)],
                b"",
            ));
            let message = assert_unavailable(method, status, &headers, &body);
            assert!(
                message.starts_with("backend store unavailable: unreachable"),
                "{message}"
            );
        }
        let json = h.stats.to_json();
        for want in [
            "\"replies_503\":2",
            "\"replies_500\":0",
            "\"pairings_created\":0",
        ] {
            assert!(json.contains(want), "{want} in {json}");
        }
        assert!(h.port.log().is_empty(), "{:?}", h.port.log());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn upload_part_by_token_is_a_part_like_any_other() {
        let h = harness();
        assert_eq!(call(&h, "PUT", "/bkt", &[], b"").await.0, 200);
        let (status, _, body) = call(&h, "POST", "/bkt/mp?uploads", &[], b"").await;
        assert_eq!(status, 200);
        let id = xml_value(&body, "UploadId");
        let part1: Vec<u8> = (0..(5u32 << 20)).map(|i| (i % 251) as u8).collect();
        let part2: Vec<u8> = (0..1000u32).map(|i| (i % 13) as u8).collect();
        h.port.add_region(RKEY, BASE, part1.clone());

        // Unknown upload id: 404 NoSuchUpload with reply 404, no pairing, buffer unchanged.
        let t0 = token(part1.len() as u64, 0);
        let (status, headers, body) = call(
            &h,
            "PUT",
            "/bkt/mp?partNumber=1&uploadId=00ff",
            &[("x-amz-rdma-token", &t0)],
            b"",
        )
        .await;
        assert_eq!(status, 404);
        assert_eq!(reply(&headers), Reply::Code(404));
        assert_eq!(xml_value(&body, "Code"), "NoSuchUpload");
        assert!(h.stats.to_json().contains("\"pairings_created\":0"));
        assert_eq!(h.port.region(RKEY), part1);

        // Part 1 by RDMA: 428, then 200 with the part's ETag.
        let uri = format!("/bkt/mp?partNumber=1&uploadId={id}");
        let (status, headers, _) = call(&h, "PUT", &uri, &[("x-amz-rdma-token", &t0)], b"").await;
        assert_eq!(status, 428);
        let Reply::PairingNeeded(server) = reply(&headers) else {
            panic!("expected 428:<token>")
        };
        let t1 = token(part1.len() as u64, server.lid);
        let (status, headers, _) = call(&h, "PUT", &uri, &[("x-amz-rdma-token", &t1)], b"").await;
        assert_eq!(status, 200);
        assert_eq!(reply(&headers), Reply::Done(server));
        let etag1 = headers
            .get("etag")
            .expect("etag")
            .to_str()
            .expect("ascii")
            .to_string();
        assert_eq!(
            etag1,
            format!(
                "\"{}\"",
                hex::encode(<md5::Md5 as md5::Digest>::digest(&part1))
            )
        );

        // Part 2 by HTTP body.
        let uri2 = format!("/bkt/mp?partNumber=2&uploadId={id}");
        let (status, headers, _) = call(&h, "PUT", &uri2, &[], &part2).await;
        assert_eq!(status, 200);
        let etag2 = headers
            .get("etag")
            .expect("etag")
            .to_str()
            .expect("ascii")
            .to_string();

        // ListParts shows both; Complete assembles them; GET reads back both parts in order.
        let (status, _, body) = call(&h, "GET", &format!("/bkt/mp?uploadId={id}"), &[], b"").await;
        assert_eq!(status, 200);
        let listed = String::from_utf8_lossy(&body);
        assert!(
            listed.contains(&etag1.replace('"', "&quot;")) || listed.contains(&etag1),
            "{listed}"
        );
        assert_eq!(listed.matches("<Part>").count(), 2, "{listed}");
        let complete = format!(
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag1}</ETag></Part>\
             <Part><PartNumber>2</PartNumber><ETag>{etag2}</ETag></Part></CompleteMultipartUpload>"
        );
        let (status, _, body) = call(
            &h,
            "POST",
            &format!("/bkt/mp?uploadId={id}"),
            &[],
            complete.as_bytes(),
        )
        .await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let (status, _, body) = call(&h, "GET", "/bkt/mp", &[], b"").await;
        assert_eq!(status, 200);
        assert_eq!(body.len(), part1.len() + part2.len());
        assert!(body[..part1.len()] == part1[..] && body[part1.len()..] == part2[..]);
        assert!(h.stats.to_json().contains("\"rdma_parts\":1"));
    }

    /// A pairing for the test token (428 then the server's pairing id).
    async fn paired_token(h: &Harness, uri: &str, len: u64) -> String {
        let (status, headers, _) =
            call(h, "PUT", uri, &[("x-amz-rdma-token", &token(len, 0))], b"").await;
        assert_eq!(status, 428);
        let Reply::PairingNeeded(server) = reply(&headers) else {
            panic!("expected 428:<token>")
        };
        token(len, server.lid)
    }

    fn crc32_of(data: &[u8]) -> String {
        use crate::backend::checksum::ChecksumComputer;
        use crate::backend::{ChecksumAlgo, Checksums};
        let mut c = ChecksumComputer::new(&Checksums::default(), Some(ChecksumAlgo::Crc32));
        c.update(data);
        c.finish(&Checksums::default())
            .expect("checksum")
            .crc32
            .expect("crc32")
    }

    /// docs/protocol.md rule 4.9: digests on a token PUT describe the moved bytes; the SDK's digest of
    /// its empty body becomes a computed checksum; a real mismatch is BadDigest with a message.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn token_put_digests_describe_the_moved_bytes() {
        let h = harness();
        assert_eq!(call(&h, "PUT", "/bkt", &[], b"").await.0, 200);
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 256) as u8).collect();
        h.port.add_region(RKEY, BASE, data.clone());
        let t = paired_token(&h, "/bkt/a", data.len() as u64).await;
        let crc = crc32_of(&data);

        // boto3's defaults: CRC32 (and MD5) of the empty body: stored, with the real CRC32.
        let (status, headers, body) = call(
            &h,
            "PUT",
            "/bkt/a",
            &[
                ("x-amz-rdma-token", &t),
                ("x-amz-checksum-crc32", "AAAAAA=="),
                ("x-amz-sdk-checksum-algorithm", "CRC32"),
                ("content-md5", "1B2M2Y8AsgTpgAmY7PhCfg=="),
            ],
            b"",
        )
        .await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert_eq!(
            headers.get("x-amz-checksum-crc32").map(|v| v.as_bytes()),
            Some(crc.as_bytes())
        );
        let (status, headers, body) = call(
            &h,
            "GET",
            "/bkt/a",
            &[("x-amz-checksum-mode", "ENABLED")],
            b"",
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(&body[..], &data[..]);
        assert_eq!(
            headers.get("x-amz-checksum-crc32").map(|v| v.as_bytes()),
            Some(crc.as_bytes())
        );

        // The object's real checksum: compared, and it matches.
        let (status, _, _) = call(
            &h,
            "PUT",
            "/bkt/b",
            &[("x-amz-rdma-token", &t), ("x-amz-checksum-crc32", &crc)],
            b"",
        )
        .await;
        assert_eq!(status, 200);

        // A real mismatch: 400 BadDigest naming the algorithm, reply 400, nothing stored.
        let (status, headers, body) = call(
            &h,
            "PUT",
            "/bkt/c",
            &[
                ("x-amz-rdma-token", &t),
                ("x-amz-checksum-crc32", "DUoRhQ=="),
            ],
            b"",
        )
        .await;
        assert_eq!(status, 400);
        assert_eq!(reply(&headers), Reply::Code(400));
        assert_eq!(xml_value(&body, "Code"), "BadDigest");
        assert!(xml_value(&body, "Message").contains("CRC32"));
        let (status, _, _) = call(
            &h,
            "PUT",
            "/bkt/c",
            &[
                ("x-amz-rdma-token", &t),
                ("content-md5", "XrY7u+Ae7tCTyyK7j1rNww=="),
            ],
            b"",
        )
        .await;
        assert_eq!(status, 400);
        assert_eq!(call(&h, "HEAD", "/bkt/c", &[], b"").await.0, 404);
    }
}
