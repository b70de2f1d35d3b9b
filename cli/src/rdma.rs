//! The S3 client hipObject calls back into for one transfer (`S3Ops`): each token goes out in a
//! signed request from the address of the NIC the token names, and the last response is kept so a
//! failed transfer can say what the server answered.

use crate::failure::Failure;
use crate::s3::{ObjectPath, Response, S3};
use hipobj::engine::{ErrorClass, Slice};
use hipobj::error::Error;
use hipobj::runtime::{Runtime, S3Ops, TransferKind};
use hipobj::token::Token;
use std::net::IpAddr;

/// ONE RDMA transfer of a buffer slice: one library transfer (a fresh token, pairing included)
/// whose requests `req` sends. Every RDMA request of the command line goes through here.
pub fn transfer(runtime: &Runtime, slice: Slice, req: &mut RdmaRequest<'_>) -> Result<(), Error> {
    runtime.transfer(req.kind, slice.base, slice.len, slice.offset as u64, req)
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
    last: Option<Response>,
    failure: Option<Failure>,
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
            last: None,
            failure: None,
            requests: 0,
        }
    }

    /// An UploadPart of `upload_id` instead of a PutObject.
    pub fn part(mut self, upload_id: &str, number: u32) -> Self {
        self.part = Some((upload_id.to_owned(), number));
        self
    }

    /// The last response's `ETag`.
    pub fn etag(&self) -> Option<String> {
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
        match &self.last {
            Some(r) if r.status >= 300 => {
                ErrorClass::of_status(r.status, r.error_code().as_deref())
            }
            _ => ErrorClass::of_library(e),
        }
    }

    /// `x-amz-rdma-bytes-transferred` of the last response.
    pub fn bytes_transferred(&self) -> Option<u64> {
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
            if let Some(f) = Failure::from_status(r.status, &what) {
                return f;
            }
            return Failure::Transfer(format!("{what}: {e} (HTTP {}, reply '{reply}')", r.status));
        }
        crate::session::library_failure(e, &what)
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
        let mut url = self.s3.url(&self.object.bucket, Some(&self.object.key));
        if let Some((id, n)) = &self.part {
            url.push_str(&crate::s3::part_query(id, *n));
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
