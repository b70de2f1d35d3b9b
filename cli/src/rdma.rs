//! The S3 client hipObject calls back into for one transfer (`S3Ops`): each token goes out in a
//! signed request from the address of the NIC the token names, and the last response is kept so a
//! failed transfer can say what the server answered.

use crate::failure::Failure;
use crate::s3::{ObjectPath, Response, S3};
use hipobj::error::{Error, OpError};
use hipobj::runtime::{S3Ops, TransferKind};
use hipobj::token::Token;
use std::net::IpAddr;

/// One object request as hipObject repeats it (pairing may take a second request).
pub struct RdmaRequest<'a> {
    s3: &'a S3,
    kind: TransferKind,
    object: &'a ObjectPath,
    /// `Range: bytes=first-last` of a GET.
    range: Option<(u64, u64)>,
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
            last: None,
            failure: None,
            requests: 0,
        }
    }

    /// `x-amz-rdma-bytes-transferred` of the last response.
    pub fn bytes_transferred(&self) -> Option<u64> {
        self.last
            .as_ref()
            .and_then(|r| r.header("x-amz-rdma-bytes-transferred"))
            .and_then(|v| v.parse().ok())
    }

    /// Whether another attempt of a failed transfer may succeed: the server answered 5xx other
    /// than 501 (a 500 with an RDMA reply of 500 means its RDMA operation failed and it dropped the
    /// pairing; the next attempt pairs again), the server could not be reached, or the library's
    /// RDMA operation failed or found every connection busy. 4xx, 501 and local errors are lasting.
    pub fn transient(&self, e: &Error) -> bool {
        if let Some(f) = &self.failure {
            return matches!(f, Failure::Http(_));
        }
        match &self.last {
            Some(r) if r.status >= 500 => r.status != 501,
            Some(r) if r.status >= 300 => false,
            _ => matches!(e.code, OpError::RdmaError | OpError::Busy),
        }
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
        let url = self.s3.url(&self.object.bucket, Some(&self.object.key));
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
