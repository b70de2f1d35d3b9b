//! Gateway mode, requests without a token: forwarded to the store as they came (method, target,
//! headers including `Host` and the client's own SigV4 `Authorization`, body streamed), and the
//! store's answer streamed back. The store authenticates them and applies its full S3 semantics
//! (versioning, ACLs, lifecycle, ...); the gateway adds nothing and keeps nothing.
//!
//! The client is hyper-util's (with hyper-rustls), not the project's S3 client
//! (`hipobj-s3client`, reqwest): reqwest takes only a WHATWG `Url`, which resolves dot segments
//! (`/b/a/../k`, `/b/a/%2e%2e/k` -> `/b/k`) and re-encodes (`'` in a query -> `%27`), while the
//! request forwarded here carries the client's own SigV4 signature over the path as sent (S3
//! does not normalise it): the target must reach the store byte for byte, which `http::Uri`
//! keeps. reqwest is itself built on these crates (hyper, hyper-util's client, hyper-rustls), so
//! the gateway has one HTTP stack; nothing is signed, encoded or parsed here (the store's answer
//! is streamed back as it came, and our own 503 comes from the server's one error model).

use http::header::{HeaderMap, HeaderName};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use s3s::{Body, HttpResponse};
use tracing::{debug, warn};

use crate::backend::s3proxy::Endpoint;
use crate::error::{self, Fault, RDMA_TOKEN};
use crate::tls::{error_chain, no_roots_config, TlsError};

/// Headers that belong to one hop, never forwarded (RFC 9110 7.6.1), plus `Expect`: the
/// gateway already answered `100 Continue` to the client and sends the body at once.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
    "expect",
];

/// Whether a request carries an RDMA token (header, or a presigned URL's query parameter).
pub fn has_token(req: &http::Request<Incoming>) -> bool {
    req.headers().contains_key(RDMA_TOKEN)
        || req
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|p| p.starts_with("x-amz-rdma-token=")))
}

#[derive(Clone)]
pub struct Passthrough {
    endpoint: Endpoint,
    client: Client<HttpsConnector<HttpConnector>, Incoming>,
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        headers.remove(n);
    }
    for n in HOP_BY_HOP {
        headers.remove(n);
    }
}

/// 503 ServiceUnavailable with `Retry-After`: the store could not be reached (revision 5,
/// rule 2), in the one error model.
fn unavailable(why: &str) -> HttpResponse {
    error::http_response(Fault::Unavailable(why.to_string()).into())
}

impl Passthrough {
    /// The pass-through to `endpoint`: plain HTTP, or TLS verified as the endpoint says.
    pub fn new(endpoint: Endpoint) -> Result<Passthrough, TlsError> {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.enforce_http(false);
        // The URL's scheme (Endpoint::base_url) picks TLS or not; a plain-HTTP store never
        // uses the (root-less) TLS settings.
        let mut tls = match endpoint.tls_config()? {
            Some(tls) => (*tls).clone(),
            None => no_roots_config()?,
        };
        // hyper-rustls sets ALPN itself (from `enable_http1`).
        tls.alpn_protocols.clear();
        let connector = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Passthrough { endpoint, client })
    }

    /// Forward `req` to the store and stream its answer back.
    pub async fn forward(&self, req: http::Request<Incoming>) -> HttpResponse {
        let (mut parts, body) = req.into_parts();
        let target = parts
            .uri
            .path_and_query()
            .map_or("/", |pq| pq.as_str())
            .to_string();
        let uri = match format!("{}{}", self.endpoint.base_url(), target).parse::<http::Uri>() {
            Ok(u) => u,
            Err(e) => return unavailable(&format!("bad request target: {e}")),
        };
        parts.uri = uri;
        // The client signed its own `Host`: it goes to the store unchanged.
        strip_hop_by_hop(&mut parts.headers);
        let method = parts.method.clone();
        match self
            .client
            .request(http::Request::from_parts(parts, body))
            .await
        {
            Ok(resp) => {
                debug!(%method, %target, status = resp.status().as_u16(), "passed through");
                let (mut parts, body) = resp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                if parts.headers.contains_key(http::header::CONTENT_LENGTH) {
                    parts.headers.remove(http::header::TRANSFER_ENCODING);
                }
                http::Response::from_parts(parts, Body::from(body))
            }
            Err(e) => {
                let why = error_chain(&e);
                warn!(%method, %target, error = %why, "backend store unreachable");
                unavailable(&why)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_are_dropped() {
        let mut h = HeaderMap::new();
        h.insert("connection", "close, x-private".parse().unwrap());
        h.insert("x-private", "1".parse().unwrap());
        h.insert("expect", "100-continue".parse().unwrap());
        h.insert("authorization", "AWS4-HMAC-SHA256 ...".parse().unwrap());
        strip_hop_by_hop(&mut h);
        assert!(h.get("x-private").is_none());
        assert!(h.get("expect").is_none());
        assert!(h.get("connection").is_none());
        assert!(h.get("authorization").is_some());
    }

    #[tokio::test]
    async fn unavailable_is_a_503_with_retry_after_and_the_reason() {
        let r = unavailable("connection refused <x>");
        assert_eq!(r.status(), 503);
        assert_eq!(
            r.headers()[http::header::RETRY_AFTER],
            crate::error::RETRY_AFTER_SECS
        );
        assert_eq!(r.headers()[http::header::CONTENT_TYPE], "application/xml");
        let mut body = r.into_body();
        let body = body.store_all_limited(1 << 16).await.expect("body");
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("<Code>ServiceUnavailable</Code>"), "{text}");
        assert!(
            text.contains("backend store unavailable: connection refused &lt;x"),
            "{text}"
        );
    }
}
