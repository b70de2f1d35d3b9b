//! hipobj-rc-v2 control requests (docs/protocol.md sections 10 and 13.1-13.5):
//! `POST /.hipobj-rc/prepare`, `/ready` and `/cancel`, served as an s3s custom route next to the
//! v1 token path. s3s has verified the SigV4 signature when the route runs; this module applies
//! rule 10.3 (identity, every `x-amz-rdma-*` header signed, token GID = HTTP peer, the target
//! bucket is the requester's), decodes the headers with the one codec (`hipobj::rcv2`), hands
//! the session work to the RDMA workers (same admission and 503 as token requests) and writes
//! the answer with the codec's headers. Session rules (owner, cookie, state, deadlines) are the
//! engine's (`rdma::v2`, `rdma::session`).
//!
//! Statuses: 501 + `X-Amz-Rdma-Protocol-Status: unsupported` for another (or no)
//! `x-amz-rdma-protocol` and when RDMA is off; 403 unsigned / unsigned rdma header / GID not the
//! peer / bucket of another identity / cookie mismatch; the codec's status (400, 413, ...) for a
//! malformed header; 404 unknown or foreign session, missing bucket or key; 409 READY in the
//! wrong state; 408 data phase too slow; 416 offset past the object; 503 busy; CANCEL 204.

use hipobj::rcv2::{
    self, header, CancelRequest, FinalAnswer, Op, PrepareAnswer, PrepareRequest, Psn, ReadyRequest,
    Session, WireError,
};
use hipobj::token::Transport;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use hyper::http::Extensions;
use s3s::dto::{ChecksumAlgorithm, ETagCondition, PutObjectInput, UploadPartInput};
use s3s::path::S3Path;
use s3s::route::S3Route;
use s3s::{Body, S3Error, S3Request, S3Response, S3Result};
use tracing::debug;

use super::HipobjS3;
use crate::access::{self, AccessPolicy};
use crate::error::{Fault, Why};
use crate::identity::{Identity, Requester};
use crate::rdma::port::Peer;
use crate::rdma::transfer::Remote;
use crate::rdma::v2::{reject, PrepareJob, ReadyJob, V2Job, V2Kind, V2Outcome};
use crate::stats::Stats;

/// The control paths' first segment, which s3s parses as a bucket name before routing.
pub const CONTROL_BUCKET: &str = ".hipobj-rc";

/// Whether `path` is one of the three control routes.
pub fn is_control_path(path: &str) -> bool {
    [rcv2::PREPARE_PATH, rcv2::READY_PATH, rcv2::CANCEL_PATH].contains(&path)
}

/// The custom route of the three control requests.
pub struct ControlRoute {
    s3: HipobjS3,
    access: AccessPolicy,
    anonymous: bool,
    check_gid_peer: bool,
}

/// A successful answer: status and headers, no body. Refusals are [`S3Error`]s (from the one
/// error model, [`Fault`], or the S3 operation's own), whose body s3s renders.
struct Answer {
    status: u16,
    headers: Vec<(&'static str, String)>,
}

impl Answer {
    fn ok(status: u16, headers: Vec<(&'static str, String)>) -> Answer {
        Answer { status, headers }
    }
}

/// A refusal of a control request.
fn refused(fault: Fault) -> S3Error {
    fault.into()
}

/// 501 with the marker: "this server does not speak hipobj-rc-v2 here".
fn unsupported(why: impl Into<Why>) -> S3Error {
    let mut err = refused(Fault::NotImplemented(why.into()));
    let mut headers = err.headers().cloned().unwrap_or_default();
    headers.insert(
        header::PROTOCOL_STATUS,
        HeaderValue::from_static(rcv2::UNSUPPORTED),
    );
    err.set_headers(headers);
    err
}

/// A header the codec refused: its status (400, 413; 501 for the protocol) and message.
fn from_wire(e: WireError) -> S3Error {
    match e.status {
        501 => unsupported(e.message),
        413 => refused(Fault::TooLarge(e.message.into())),
        _ => refused(Fault::BadRequest(e.message.into())),
    }
}

impl ControlRoute {
    pub fn new(s3: HipobjS3, access: AccessPolicy, anonymous: bool, check_gid_peer: bool) -> Self {
        ControlRoute {
            s3,
            access,
            anonymous,
            check_gid_peer,
        }
    }

    fn stats(&self) -> &Stats {
        &self.s3.stats
    }

    async fn answer(&self, req: &S3Request<Body>) -> S3Result<Answer> {
        let protocol = req
            .headers
            .get(header::PROTOCOL)
            .and_then(|v| v.to_str().ok());
        if !protocol.is_some_and(|p| p.trim().eq_ignore_ascii_case(rcv2::PROTOCOL)) {
            return Err(unsupported("x-amz-rdma-protocol must be hipobj-rc-v2"));
        }
        if self.s3.rdma.is_none() {
            return Err(unsupported("RDMA is disabled on this server"));
        }
        let identity = self.access.identity(req.credentials.as_ref())?;
        let peer = access::http_peer(&req.extensions)?;
        if !self.anonymous {
            if let Some(name) = unsigned_rdma_header(&req.headers, &req.uri) {
                debug!(%peer, name, "v2 control header not in SignedHeaders: 403");
                return Err(refused(Fault::Forbidden(
                    "every x-amz-rdma-* header must be signed".into(),
                )));
            }
        }
        let requester = Requester::new(peer, identity);
        let get = |name: &str| req.headers.get(name).and_then(|v| v.to_str().ok());
        match req.uri.path() {
            p if p == rcv2::PREPARE_PATH => {
                let p = PrepareRequest::from_headers(get).map_err(from_wire)?;
                self.prepare(p, requester, &req.headers).await
            }
            p if p == rcv2::READY_PATH => {
                let r = ReadyRequest::from_headers(get).map_err(from_wire)?;
                self.ready(r, requester).await
            }
            _ => {
                let c = CancelRequest::from_headers(get).map_err(from_wire)?;
                Ok(self.cancel(c, requester).await)
            }
        }
    }

    async fn prepare(
        &self,
        p: PrepareRequest,
        who: Requester,
        headers: &HeaderMap,
    ) -> S3Result<Answer> {
        let token = p.token;
        if token.transport != Transport::Rc || token.gid == [0; 16] {
            return Err(refused(Fault::BadRequest(
                "the token must name an RC QP with a non-zero GID".into(),
            )));
        }
        access::check_client_gid(&token.gid, who.peer_ip, self.check_gid_peer).map_err(refused)?;
        let target = &p.target;
        let path = S3Path::Object {
            bucket: target.bucket.as_str().into(),
            key: target.key.as_str().into(),
        };
        let op_name = match p.op {
            Op::Get => "GetObject",
            Op::Put => "PutObject",
        };
        self.access
            .check_bucket(&path, op_name, &who.identity)
            .await?;
        let Ok(size) = u32::try_from(p.size) else {
            return Err(refused(Fault::TooLarge(
                "x-amz-rdma-size is above 2^31-1".into(),
            )));
        };
        let kind = self.kind(&p, &who.identity, headers).await?;
        let job = PrepareJob {
            requester: who,
            client: Peer {
                gid: token.gid,
                qp_num: token.qp_num,
            },
            client_psn: p.psn.get(),
            cookie: p.cookie.get(),
            size,
            bucket: target.bucket.clone(),
            key: target.key.clone(),
            kind,
        };
        match self.submit(V2Job::Prepare(job)).await {
            V2Outcome::Prepared {
                session,
                server,
                server_psn,
                staging,
            } => {
                let Ok(psn) = Psn::new(server_psn) else {
                    return Err(refused(Fault::Failed("server PSN out of range".into())));
                };
                let answer = PrepareAnswer {
                    server,
                    session: Session(session),
                    psn,
                    staging: staging.map(|w| (w.addr, w.rkey)),
                };
                Ok(Answer::ok(200, answer.headers()))
            }
            V2Outcome::Rejected(fault) => Err(refused(fault)),
            V2Outcome::Moved { .. } => Err(refused(Fault::Failed("unexpected outcome".into()))),
        }
    }

    /// What the session moves: GET from an offset, PUT of an object or of a part (target query
    /// `partNumber=N&uploadId=ID`), with the options a PutObject / UploadPart would get from
    /// the same headers.
    async fn kind(
        &self,
        p: &PrepareRequest,
        who: &Identity,
        headers: &HeaderMap,
    ) -> S3Result<V2Kind> {
        let t = &p.target;
        let query = |name: &str| t.query.iter().find(|(k, _)| k == name).map(|(_, v)| v);
        match p.op {
            Op::Get if t.query.is_empty() => Ok(V2Kind::Get { offset: p.offset }),
            Op::Put if t.query.is_empty() => {
                let input = put_input(&t.bucket, &t.key, headers)?;
                let options = self.s3.put_write(&input, Some(who)).await?;
                Ok(V2Kind::Put {
                    options: Box::new(options),
                })
            }
            Op::Put if t.query.len() == 2 => {
                let (Some(number), Some(upload_id)) = (query("partNumber"), query("uploadId"))
                else {
                    return Err(refused(Fault::BadRequest(
                        "unsupported target query".into(),
                    )));
                };
                let Ok(number) = number.parse::<i32>() else {
                    return Err(refused(Fault::BadRequest(
                        "partNumber is not a number".into(),
                    )));
                };
                let input = part_input(&t.bucket, &t.key, upload_id, number, headers)?;
                let (part_number, options) = self.s3.part_write(&input, Some(who)).await?;
                Ok(V2Kind::Part {
                    upload_id: upload_id.clone(),
                    part_number,
                    options: Box::new(options),
                })
            }
            _ => Err(refused(Fault::BadRequest(
                "unsupported target query".into(),
            ))),
        }
    }

    async fn ready(&self, r: ReadyRequest, who: Requester) -> S3Result<Answer> {
        let cookie = r.cookie;
        let job = ReadyJob {
            requester: who,
            session: r.session.0,
            cookie: cookie.get(),
            client_qpn: r.qpn,
            remote: Remote {
                addr: r.mr_addr,
                rkey: r.mr_rkey,
            },
        };
        match self.submit(V2Job::Ready(job)).await {
            V2Outcome::Moved {
                bytes,
                etag,
                checksum,
                ..
            } => {
                let answer = FinalAnswer {
                    cookie,
                    bytes,
                    etag: Some(format!("\"{etag}\"")),
                    version_id: None,
                    checksum: checksum.map(|c| c.header_value()),
                };
                Ok(Answer::ok(200, answer.headers()))
            }
            V2Outcome::Rejected(fault) => Err(refused(fault)),
            V2Outcome::Prepared { .. } => Err(refused(Fault::Failed("unexpected outcome".into()))),
        }
    }

    async fn cancel(&self, c: CancelRequest, who: Requester) -> Answer {
        if let Some(rdma) = &self.s3.rdma {
            rdma.cancel_v2(who, c.session.0).await;
        }
        Answer::ok(204, vec![(header::PROTOCOL, rcv2::PROTOCOL.to_string())])
    }

    async fn submit(&self, job: V2Job) -> V2Outcome {
        match &self.s3.rdma {
            Some(rdma) => rdma.submit_v2(job).await,
            None => V2Outcome::Rejected(reject::FAILED),
        }
    }
}

/// The first `x-amz-rdma-*` header of the request that its SigV4 `SignedHeaders` do not list.
fn unsigned_rdma_header<'h>(headers: &'h HeaderMap, uri: &Uri) -> Option<&'h str> {
    headers
        .keys()
        .map(|n| n.as_str())
        .find(|n| n.starts_with("x-amz-rdma-") && !access::is_signed(headers, uri, n))
}

fn header_str<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn etag_condition(headers: &HeaderMap, name: &str) -> S3Result<Option<ETagCondition>> {
    headers
        .get(name)
        .map(|v| {
            ETagCondition::parse_http_header(v.as_bytes()).map_err(|_| {
                refused(Fault::BadRequest(
                    "malformed If-Match / If-None-Match".into(),
                ))
            })
        })
        .transpose()
}

/// The PREPARE's `x-amz-checksum-*` values (of the moved bytes) and checksum algorithm
/// (`x-amz-sdk-checksum-algorithm`, else `x-amz-checksum-algorithm`), read once, on a
/// PutObject or UploadPart input builder (the two have the same setters).
macro_rules! with_checksums {
    ($builder:expr, $headers:expr) => {{
        let headers: &HeaderMap = $headers;
        let checksum =
            |alg: &str| header_str(headers, &format!("x-amz-checksum-{alg}")).map(String::from);
        let algorithm = header_str(headers, "x-amz-sdk-checksum-algorithm")
            .or_else(|| header_str(headers, "x-amz-checksum-algorithm"))
            .map(|a| ChecksumAlgorithm::from(a.to_string()));
        $builder
            .checksum_crc32(checksum("crc32"))
            .checksum_crc32c(checksum("crc32c"))
            .checksum_sha1(checksum("sha1"))
            .checksum_sha256(checksum("sha256"))
            .checksum_crc64nvme(checksum("crc64nvme"))
            .checksum_algorithm(algorithm)
    }};
}

/// A PutObject of `bucket/key` with what the PREPARE says about the object: `x-amz-meta-*`,
/// `x-amz-tagging`, `If-Match` / `If-None-Match`, `x-amz-checksum-*` (of the object bytes).
fn put_input(bucket: &str, key: &str, headers: &HeaderMap) -> S3Result<PutObjectInput> {
    let metadata: s3s::dto::Metadata = headers
        .iter()
        .filter_map(|(n, v)| {
            let name = n.as_str().strip_prefix("x-amz-meta-")?;
            Some((name.to_string(), v.to_str().ok()?.to_string()))
        })
        .collect();
    let builder = PutObjectInput::builder()
        .bucket(bucket.to_string())
        .key(key.to_string())
        .metadata((!metadata.is_empty()).then_some(metadata))
        .tagging(header_str(headers, "x-amz-tagging").map(String::from))
        .if_match(etag_condition(headers, "if-match")?)
        .if_none_match(etag_condition(headers, "if-none-match")?);
    with_checksums!(builder, headers)
        .build()
        .map_err(|e| refused(Fault::BadRequest(e.to_string().into())))
}

/// An UploadPart of part `number` of `upload_id`, with the PREPARE's `x-amz-checksum-*`.
fn part_input(
    bucket: &str,
    key: &str,
    upload_id: &str,
    number: i32,
    headers: &HeaderMap,
) -> S3Result<UploadPartInput> {
    let builder = UploadPartInput::builder()
        .bucket(bucket.to_string())
        .key(key.to_string())
        .upload_id(upload_id.to_string())
        .part_number(number);
    with_checksums!(builder, headers)
        .build()
        .map_err(|e| refused(Fault::BadRequest(e.to_string().into())))
}

#[async_trait::async_trait]
impl S3Route for ControlRoute {
    fn is_match(
        &self,
        method: &Method,
        uri: &Uri,
        _headers: &HeaderMap,
        _extensions: &mut Extensions,
    ) -> bool {
        method == Method::POST && is_control_path(uri.path())
    }

    /// Every check is the answer's own (their statuses are the protocol's, not S3's).
    async fn check_access(&self, _req: &mut S3Request<Body>) -> S3Result<()> {
        Ok(())
    }

    async fn call(&self, req: S3Request<Body>) -> S3Result<S3Response<Body>> {
        let answer = match self.answer(&req).await {
            Ok(a) => a,
            Err(e) => {
                let status = e.status_code().or_else(|| e.code().status_code());
                self.stats().count_reply(status.map_or(500, |s| s.as_u16()));
                return Err(e);
            }
        };
        self.stats().count_reply(answer.status);
        let mut resp = S3Response::new(Body::empty());
        resp.status =
            Some(StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
        for (name, value) in &answer.headers {
            if let Ok(v) = HeaderValue::from_str(value) {
                resp.headers.insert(*name, v);
            }
        }
        Ok(resp)
    }
}

/// The route set of the service: the counters and the hipobj-rc-v2 control requests (s3s takes
/// one custom route).
pub struct Routes {
    pub stats: access::StatsRoute,
    pub control: ControlRoute,
}

#[async_trait::async_trait]
impl S3Route for Routes {
    fn is_match(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        extensions: &mut Extensions,
    ) -> bool {
        self.stats.is_match(method, uri, headers, extensions)
            || self.control.is_match(method, uri, headers, extensions)
    }

    async fn check_access(&self, req: &mut S3Request<Body>) -> S3Result<()> {
        if is_control_path(req.uri.path()) {
            self.control.check_access(req).await
        } else {
            self.stats.check_access(req).await
        }
    }

    async fn call(&self, req: S3Request<Body>) -> S3Result<S3Response<Body>> {
        if is_control_path(req.uri.path()) {
            self.control.call(req).await
        } else {
            self.stats.call(req).await
        }
    }
}

/// The tests' SigV4 signer (shared with the integration tests).
#[cfg(test)]
#[path = "../../../tests/support/sigv4.rs"]
mod sigv4;

#[cfg(test)]
mod tests {
    //! The control requests through s3s with SigV4 on, two identities, and the in-memory RDMA
    //! port behind real worker threads: statuses, signatures, ownership, and that refused
    //! requests change nothing.
    use super::sigv4::{Placement, Signer, OTHER_SIGNER, TEST_CREDENTIALS, TEST_SIGNER};
    use super::*;
    use crate::access::BucketNames;
    use crate::backend::Backend;
    use crate::credentials::CredentialsTable;
    use crate::identity::HttpPeer;
    use crate::rdma::engine::EngineSettings;
    use crate::rdma::test_double::{DoublePort, QpLog};
    use crate::rdma::test_fixture;
    use bytes::Bytes;
    use hipobj::checksum::CrcAlgo;
    use hipobj::rcv2::{Cookie, Psn, Target};
    use hipobj::token::Token;
    use s3s::service::{S3Service, S3ServiceBuilder};
    use std::sync::Arc;
    use std::time::Duration;

    const CLIENT_IP: [u8; 4] = [10, 1, 2, 3];
    const RKEY: u32 = 0x31;
    const BASE: u64 = 0x5000_0000;
    const COOKIE: u32 = 0x1234_5678;

    struct Harness {
        _dir: tempfile::TempDir,
        service: S3Service,
        port: DoublePort,
        stats: Arc<Stats>,
        storage: Arc<dyn Backend>,
    }

    fn harness(rdma_on: bool) -> Harness {
        let settings = EngineSettings {
            v2: crate::config::V2Settings {
                data_timeout: Duration::from_millis(200),
                ..Default::default()
            },
            ..test_fixture::front_settings()
        };
        let test_fixture::Fixture {
            dir,
            port,
            engine,
            stats,
            storage,
        } = test_fixture::fixture_with(DoublePort::new(), &settings);
        let rdma = rdma_on.then(|| test_fixture::start_workers(engine, &stats));
        let s3 = HipobjS3::new(Arc::clone(&storage), rdma, Arc::clone(&stats));
        let mut builder = S3ServiceBuilder::new(s3.clone());
        let table = CredentialsTable::parse(std::path::Path::new("test"), TEST_CREDENTIALS)
            .expect("credentials");
        builder.set_auth(table);
        let policy = || AccessPolicy::new(Arc::clone(&storage), Arc::clone(&stats), false, true);
        builder.set_access(policy());
        builder.set_route(Routes {
            stats: access::StatsRoute::new(Arc::clone(&stats), false),
            control: ControlRoute::new(s3, policy(), false, true),
        });
        builder.set_validation(BucketNames);
        Harness {
            _dir: dir,
            service: builder.build(),
            port,
            stats,
            storage,
        }
    }

    struct Call<'a> {
        method: &'a str,
        target: &'a str,
        signer: Option<Signer>,
        signed: Vec<(&'a str, String)>,
        unsigned: Vec<(&'a str, String)>,
        peer: [u8; 4],
        body: &'a [u8],
    }

    fn post<'a>(path: &'a str, headers: Vec<(&'static str, String)>) -> Call<'a> {
        Call {
            method: "POST",
            target: path,
            signer: Some(TEST_SIGNER),
            signed: headers,
            unsigned: Vec::new(),
            peer: CLIENT_IP,
            body: b"",
        }
    }

    async fn send(h: &Harness, c: Call<'_>) -> (u16, http::HeaderMap, Bytes) {
        let host = "localhost:9000";
        let pairs: Vec<(&str, &str)> = c.signed.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let (target, mut all) = match c.signer {
            Some(s) => {
                let signed = s.sign(Placement::Header, c.method, host, c.target, &pairs, c.body);
                (signed.target, signed.headers)
            }
            None => (c.target.to_string(), Vec::new()),
        };
        all.extend(c.signed.iter().map(|(n, v)| (n.to_string(), v.clone())));
        all.extend(c.unsigned.iter().map(|(n, v)| (n.to_string(), v.clone())));
        let mut req = http::Request::builder()
            .method(c.method)
            .uri(target)
            .header("host", host);
        for (n, v) in &all {
            req = req.header(n.as_str(), v.as_str());
        }
        let mut req = req.body(Body::from(c.body.to_vec())).expect("request");
        req.extensions_mut().insert(HttpPeer(c.peer.into()));
        let resp = h.service.call(req).await.expect("response");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let mut body = resp.into_body();
        let bytes = body.store_all_limited(1 << 24).await.expect("body");
        (status, headers, bytes)
    }

    fn get<'h>(h: &'h http::HeaderMap) -> impl Fn(&str) -> Option<&'h str> {
        move |n| h.get(n).and_then(|v| v.to_str().ok())
    }

    async fn bucket(h: &Harness, signer: Signer, name: &str) {
        let path = format!("/{name}");
        let call = Call {
            method: "PUT",
            target: &path,
            signer: Some(signer),
            signed: Vec::new(),
            unsigned: Vec::new(),
            peer: CLIENT_IP,
            body: b"",
        };
        assert_eq!(send(h, call).await.0, 200);
    }

    fn object(h: &Harness, bucket: &str, key: &str, data: &[u8]) {
        let mut w = h
            .storage
            .create_write(bucket, key, Default::default())
            .expect("writer");
        w.append(data).expect("append");
        w.commit().expect("commit");
    }

    fn client_token() -> Token {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&CLIENT_IP);
        Token {
            transport: Transport::Rc,
            qp_num: 0x4242,
            gid,
            rkey: 0,
            remote_addr: 0,
            length: 0,
            port: 1,
            lid: 0,
        }
    }

    fn prepare_req(op: Op, bucket: &str, key: &str, size: u64) -> PrepareRequest {
        PrepareRequest {
            token: client_token(),
            psn: Psn::new(0x00ab_cdef).expect("psn"),
            cookie: Cookie::new(COOKIE).expect("cookie"),
            op,
            target: Target {
                bucket: bucket.into(),
                key: key.into(),
                query: Vec::new(),
            },
            size,
            offset: 0,
        }
    }

    fn ready_req(a: &PrepareAnswer, cookie: u32) -> Vec<(&'static str, String)> {
        ReadyRequest {
            session: a.session,
            cookie: Cookie::new(cookie).expect("cookie"),
            qpn: 0x4242,
            mr_addr: BASE,
            mr_rkey: RKEY,
        }
        .headers()
    }

    /// PREPARE answered 200, decoded with the client's own checks.
    async fn prepared(h: &Harness, req: &PrepareRequest) -> PrepareAnswer {
        let (status, headers, body) = send(h, post(rcv2::PREPARE_PATH, req.headers())).await;
        assert_eq!(status, 200, "{body:?}");
        PrepareAnswer::from_headers(get(&headers)).expect("a valid PREPARE answer")
    }

    fn nothing_prepared(h: &Harness) {
        assert!(h.port.log().is_empty(), "{:?}", h.port.log());
        assert!(h.stats.to_json().contains("\"v2_prepared\":0"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_get_through_prepare_and_ready() {
        let h = harness(true);
        bucket(&h, TEST_SIGNER, "bkt").await;
        let data = sigv4_pattern(5000);
        object(&h, "bkt", "obj", &data);
        h.port.add_region(RKEY, BASE, vec![0; 5000]);
        let answer = prepared(&h, &prepare_req(Op::Get, "bkt", "obj", 5000)).await;
        assert_eq!(answer.staging, None);
        let (status, headers, _) =
            send(&h, post(rcv2::READY_PATH, ready_req(&answer, COOKIE))).await;
        assert_eq!(status, 200);
        let fin = FinalAnswer::from_headers(get(&headers)).expect("FINAL");
        assert_eq!(fin.cookie.get(), COOKIE);
        assert_eq!(fin.bytes, 5000);
        assert_eq!(h.port.region(RKEY), data);
        // The whole object moved: FINAL names its stored CRC64NVME, which is what landed.
        let named = fin
            .checksum
            .as_deref()
            .expect("FINAL's x-amz-rdma-checksum");
        let stored = hipobj::checksum::StoredChecksum::parse(named).expect("well formed");
        assert_eq!(
            stored.check_bytes(&h.port.region(RKEY)),
            Ok(Ok(CrcAlgo::Crc64Nvme.into()))
        );
        // A second READY: 409, nothing moves again.
        let posted = h.port.posted().len();
        let (status, ..) = send(&h, post(rcv2::READY_PATH, ready_req(&answer, COOKIE))).await;
        assert_eq!(status, 409);
        assert_eq!(h.port.posted().len(), posted);
        let json = h.stats.to_json();
        for c in ["\"v2_prepared\":1", "\"v2_ready\":1", "\"replies_409\":1"] {
            assert!(json.contains(c), "{c} in {json}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_put_stores_the_clients_write_like_any_put() {
        let h = harness(true);
        bucket(&h, TEST_SIGNER, "bkt").await;
        let data = sigv4_pattern(3000);
        let mut req = prepare_req(Op::Put, "bkt", "up", 3000);
        req.target.key = "dir/a b+c".into();
        let mut headers = req.headers();
        headers.push(("x-amz-meta-color", "blue".into()));
        let (status, answer_headers, body) = send(&h, post(rcv2::PREPARE_PATH, headers)).await;
        assert_eq!(status, 200, "{body:?}");
        let answer = PrepareAnswer::from_headers(get(&answer_headers)).expect("answer");
        let (addr, rkey) = answer.staging.expect("PUT staging advertised");
        assert_ne!((addr, rkey), (0, 0));
        h.port
            .client_write_with_imm(answer.server.qp_num, rkey, 0, &data, COOKIE)
            .expect("client write");
        let (status, headers, _) =
            send(&h, post(rcv2::READY_PATH, ready_req(&answer, COOKIE))).await;
        assert_eq!(status, 200);
        let fin = FinalAnswer::from_headers(get(&headers)).expect("FINAL");
        assert_eq!(fin.bytes, 3000);
        let info = h.storage.head_object("bkt", "dir/a b+c").expect("stored");
        assert_eq!(fin.etag, Some(format!("\"{}\"", info.etag)));
        assert_eq!(
            info.meta.user.get("color").map(String::as_str),
            Some("blue")
        );
        // If-None-Match: * on the existing key: refused at PREPARE, no QP made.
        let before = h.port.log().len();
        let mut headers = req.headers();
        headers.push(("if-none-match", "*".into()));
        let (status, ..) = send(&h, post(rcv2::PREPARE_PATH, headers)).await;
        assert_eq!(status, 412);
        assert_eq!(h.port.log().len(), before);
    }

    /// Issue 36: a PREPARE (GET or PUT) naming a missing bucket is 404 `NoSuchBucket`, one
    /// naming a missing key 404 `NoSuchKey`, with the S3 code in the XML body; nothing prepared.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_missing_bucket_or_key_is_refused_with_its_own_code() {
        let h = harness(true);
        bucket(&h, TEST_SIGNER, "bkt").await;
        for (op, bucket, key, code) in [
            (Op::Get, "nob", "k", "NoSuchBucket"),
            (Op::Put, "nob", "k", "NoSuchBucket"),
            (Op::Get, "bkt", "missing", "NoSuchKey"),
        ] {
            let req = prepare_req(op, bucket, key, 10);
            let (status, headers, body) = send(&h, post(rcv2::PREPARE_PATH, req.headers())).await;
            assert_eq!(status, 404, "{bucket}/{key}");
            let text = String::from_utf8_lossy(&body);
            assert!(text.contains(&format!("<Code>{code}</Code>")), "{text}");
            assert_eq!(
                headers
                    .get(http::header::CONTENT_TYPE)
                    .map(|v| v.as_bytes()),
                Some(&b"application/xml"[..])
            );
        }
        nothing_prepared(&h);
        assert!(h.stats.to_json().contains("\"replies_404\":3"));
    }

    /// Refusals are S3 errors of the one model: the status's code (412 is
    /// `PreconditionFailed`, not an internal error), and 503 carries `Retry-After`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn refusals_carry_the_s3_code_of_their_status() {
        let h = harness(true);
        bucket(&h, TEST_SIGNER, "bkt").await;
        object(&h, "bkt", "k", b"0123456789");
        let mut headers = prepare_req(Op::Put, "bkt", "k", 10).headers();
        headers.push(("if-none-match", "*".into()));
        let (status, _, body) = send(&h, post(rcv2::PREPARE_PATH, headers)).await;
        assert_eq!(status, 412);
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("<Code>PreconditionFailed</Code>"), "{text}");
        let mut headers = prepare_req(Op::Get, "bkt", "k", 10).headers();
        headers[0].1 = "hipobj-rc-v1".into();
        let (status, _, body) = send(&h, post(rcv2::PREPARE_PATH, headers)).await;
        assert_eq!(status, 501);
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("<Code>NotImplemented</Code>"), "{text}");
        assert!(h.stats.to_json().contains("\"replies_412\":1"));
    }

    /// The PREPARE's `x-amz-checksum-*` describes the moved bytes: a wrong CRC32 is READY
    /// 400 `BadDigest` and stores nothing (as a PutObject's body would be refused).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_put_checksum_in_the_prepare_is_checked() {
        let h = harness(true);
        bucket(&h, TEST_SIGNER, "bkt").await;
        let data = sigv4_pattern(3000);
        let mut headers = prepare_req(Op::Put, "bkt", "sum", 3000).headers();
        headers.push(("x-amz-checksum-crc32", "AAAAAA==".into()));
        let (status, answer_headers, body) = send(&h, post(rcv2::PREPARE_PATH, headers)).await;
        assert_eq!(status, 200, "{body:?}");
        let answer = PrepareAnswer::from_headers(get(&answer_headers)).expect("answer");
        let (_, rkey) = answer.staging.expect("PUT staging advertised");
        h.port
            .client_write_with_imm(answer.server.qp_num, rkey, 0, &data, COOKIE)
            .expect("client write");
        let (status, _, body) = send(&h, post(rcv2::READY_PATH, ready_req(&answer, COOKIE))).await;
        assert_eq!(status, 400);
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("<Code>BadDigest</Code>"), "{text}");
        assert!(text.contains("CRC32"), "{text}");
        assert!(h.storage.head_object("bkt", "sum").is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn another_protocol_or_rdma_off_is_501_with_the_marker() {
        for rdma_on in [true, false] {
            let h = harness(rdma_on);
            bucket(&h, TEST_SIGNER, "bkt").await;
            let mut headers = prepare_req(Op::Get, "bkt", "k", 10).headers();
            if rdma_on {
                headers[0].1 = "hipobj-rc-v1".into();
            }
            for path in [rcv2::PREPARE_PATH, rcv2::READY_PATH, rcv2::CANCEL_PATH] {
                let (status, resp, _) = send(&h, post(path, headers.clone())).await;
                assert_eq!(status, 501, "{path}");
                assert_eq!(
                    resp.get(header::PROTOCOL_STATUS).map(|v| v.as_bytes()),
                    Some(rcv2::UNSUPPORTED.as_bytes())
                );
            }
            nothing_prepared(&h);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unsigned_requests_and_unsigned_rdma_headers_are_403() {
        let h = harness(true);
        bucket(&h, TEST_SIGNER, "bkt").await;
        let headers = prepare_req(Op::Get, "bkt", "k", 10).headers();
        let mut unsigned = post(rcv2::PREPARE_PATH, headers.clone());
        unsigned.signer = None;
        assert_eq!(send(&h, unsigned).await.0, 403);
        // Every x-amz-rdma-* header signed but one.
        for i in 0..headers.len() {
            let mut c = post(rcv2::PREPARE_PATH, headers.clone());
            let left_out = c.signed.remove(i);
            c.unsigned.push(left_out);
            assert_eq!(send(&h, c).await.0, 403, "{:?} unsigned", headers[i].0);
        }
        nothing_prepared(&h);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn malformed_headers_get_the_codecs_status_and_change_nothing() {
        let h = harness(true);
        bucket(&h, TEST_SIGNER, "bkt").await;
        object(&h, "bkt", "k", b"0123456789");
        let base = prepare_req(Op::Get, "bkt", "k", 10).headers();
        let with = |name: &str, value: &str| -> Vec<(&'static str, String)> {
            base.iter()
                .map(|(n, v)| {
                    (
                        *n,
                        if *n == name {
                            value.to_string()
                        } else {
                            v.clone()
                        },
                    )
                })
                .collect()
        };
        let cases = [
            (with(header::PSN, "000000"), 400),
            (with(header::COOKIE, "00000000"), 400),
            (with(header::SIZE, "2147483648"), 413),
            (with(header::SIZE, "0"), 400),
            (with(header::TARGET, "bkt/k"), 400),
            (with(header::TOKEN, "01"), 400),
            (with(header::OP, "DELETE"), 400),
        ];
        for (headers, want) in cases {
            let (status, ..) = send(&h, post(rcv2::PREPARE_PATH, headers.clone())).await;
            assert_eq!(status, want, "{headers:?}");
        }
        nothing_prepared(&h);
        let short_session = vec![
            (header::PROTOCOL, rcv2::PROTOCOL.to_string()),
            (header::SESSION, "0".repeat(31)),
            (header::COOKIE, format!("{COOKIE:08x}")),
            (header::QPN, "4242".into()),
            (header::MR_ADDR, format!("{BASE:x}")),
            (header::MR_RKEY, format!("{RKEY:x}")),
        ];
        assert_eq!(
            send(&h, post(rcv2::READY_PATH, short_session.clone()))
                .await
                .0,
            400
        );
        let cancel = short_session[..2].to_vec();
        assert_eq!(send(&h, post(rcv2::CANCEL_PATH, cancel)).await.0, 400);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn gid_not_the_peer_and_a_bucket_of_another_identity_are_403() {
        let h = harness(true);
        bucket(&h, TEST_SIGNER, "mine").await;
        bucket(&h, OTHER_SIGNER, "theirs").await;
        object(&h, "theirs", "k", b"secret");
        let mut from_elsewhere = post(
            rcv2::PREPARE_PATH,
            prepare_req(Op::Get, "mine", "k", 10).headers(),
        );
        from_elsewhere.peer = [10, 9, 9, 9];
        assert_eq!(send(&h, from_elsewhere).await.0, 403);
        for op in [Op::Get, Op::Put] {
            let c = post(
                rcv2::PREPARE_PATH,
                prepare_req(op, "theirs", "k", 6).headers(),
            );
            assert_eq!(send(&h, c).await.0, 403);
        }
        nothing_prepared(&h);
    }

    /// Rule 9.4 for every GID form on the v2 route: a PREPARE whose token GID is link-local or
    /// another host's IPv6 address is 403 and prepares nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_link_local_or_foreign_ipv6_gid_is_403() {
        let h = harness(true);
        bucket(&h, TEST_SIGNER, "mine").await;
        object(&h, "mine", "k", b"0123456789");
        for gid in ["fe80::200:ff:fe00:1", "2001:db8::1"] {
            let mut p = prepare_req(Op::Get, "mine", "k", 10);
            p.token.gid = gid.parse::<std::net::Ipv6Addr>().expect("GID").octets();
            let (status, _, body) = send(&h, post(rcv2::PREPARE_PATH, p.headers())).await;
            assert_eq!(status, 403, "GID {gid}: {body:?}");
        }
        nothing_prepared(&h);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn replays_from_another_identity_or_address_and_forged_cookies_move_nothing() {
        let h = harness(true);
        bucket(&h, TEST_SIGNER, "bkt").await;
        let data = sigv4_pattern(100);
        object(&h, "bkt", "obj", &data);
        h.port.add_region(RKEY, BASE, vec![0; 100]);
        let answer = prepared(&h, &prepare_req(Op::Get, "bkt", "obj", 100)).await;
        let mut other_identity = post(rcv2::READY_PATH, ready_req(&answer, COOKIE));
        other_identity.signer = Some(OTHER_SIGNER);
        assert_eq!(send(&h, other_identity).await.0, 404);
        let mut other_address = post(rcv2::READY_PATH, ready_req(&answer, COOKIE));
        other_address.peer = [10, 1, 2, 4];
        assert_eq!(send(&h, other_address).await.0, 404);
        let forged = post(rcv2::READY_PATH, ready_req(&answer, COOKIE ^ 0xff));
        assert_eq!(send(&h, forged).await.0, 403);
        // A foreign CANCEL is 204 and changes nothing either.
        let cancel = CancelRequest {
            session: answer.session,
        };
        let mut foreign = post(rcv2::CANCEL_PATH, cancel.headers());
        foreign.signer = Some(OTHER_SIGNER);
        assert_eq!(send(&h, foreign).await.0, 204);
        assert!(h.port.posted().is_empty());
        assert!(h.port.region(RKEY).iter().all(|&b| b == 0));
        let (status, ..) = send(&h, post(rcv2::READY_PATH, ready_req(&answer, COOKIE))).await;
        assert_eq!(status, 200);
        assert_eq!(h.port.region(RKEY), data);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cancel_is_204_and_reclaims_the_callers_session() {
        let h = harness(true);
        bucket(&h, TEST_SIGNER, "bkt").await;
        let answer = prepared(&h, &prepare_req(Op::Put, "bkt", "p", 64)).await;
        let cancel = CancelRequest {
            session: answer.session,
        };
        for _ in 0..2 {
            let (status, headers, _) = send(&h, post(rcv2::CANCEL_PATH, cancel.headers())).await;
            assert_eq!(status, 204);
            assert_eq!(
                headers.get(header::PROTOCOL).map(|v| v.as_bytes()),
                Some(rcv2::PROTOCOL.as_bytes())
            );
        }
        assert!(h
            .port
            .log()
            .contains(&QpLog::Destroyed(answer.server.qp_num)));
        assert_eq!(h.port.windows(), 0);
        let unknown = CancelRequest {
            session: Session([7; 16]),
        };
        assert_eq!(
            send(&h, post(rcv2::CANCEL_PATH, unknown.headers())).await.0,
            204
        );
        assert!(h.stats.to_json().contains("\"v2_cancelled\":1"));
        assert!(h.storage.head_object("bkt", "p").is_err());
    }

    fn sigv4_pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }
}
