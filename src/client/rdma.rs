//! The S3 client hipObject calls back into for one transfer: each RDMA request goes out signed
//! from the address of the NIC its token names, and the last answer is kept so a failed transfer
//! can say what the server answered. Both RC protocols go through [`transfer`]: sections 1-9
//! (`S3Ops`, one round trip) and hipobj-rc-v2 (`S3OpsV2`: PREPARE, READY, FINAL, CANCEL), chosen
//! per endpoint as docs/protocol.md 10.1 negotiates it (`crate::rcv2::negotiate`).

use crate::checksum::{ObjectChecksum, StoredChecksum, RDMA_CHECKSUM};
use crate::client::failure::Failure;
use crate::client::s3::{Answer, ObjectPath, S3};
use crate::engine::{ErrorClass, Slice};
use crate::error::Error;
use crate::rcv2::client::{FinalReplyV2, PrepareReplyV2, S3OpsV2, V2Outcome, V2Target};
use crate::rcv2::negotiate::{Next, Protocol};
use crate::rcv2::{
    is_unsupported, CancelRequest, PrepareRequest, ReadyRequest, CANCEL_PATH, PREPARE_PATH,
    READY_PATH,
};
use crate::runtime::{Runtime, S3Ops, TransferKind};
use crate::s3error::S3ErrorReply;
use crate::token::Token;
use hipobj_s3client::ops::multipart::part_query;
use std::net::IpAddr;
use std::thread::JoinHandle;

/// ONE RDMA transfer of a buffer slice, in the protocol the endpoint speaks: the first request
/// to an endpoint is v1; a `501` with the unsupported marker switches to hipobj-rc-v2 (and the
/// endpoint is remembered as v2); a `501` otherwise is "no RDMA here" (the error, which
/// `failure()` reports as `RdmaDeclined` for `--http-fallback`). Every RDMA request of the
/// command line goes through here.
pub fn transfer(runtime: &Runtime, slice: Slice, req: &mut RdmaRequest<'_>) -> Result<(), Error> {
    let s3 = req.s3;
    let (negotiation, endpoint) = (s3.negotiation(), s3.endpoint());
    if negotiation.first(endpoint) == Protocol::V1 {
        req.clear();
        let result = runtime.transfer(req.kind, slice.base, slice.len, slice.offset as u64, req);
        let (status, unsupported) = req.answer();
        if negotiation.answered(endpoint, Protocol::V1, status, unsupported) != Next::SwitchToV2 {
            return result;
        }
        tracing::info!(
            endpoint,
            "the server speaks hipobj-rc-v2 only (501, unsupported): using it"
        );
    }
    req.clear();
    let target = req.v2_target();
    let result =
        runtime.transfer_v2_at(req.kind, slice.base, slice.offset, slice.len, &target, req);
    let (status, unsupported) = req.answer();
    negotiation.answered(endpoint, Protocol::V2, status, unsupported);
    req.outcome = Some(result?);
    Ok(())
}

/// What an endpoint speaks, found by a real request: a one-byte GET through [`transfer`] (which
/// `transfer_one_byte` calls with its registered byte) of a key that does not exist in `bucket`.
/// The protocol (None: the server declines RDMA, 501) and the status of the last answer.
pub fn probe(
    s3: &S3,
    bucket: &str,
    transfer_one_byte: impl FnOnce(&mut RdmaRequest<'_>) -> Result<(), Error>,
) -> Result<(Option<Protocol>, u16), Failure> {
    let obj = ObjectPath {
        bucket: bucket.to_owned(),
        key: format!(".hipobj-probe/{:08x}", crate::random::u32()),
    };
    let mut req = RdmaRequest::new(s3, TransferKind::Get, &obj, Some((0, 0)));
    let result = transfer_one_byte(&mut req);
    let (status, _) = req.answer();
    match (status, s3.negotiation().spoken(s3.endpoint())) {
        (Some(501), _) => Ok((None, 501)),
        (Some(status), Some(p)) => Ok((Some(p), status)),
        _ => Err(match result {
            Err(e) => req.failure(&e),
            Ok(()) => Failure::Transfer(format!("probing {}: no answer", s3.endpoint())),
        }),
    }
}

/// One object request as hipObject repeats it (pairing may take a second request).
pub struct RdmaRequest<'a> {
    s3: &'a S3,
    kind: TransferKind,
    object: &'a ObjectPath,
    /// `Range: bytes=first-last` of a GET.
    range: Option<(u64, u64)>,
    /// `(uploadId, partNumber)` of an UploadPart.
    part: Option<(String, u32)>,
    /// A PUT's checksum of the bytes it moves (`x-amz-checksum-<algorithm>`, rule 4.9).
    checksum: Option<ObjectChecksum>,
    /// The last answer that counts: v1's last, or v2's PREPARE or FINAL (never a CANCEL's).
    last: Option<Answer>,
    failure: Option<Failure>,
    /// A v2 transfer's FINAL, once it succeeded.
    outcome: Option<V2Outcome>,
    /// A v2 READY on its way (its answer is FINAL).
    ready: Option<JoinHandle<Result<Answer, Failure>>>,
    /// The NIC address v2's control requests leave from (that of PREPARE's token).
    local: Option<IpAddr>,
    pub requests: usize,
}

impl<'a> RdmaRequest<'a> {
    pub fn new(
        s3: &'a S3,
        kind: TransferKind,
        object: &'a ObjectPath,
        range: Option<(u64, u64)>,
    ) -> Self {
        RdmaRequest {
            s3,
            kind,
            object,
            range,
            part: None,
            checksum: None,
            last: None,
            failure: None,
            outcome: None,
            ready: None,
            local: None,
            requests: 0,
        }
    }

    /// Forget the answers of an earlier attempt (a transfer may be sent again in the other
    /// protocol).
    fn clear(&mut self) {
        self.last = None;
        self.failure = None;
        self.outcome = None;
        self.ready = None;
        self.local = None;
    }

    /// The status of the last answer, and whether it carried the unsupported marker.
    fn answer(&self) -> (Option<u16>, bool) {
        match &self.last {
            Some(r) => (Some(r.status), is_unsupported(r.status, |n| r.header(n))),
            None => (None, false),
        }
    }

    /// The v2 transfer's object: the range's first byte as the object offset, an UploadPart's
    /// query.
    fn v2_target(&self) -> V2Target {
        let mut t = V2Target::new(self.object.bucket.as_str(), self.object.key.as_str());
        if let Some((first, _)) = self.range {
            t.offset = first;
        }
        if let Some((id, n)) = &self.part {
            t.query = vec![
                ("partNumber".to_owned(), n.to_string()),
                ("uploadId".to_owned(), id.clone()),
            ];
        }
        t
    }

    /// A control request of hipobj-rc-v2 (SigV4 over POST, every header signed) from `local`.
    fn control(
        &self,
        path: &str,
        headers: &[(&'static str, String)],
        local: Option<IpAddr>,
    ) -> Result<Answer, Failure> {
        let url = format!("{}{path}", self.s3.endpoint());
        self.s3.request("POST", &url, headers, Vec::new(), local)
    }

    /// An UploadPart of `upload_id` instead of a PutObject.
    pub fn part(mut self, upload_id: &str, number: u32) -> Self {
        self.part = Some((upload_id.to_owned(), number));
        self
    }

    /// A PUT that sends the checksum of the bytes it moves (the server refuses a mismatch with
    /// BadDigest and stores nothing).
    pub fn checksum(mut self, checksum: Option<ObjectChecksum>) -> Self {
        self.checksum = checksum;
        self
    }

    /// The checksum header of a PUT, if it sends one.
    fn checksum_header(&self) -> Option<(&'static str, String)> {
        self.checksum.map(|c| (c.algo.header(), c.encoded()))
    }

    /// The ETag the server answered (v2: FINAL's `x-amz-rdma-etag`).
    pub fn etag(&self) -> Option<String> {
        if let Some(o) = &self.outcome {
            return o.etag.clone();
        }
        self.last
            .as_ref()
            .and_then(|r| r.header("etag"))
            .map(str::to_owned)
    }

    /// Whether a failed transfer is worth another (AWS SDK standard mode): the server's answer
    /// if it sent one, a request that did not reach it, else the library's error.
    pub fn class(&self, e: &Error) -> ErrorClass {
        if self.failure.is_some() {
            return ErrorClass::Transient;
        }
        match self.server_error() {
            Some(reply) => reply.class(),
            None => crate::engine::class_of_library(e),
        }
    }

    /// The server's `Retry-After` on its last answer (a retry waits at least that).
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        self.server_error().and_then(|reply| reply.retry_after)
    }

    /// The S3 error of the last answer, if it was a refusal (status 300 and above).
    pub fn server_error(&self) -> Option<S3ErrorReply> {
        self.last
            .as_ref()
            .filter(|r| r.status >= 300)
            .and_then(Answer::error)
    }

    /// The stored checksum the GET's reply named for the bytes it moved (`x-amz-rdma-checksum`,
    /// docs/protocol.md rule 16.2: v1's reply or hipobj-rc-v2's FINAL); a malformed value is
    /// none (the landed bytes are still checked against the HEAD's value).
    pub fn named_checksum(&self) -> Option<StoredChecksum> {
        let text = match &self.outcome {
            Some(o) => o.checksum.clone(),
            None => self
                .last
                .as_ref()
                .and_then(|r| r.header(RDMA_CHECKSUM))
                .map(str::to_owned),
        }?;
        StoredChecksum::parse(&text).ok()
    }

    /// `x-amz-rdma-bytes-transferred` of the last response.
    pub fn bytes_transferred(&self) -> Option<u64> {
        if let Some(o) = &self.outcome {
            return Some(o.bytes);
        }
        self.last
            .as_ref()
            .and_then(|r| r.header("x-amz-rdma-bytes-transferred"))
            .and_then(|v| v.parse().ok())
    }

    /// What a failed transfer means: the server's status if it answered, else the request's own
    /// failure, else the library's error.
    pub fn failure(&mut self, e: &Error) -> Failure {
        let what = format!(
            "{} {}",
            if self.kind == TransferKind::Get {
                "GET"
            } else {
                "PUT"
            },
            self.object
        );
        if let Some(f) = self.failure.take() {
            return f;
        }
        if let Some(r) = &self.last {
            let reply = r.header("x-amz-rdma-reply").unwrap_or("");
            if r.status == 500 && reply == "500" {
                return Failure::Transfer(format!(
                    "{what}: the server's RDMA operation failed (500); its pairing was dropped, a retry pairs again"
                ));
            }
            if let Some(reply) = self.server_error() {
                return Failure::of_reply(&reply, &what);
            }
            return Failure::Transfer(format!("{what}: {e} (HTTP {}, reply '{reply}')", r.status));
        }
        Failure::of_library(e, &what)
    }
}

/// The local address to send a token from: the NIC's IPv4 address that its GID maps.
fn token_source_address(token: &str) -> Option<IpAddr> {
    Token::decode_hex(token.as_bytes())
        .ok()
        .and_then(|t| t.client_nic_ipv4())
        .map(IpAddr::V4)
}

impl S3Ops for RdmaRequest<'_> {
    fn send_request(&mut self, token: &str) -> i32 {
        self.requests += 1;
        let mut headers = vec![("x-amz-rdma-token", token.to_owned())];
        let method = match self.kind {
            TransferKind::Get => "GET",
            TransferKind::Put => {
                headers.push(("content-type", "application/octet-stream".to_owned()));
                "PUT"
            }
        };
        if let Some((a, b)) = self.range {
            headers.push(("range", format!("bytes={a}-{b}")));
        }
        headers.extend(self.checksum_header());
        let mut url = self.s3.url(&self.object.bucket, Some(&self.object.key));
        if let Some((id, n)) = &self.part {
            url.push_str(&part_query(id, *n));
        }
        match self.s3.request(
            method,
            &url,
            &headers,
            Vec::new(),
            token_source_address(token),
        ) {
            Ok(r) => {
                let has_reply = r.header("x-amz-rdma-reply").is_some();
                self.last = Some(r);
                if has_reply {
                    0
                } else {
                    -1
                }
            }
            Err(f) => {
                self.failure = Some(f);
                -1
            }
        }
    }

    fn recv_reply(&mut self, buf: &mut [u8]) -> Result<usize, i32> {
        let reply = self
            .last
            .as_ref()
            .and_then(|r| r.header("x-amz-rdma-reply"))
            .ok_or(-1)?;
        let dst = buf.get_mut(..reply.len()).ok_or(-1)?;
        dst.copy_from_slice(reply.as_bytes());
        Ok(reply.len())
    }
}

/// The NIC address a v2 token names (the control requests leave from it, as v1's do).
fn nic_of(token: &Token) -> Option<IpAddr> {
    token.client_nic_ipv4().map(IpAddr::V4)
}

/// Status a v2 callback reports when its request got no answer (the failure is kept).
const NO_ANSWER: i32 = -1;

impl S3OpsV2 for RdmaRequest<'_> {
    fn send_prepare(&mut self, req: &PrepareRequest) -> Result<PrepareReplyV2, i32> {
        self.requests += 1;
        self.local = nic_of(&req.token);
        let mut headers = req.headers();
        headers.extend(self.checksum_header());
        match self.control(PREPARE_PATH, &headers, self.local) {
            Ok(r) => {
                let reply = PrepareReplyV2::from_headers(r.status, |n| r.header(n));
                self.last = Some(r);
                Ok(reply)
            }
            Err(f) => {
                self.failure = Some(f);
                Err(NO_ANSWER)
            }
        }
    }

    /// READY is answered only once the data phase is over, and a PUT's data phase is ours to
    /// run: the request goes out on a thread of its own, FINAL is its answer.
    fn send_ready(&mut self, req: &ReadyRequest) -> i32 {
        self.requests += 1;
        let url = format!("{}{READY_PATH}", self.s3.endpoint());
        let built = self
            .s3
            .build("POST", &url, &req.headers(), Vec::new(), self.local);
        match built {
            Ok(rb) => {
                let local = self.local;
                self.ready = Some(std::thread::spawn(move || {
                    crate::client::s3::send(rb, "POST", &url, local)
                }));
                0
            }
            Err(f) => {
                self.failure = Some(f);
                NO_ANSWER
            }
        }
    }

    fn finish_ready(&mut self) -> Result<FinalReplyV2, i32> {
        let handle = self.ready.take().ok_or(NO_ANSWER)?;
        let answer = handle.join().unwrap_or_else(|_| {
            Err(Failure::Transfer(
                "the READY request's thread panicked".into(),
            ))
        });
        match answer {
            Ok(r) => {
                let reply = FinalReplyV2::from_headers(r.status, |n| r.header(n));
                self.last = Some(r);
                Ok(reply)
            }
            Err(f) => {
                self.failure = Some(f);
                Err(NO_ANSWER)
            }
        }
    }

    /// Best effort: the answer (always 204) is not kept, READY's is abandoned.
    fn send_cancel(&mut self, req: &CancelRequest) {
        self.ready = None;
        if let Err(f) = self.control(CANCEL_PATH, &req.headers(), self.local) {
            tracing::debug!("hipobj-rc-v2 CANCEL: {f}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::credentials::Credentials;
    use crate::rcv2::negotiate::Choice;
    use hipobj_s3client::reqwest::header::{HeaderMap, HeaderValue};

    fn s3(choice: Choice) -> S3 {
        let creds = Credentials {
            keys: None,
            region: "us-east-1".into(),
            ca_bundle: None,
        };
        S3::new("http://127.0.0.1:9", creds)
            .expect("endpoint")
            .with_protocol(choice)
    }

    fn answered(status: u16, marker: Option<&'static str>) -> Answer {
        let mut headers = HeaderMap::new();
        if let Some(m) = marker {
            headers.insert("x-amz-rdma-protocol-status", HeaderValue::from_static(m));
        }
        Answer {
            status,
            headers,
            body: Vec::new(),
        }
    }

    fn object() -> ObjectPath {
        ObjectPath {
            bucket: "b".into(),
            key: "dir/k".into(),
        }
    }

    #[test]
    fn the_answer_names_the_marker_only_on_a_501() {
        let s3 = s3(Choice::Auto);
        let obj = object();
        let mut req = RdmaRequest::new(&s3, TransferKind::Get, &obj, None);
        assert_eq!(req.answer(), (None, false));
        for (status, marker, want) in [
            (501, Some("unsupported"), (Some(501), true)),
            (501, Some(" Unsupported "), (Some(501), true)),
            (501, None, (Some(501), false)),
            (404, Some("unsupported"), (Some(404), false)),
        ] {
            req.last = Some(answered(status, marker));
            assert_eq!(req.answer(), want, "{status} {marker:?}");
        }
        // what the CLI then does, per endpoint
        req.last = Some(answered(501, Some("unsupported")));
        let (status, unsupported) = req.answer();
        let n = s3.negotiation();
        assert_eq!(
            n.answered(s3.endpoint(), Protocol::V1, status, unsupported),
            Next::SwitchToV2
        );
        assert_eq!(n.first(s3.endpoint()), Protocol::V2);
        // a failed transfer after a 501 is reported as "RDMA declined" (exit 4, --http-fallback)
        let f = req.failure(&Error::s3("PREPARE answered 501"));
        assert_eq!(f.code(), 4, "{f}");
        req.clear();
        assert_eq!(req.answer(), (None, false));
    }

    #[test]
    fn a_v2_transfer_names_the_range_and_the_part() {
        let s3 = s3(Choice::V2);
        let obj = object();
        let get = RdmaRequest::new(&s3, TransferKind::Get, &obj, Some((1000, 5999)));
        let t = get.v2_target();
        assert_eq!(
            (t.bucket.as_str(), t.key.as_str(), t.offset),
            ("b", "dir/k", 1000)
        );
        assert!(t.query.is_empty());
        let put = RdmaRequest::new(&s3, TransferKind::Put, &obj, None).part("id/1", 7);
        let t = put.v2_target();
        assert_eq!(t.offset, 0);
        assert_eq!(
            t.query,
            vec![
                ("partNumber".to_owned(), "7".to_owned()),
                ("uploadId".to_owned(), "id/1".to_owned())
            ]
        );
    }

    #[test]
    fn a_v2_outcome_gives_the_etag_and_the_bytes() {
        let s3 = s3(Choice::V2);
        let obj = object();
        let mut req = RdmaRequest::new(&s3, TransferKind::Put, &obj, None);
        req.outcome = Some(V2Outcome {
            bytes: 42,
            etag: Some("\"e\"".into()),
            ..V2Outcome::default()
        });
        assert_eq!(req.etag().as_deref(), Some("\"e\""));
        assert_eq!(req.bytes_transferred(), Some(42));
    }
}
