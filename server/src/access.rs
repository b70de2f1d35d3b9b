//! Who may do what (docs/protocol.md section 9, server rules 1, 2, 4, 5), as s3s's access hook: it
//! runs after s3s verified the request's SigV4 signature and before any operation (so before
//! any pairing or RDMA), and leaves the request's [`Requester`] in its extensions for the
//! operation and the pairing table.
//!
//! - Identity: the SigV4 access key; `anonymous` only when serving with `--anonymous`, else an
//!   unsigned request is refused.
//! - Rule 9.2: with authentication on, a request carrying `x-amz-rdma-token` must list it in
//!   its SigV4 `SignedHeaders` (header form or presigned `X-Amz-SignedHeaders`).
//! - Rule 9.4: the token's client GID must name the HTTP peer, in every form
//!   ([`check_client_gid`], also hipobj-rc-v2's PREPARE); a link-local GID is refused.
//! - Rule 9.1: a bucket and its objects are only for the identity that owns the bucket (in
//!   gateway mode the store's own access rules decide instead, for the same identity).
//! - Rule 9.5: [`StatsRoute`] serves the counters to authenticated identities, or when serving
//!   anonymously to loopback peers only.
//!
//! A refused token request gets status 403 with `x-amz-rdma-reply: 403`.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use http::{HeaderMap, Uri};
use hyper::http::Extensions;
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::Credentials;
use s3s::path::S3Path;
use s3s::route::S3Route;
use s3s::validation::NameValidation;
use s3s::{s3_error, Body, S3Error, S3ErrorCode, S3Request, S3Response, S3Result};
use tracing::{debug, warn};

use crate::backend::Backend;
use crate::error::{self, Fault, RDMA_TOKEN};
use crate::identity::{normalize_ip, HttpPeer, Identity, Requester};
use crate::ownership::{self, Ownership};
use crate::rdma::token_header::parse_token_header;
use crate::s3::rcv2::CONTROL_BUCKET;
use crate::stats::Stats;

/// Path of the counters endpoint.
pub const STATS_PATH: &str = "/_hipobj/stats";
/// Its first path segment, which s3s parses as a bucket name before routing.
const STATS_BUCKET: &str = "_hipobj";

/// Bucket names: AWS's rules, plus the stats path's `_hipobj` and the hipobj-rc-v2 control
/// paths' `.hipobj-rc`, so that s3s's path parsing lets `GET /_hipobj/stats` reach
/// [`StatsRoute`] and `POST /.hipobj-rc/...` the control route. The access hook refuses both
/// for everything else, so no bucket can take those names.
pub struct BucketNames;

impl NameValidation for BucketNames {
    fn validate_bucket_name(&self, name: &str) -> bool {
        name == STATS_BUCKET || name == CONTROL_BUCKET || s3s::path::check_bucket_name(name)
    }
}

/// The access hook.
pub struct AccessPolicy {
    storage: Arc<dyn Backend>,
    stats: Arc<Stats>,
    /// `--anonymous`: unsigned requests are the identity `anonymous`, rule 9.2 does not apply.
    anonymous: bool,
    /// Rule 9.4 on (not `--allow-gid-peer-mismatch`).
    check_gid_peer: bool,
}

impl AccessPolicy {
    pub fn new(
        storage: Arc<dyn Backend>,
        stats: Arc<Stats>,
        anonymous: bool,
        check_gid_peer: bool,
    ) -> Self {
        AccessPolicy {
            storage,
            stats,
            anonymous,
            check_gid_peer,
        }
    }

    /// The request's identity (rule 9.1): its access key, or `anonymous` when serving so.
    pub fn identity(&self, credentials: Option<&Credentials>) -> S3Result<Identity> {
        match credentials {
            Some(c) => Ok(Identity::new(&c.access_key)),
            None if self.anonymous => Ok(Identity::anonymous()),
            None => Err(s3_error!(AccessDenied, "a SigV4 signature is required")),
        }
    }

    /// Rules 9.2 and 9.4 for a request that carries a token.
    fn check_token(&self, headers: &HeaderMap, uri: &Uri, peer: IpAddr) -> S3Result<()> {
        if !self.anonymous && !token_is_signed(headers, uri) {
            debug!(%peer, "x-amz-rdma-token not in SignedHeaders: 403");
            return Err(s3_error!(
                AccessDenied,
                "x-amz-rdma-token must be listed in the SigV4 SignedHeaders"
            ));
        }
        // A malformed token passes here and is answered 400 by the operation.
        let Some(token) = headers
            .get(RDMA_TOKEN)
            .and_then(|v| parse_token_header(v.as_bytes()).ok())
        else {
            return Ok(());
        };
        check_client_gid(&token.gid, peer, self.check_gid_peer).map_err(S3Error::from)
    }

    /// Rule 9.1 for the bucket the request names.
    pub async fn check_bucket(&self, path: &S3Path, op: &str, identity: &Identity) -> S3Result<()> {
        let bucket = match path {
            S3Path::Root => return Ok(()),
            S3Path::Bucket { bucket } | S3Path::Object { bucket, .. } => bucket.to_string(),
        };
        if bucket == STATS_BUCKET || bucket == CONTROL_BUCKET {
            return Err(S3Error::new(S3ErrorCode::InvalidBucketName));
        }
        if !self.storage.records_owners() {
            // Gateway mode: the store applies its own access rules to the identity the
            // gateway acts for (docs/gateway.md, Authentication).
            return Ok(());
        }
        let storage = Arc::clone(&self.storage);
        let b = bucket.clone();
        let owner = tokio::task::spawn_blocking(move || ownership::owner_of(storage.as_ref(), &b))
            .await
            .map_err(error::internal)?
            .map_err(error::internal)?;
        match owner {
            // The operation answers NoSuchBucket (or creates it).
            Ownership::NoBucket => Ok(()),
            Ownership::Owner(o) if o == *identity => Ok(()),
            _ if op == "CreateBucket" => Err(S3Error::new(S3ErrorCode::BucketAlreadyExists)),
            Ownership::Owner(_) | Ownership::Unowned => {
                debug!(%bucket, %identity, op, "bucket of another identity: 403");
                Err(s3_error!(
                    AccessDenied,
                    "the bucket belongs to another identity"
                ))
            }
        }
    }
}

#[async_trait::async_trait]
impl S3Access for AccessPolicy {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let token_request = cx.headers().contains_key(RDMA_TOKEN);
        let refused = |e: S3Error| error::refused(e, token_request, &self.stats);
        let identity = self.identity(cx.credentials()).map_err(refused)?;
        let peer = http_peer(cx.extensions_mut())?;
        if token_request {
            self.check_token(cx.headers(), cx.uri(), peer)
                .map_err(refused)?;
        }
        self.check_bucket(cx.s3_path(), cx.s3_op().name(), &identity)
            .await
            .map_err(refused)?;
        // An operation that reads a second bucket (CopyObject, UploadPartCopy) names it in a
        // header; it must be the requester's too.
        if let Some(source) = copy_source_bucket(cx.headers()) {
            let path = S3Path::Bucket {
                bucket: source.into(),
            };
            self.check_bucket(&path, "CopySource", &identity)
                .await
                .map_err(refused)?;
        }
        cx.extensions_mut().insert(Requester::new(peer, identity));
        Ok(())
    }
}

/// The HTTP peer address the accept loop tagged the request with.
pub fn http_peer(extensions: &Extensions) -> S3Result<IpAddr> {
    match extensions.get::<HttpPeer>() {
        Some(p) => Ok(p.0),
        None => {
            warn!("request without its HTTP peer address; refused");
            Err(s3_error!(InternalError, "no peer address"))
        }
    }
}

/// The requester the access hook recorded (every operation runs after it).
pub fn requester(extensions: &Extensions) -> S3Result<&Requester> {
    extensions
        .get::<Requester>()
        .ok_or_else(|| s3_error!(InternalError, "request without a checked requester"))
}

/// The bucket of `x-amz-copy-source: [/]bucket/key[?versionId=..]` (percent-encoded).
fn copy_source_bucket(headers: &HeaderMap) -> Option<String> {
    let raw = headers.get("x-amz-copy-source")?.to_str().ok()?;
    let decoded = urlencoding::decode(raw).ok()?;
    let bucket = decoded.trim_start_matches('/').split('/').next()?;
    Some(bucket.to_string())
}

/// Rule 9.4's refusal of a GID that names another address than the HTTP peer's.
const GID_NOT_THE_PEER: &str = "the token's client GID is not the address this request came from";
/// Rule 9.4's refusal of a link-local GID.
const GID_LINK_LOCAL: &str =
    "the token's client GID is link-local (fe80::/10): no peer address can vouch for it";

/// Rule 9.4 (docs/protocol.md) for every form of a token's client GID, on every route that takes
/// one (v1 token requests in [`AccessPolicy`], hipobj-rc-v2's PREPARE): an IPv4-mapped GID
/// (`::ffff:a.b.c.d`) must be the IPv4 peer, any other GID the IPv6 peer, both compared as
/// addresses after [`normalize_ip`] (a dual-stack listener's `::ffff:a.b.c.d` peer is
/// `a.b.c.d`); a link-local GID (`fe80::/10`) is refused, since no peer address can vouch for it.
/// `check_gid_peer` false (`--allow-gid-peer-mismatch`) accepts every GID. A refusal is 403
/// `AccessDenied`, answered before any QP is touched.
pub fn check_client_gid(gid: &[u8; 16], peer: IpAddr, check_gid_peer: bool) -> Result<(), Fault> {
    if !check_gid_peer {
        return Ok(());
    }
    let gid_ip = Ipv6Addr::from(*gid);
    if gid_ip.is_unicast_link_local() {
        debug!(%peer, %gid_ip, "link-local client GID: 403");
        return Err(Fault::Forbidden(GID_LINK_LOCAL.into()));
    }
    let gid_addr = normalize_ip(IpAddr::V6(gid_ip));
    if gid_addr != normalize_ip(peer) {
        debug!(%peer, gid = %gid_addr, "client GID is not the HTTP peer: 403");
        return Err(Fault::Forbidden(GID_NOT_THE_PEER.into()));
    }
    Ok(())
}

/// Whether the request's SigV4 signature covers `x-amz-rdma-token` (see [`is_signed`]).
pub fn token_is_signed(headers: &HeaderMap, uri: &Uri) -> bool {
    is_signed(headers, uri, RDMA_TOKEN)
}

/// Whether the request's SigV4 signature covers header `name`: the `SignedHeaders` of the
/// `Authorization` header, or the presigned query's `X-Amz-SignedHeaders`. s3s verified that
/// signature over exactly the headers that list names, so a listed header is a signed one.
pub fn is_signed(headers: &HeaderMap, uri: &Uri, name: &str) -> bool {
    let lists_token = |list: &str| list.split(';').any(|h| h.trim().eq_ignore_ascii_case(name));
    if let Some(auth) = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        return auth.starts_with("AWS4-HMAC-SHA256")
            && auth
                .split(',')
                .filter_map(|part| part.trim().split_once('='))
                .any(|(name, list)| {
                    name.trim_start_matches("AWS4-HMAC-SHA256").trim() == "SignedHeaders"
                        && lists_token(list)
                });
    }
    uri.query().is_some_and(|q| {
        form_urlencoded::parse(q.as_bytes())
            .any(|(name, list)| name == "X-Amz-SignedHeaders" && lists_token(&list))
    })
}

/// `GET /_hipobj/stats` as an s3s custom route (after s3s's signature check).
pub struct StatsRoute {
    stats: Arc<Stats>,
    anonymous: bool,
}

impl StatsRoute {
    pub fn new(stats: Arc<Stats>, anonymous: bool) -> Self {
        StatsRoute { stats, anonymous }
    }
}

#[async_trait::async_trait]
impl S3Route for StatsRoute {
    fn is_match(
        &self,
        method: &http::Method,
        uri: &Uri,
        _headers: &HeaderMap,
        _extensions: &mut Extensions,
    ) -> bool {
        method == http::Method::GET && uri.path() == STATS_PATH
    }

    async fn check_access(&self, req: &mut S3Request<Body>) -> S3Result<()> {
        if req.credentials.is_some() {
            return Ok(());
        }
        let peer = http_peer(&req.extensions)?;
        if self.anonymous && peer.is_loopback() {
            return Ok(());
        }
        Err(s3_error!(
            AccessDenied,
            "the counters are served to authenticated identities (loopback only when anonymous)"
        ))
    }

    async fn call(&self, _req: S3Request<Body>) -> S3Result<S3Response<Body>> {
        let mut resp = S3Response::new(Body::from(self.stats.to_json()));
        resp.headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        Ok(resp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(auth: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_str(auth).expect("ascii"),
        );
        h
    }

    #[test]
    fn signed_headers_of_the_header_form() {
        let uri: Uri = "/b/k".parse().expect("uri");
        let signed = "AWS4-HMAC-SHA256 Credential=ak/20260101/us-east-1/s3/aws4_request, \
                      SignedHeaders=host;x-amz-date;x-amz-rdma-token, Signature=00";
        assert!(token_is_signed(&headers(signed), &uri));
        let unsigned = "AWS4-HMAC-SHA256 Credential=ak/20260101/us-east-1/s3/aws4_request, \
                        SignedHeaders=host;x-amz-date, Signature=00";
        assert!(!token_is_signed(&headers(unsigned), &uri));
        // The token's name elsewhere (a credential, a longer header name) is not a listing.
        let tricky =
            "AWS4-HMAC-SHA256 Credential=x-amz-rdma-token/20260101/us-east-1/s3/aws4_request, \
                      SignedHeaders=host;x-amz-rdma-token-x, Signature=00";
        assert!(!token_is_signed(&headers(tricky), &uri));
        assert!(!token_is_signed(
            &headers("AWS ak:sig x-amz-rdma-token"),
            &uri
        ));
        assert!(!token_is_signed(&HeaderMap::new(), &uri));
    }

    #[test]
    fn signed_headers_of_a_presigned_url() {
        let signed: Uri = "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-SignedHeaders=host%3Bx-amz-rdma-token&X-Amz-Signature=00"
            .parse()
            .expect("uri");
        assert!(token_is_signed(&HeaderMap::new(), &signed));
        let unsigned: Uri =
            "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-SignedHeaders=host&x-amz-rdma-token=1"
                .parse()
                .expect("uri");
        assert!(!token_is_signed(&HeaderMap::new(), &unsigned));
    }

    #[test]
    fn copy_source_names_its_bucket() {
        let mut h = HeaderMap::new();
        assert_eq!(copy_source_bucket(&h), None);
        h.insert(
            "x-amz-copy-source",
            http::HeaderValue::from_static("/src%2Dbkt/a/b.txt"),
        );
        assert_eq!(copy_source_bucket(&h).as_deref(), Some("src-bkt"));
        h.insert(
            "x-amz-copy-source",
            http::HeaderValue::from_static("other/k?versionId=1"),
        );
        assert_eq!(copy_source_bucket(&h).as_deref(), Some("other"));
    }

    /// Rule 9.4 on, as by default.
    const CHECKED: bool = true;
    /// `--allow-gid-peer-mismatch`.
    const ALLOW_MISMATCH: bool = false;

    fn gid_of(addr: &str) -> [u8; 16] {
        addr.parse::<Ipv6Addr>().expect("an IPv6 address").octets()
    }

    fn peer(addr: &str) -> IpAddr {
        addr.parse().expect("an address")
    }

    /// The 403 of rule 9.4, with its message.
    fn assert_refused(verdict: Result<(), Fault>, message: &str) {
        let Err(fault) = verdict else {
            panic!("accepted; expected 403 {message:?}");
        };
        assert_eq!(fault.status(), 403);
        assert_eq!(fault.code(), S3ErrorCode::AccessDenied);
        assert_eq!(fault.message(), message);
    }

    #[test]
    fn an_ipv6_gid_of_another_host_is_refused() {
        let gid = gid_of("2001:db8::7");
        assert_refused(
            check_client_gid(&gid, peer("2001:db8::8"), CHECKED),
            GID_NOT_THE_PEER,
        );
        // Nor does an IPv4 peer match an IPv6 GID.
        assert_refused(
            check_client_gid(&gid, peer("10.0.0.7"), CHECKED),
            GID_NOT_THE_PEER,
        );
    }

    #[test]
    fn an_ipv6_gid_equal_to_the_ipv6_peer_is_accepted() {
        let gid = gid_of("2001:db8::7");
        assert_eq!(check_client_gid(&gid, peer("2001:db8::7"), CHECKED), Ok(()));
    }

    #[test]
    fn a_link_local_gid_is_refused() {
        for gid in ["fe80::1", "fe80::200:ff:fe00:1", "febf::1"] {
            let gid = gid_of(gid);
            // Even from the very same link-local address: a scope-less fe80:: names no host.
            for from in ["10.0.0.7", "fe80::1", "fe80::200:ff:fe00:1"] {
                assert_refused(check_client_gid(&gid, peer(from), CHECKED), GID_LINK_LOCAL);
            }
        }
    }

    #[test]
    fn a_link_local_gid_is_accepted_with_the_opt_out() {
        let gid = gid_of("fe80::200:ff:fe00:1");
        assert_eq!(
            check_client_gid(&gid, peer("10.0.0.7"), ALLOW_MISMATCH),
            Ok(())
        );
    }

    #[test]
    fn an_ipv4_mapped_gid_of_another_host_is_refused() {
        let gid = gid_of("::ffff:10.0.0.2");
        for from in ["10.0.0.3", "::ffff:10.0.0.3", "2001:db8::2"] {
            assert_refused(
                check_client_gid(&gid, peer(from), CHECKED),
                GID_NOT_THE_PEER,
            );
        }
        // The opt-out turns every check off, this one included.
        assert_eq!(
            check_client_gid(&gid, peer("10.0.0.3"), ALLOW_MISMATCH),
            Ok(())
        );
    }

    #[test]
    fn a_matching_ipv4_mapped_gid_is_accepted() {
        let gid = gid_of("::ffff:10.0.0.2");
        // The IPv4 peer, and the same peer as a dual-stack listener reports it.
        for from in ["10.0.0.2", "::ffff:10.0.0.2"] {
            assert_eq!(
                check_client_gid(&gid, peer(from), CHECKED),
                Ok(()),
                "{from}"
            );
        }
    }
}
