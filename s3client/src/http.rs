//! The one HTTP stack of the project's S3 clients: `reqwest`'s blocking client. A request is
//! signed (when there are keys) and built here; the caller sends it and reads the answer, whole
//! ([`Answer`]) or streamed (the gateway's object bodies). What a whole answer means for an S3
//! operation is read in [`crate::ops`].

use std::io::Read;
use std::time::SystemTime;

use crate::s3error::S3ErrorReply;
use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::header::HeaderMap;

use crate::sign::{sign, Payload, Placement, Request, SignError, Signer};

/// A request body.
pub enum Body {
    /// Sent with `content-length: 0` (S3 refuses a PUT without a length: 411).
    Empty,
    /// In memory; `hashed`: its SHA-256 is signed, else `UNSIGNED-PAYLOAD`.
    Bytes { data: Vec<u8>, hashed: bool },
    /// Streamed, exactly `len` bytes (the signed `content-length`), `UNSIGNED-PAYLOAD`.
    Stream {
        len: u64,
        reader: Box<dyn Read + Send + 'static>,
    },
}

/// One request to send.
pub struct Outgoing<'a> {
    pub method: &'a str,
    /// Absolute URL, path and query encoded (`crate::path`).
    pub url: &'a str,
    /// Headers to sign and send; `host` and `content-length`, when given, are signed only (the
    /// client writes them from the URL and the body).
    pub headers: &'a [(&'a str, &'a str)],
    pub body: Body,
}

/// `req` on `client`, signed by `signer` (`None`: unsigned, anonymous), ready to send.
pub fn build(
    client: &Client,
    signer: Option<&Signer<'_>>,
    req: Outgoing<'_>,
) -> Result<RequestBuilder, SignError> {
    let Outgoing {
        method,
        url,
        headers,
        body,
    } = req;
    let length = match &body {
        Body::Stream { len, .. } => Some(len.to_string()),
        _ => None,
    };
    let signature = match signer {
        None => Vec::new(),
        Some(signer) => {
            let payload = match &body {
                Body::Empty => Payload::Hashed(&[]),
                Body::Bytes { data, hashed: true } => Payload::Hashed(data),
                Body::Bytes { hashed: false, .. } | Body::Stream { .. } => Payload::Unsigned,
            };
            let mut signed_headers: Vec<(&str, &str)> = headers.to_vec();
            if let Some(len) = &length {
                if !headers
                    .iter()
                    .any(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                {
                    signed_headers.push(("content-length", len));
                }
            }
            let signable = Request {
                method,
                url,
                headers: &signed_headers,
                payload,
            };
            sign(signer, &signable, Placement::Header, SystemTime::now())?.headers
        }
    };
    let m = reqwest::Method::from_bytes(method.as_bytes())
        .map_err(|e| SignError(format!("method {method}: {e}")))?;
    let mut builder = client.request(m, url);
    for (n, v) in headers {
        if !n.eq_ignore_ascii_case("host") && !n.eq_ignore_ascii_case("content-length") {
            builder = builder.header(*n, *v);
        }
    }
    for (n, v) in &signature {
        builder = builder.header(n, v);
    }
    Ok(match body {
        Body::Empty => builder.body(Vec::new()),
        Body::Bytes { data, .. } => builder.body(data),
        Body::Stream { len, reader } => builder.body(reqwest::blocking::Body::sized(reader, len)),
    })
}

/// An answer read whole: its status, headers and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Answer {
    /// `resp` with its body read to the end.
    pub fn read(resp: Response) -> Result<Answer, reqwest::Error> {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.bytes()?.to_vec();
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The value of header `name` (lowercase), if it is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The S3 error this answer is (a non-2xx, or a 2xx whose body is an error document), read
    /// by the one S3 error parser; [`crate::ops::error`] classifies it for a retry.
    pub fn error(&self) -> Option<S3ErrorReply> {
        S3ErrorReply::parse(self.status, |n| self.header(n), &self.body)
    }
}

/// An error and its causes (a refused certificate is named only deep in reqwest's chain).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let s = c.to_string();
        if !text.contains(&s) {
            text.push_str(": ");
            text.push_str(&s);
        }
        cause = c.source();
    }
    text
}
