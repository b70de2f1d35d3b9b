//! The S3 operations the project's clients share, without I/O: each operation builds its request
//! (method, encoded target, headers, body) and reads its answer; the client sends the request its
//! own way (the command line from a chosen local address with unsigned payloads, the gateway
//! signed as the identity it acts for) and hands the whole answer back here. One place for each
//! operation's XML, for ETag quoting, and for how an answer's error is classified for a retry.
//!
//! - [`multipart`]: CreateMultipartUpload, UploadPart's target, CompleteMultipartUpload (whose
//!   error may come inside a 200), AbortMultipartUpload;
//! - [`list`]: ListObjectsV2, page by page;
//! - [`etag`]: ETags quoted and unquoted;
//! - [`error`]: an answer's S3 error and its retry class;
//! - [`xml`]: the S3 XML answers read, and text escaped for request bodies.

pub mod error;
pub mod etag;
pub mod list;
pub mod multipart;
pub mod xml;

use crate::path::object_path;

/// One request of an operation, to be sent by the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpRequest {
    pub method: &'static str,
    /// The encoded path and query (`/bucket/key?uploadId=ID`): the endpoint goes before it.
    pub target: String,
    /// Headers to send and sign, lowercase names.
    pub headers: Vec<(String, String)>,
    /// Empty: no body.
    pub body: Vec<u8>,
}

impl OpRequest {
    /// A request without a body to `target`.
    pub fn new(method: &'static str, target: String) -> OpRequest {
        OpRequest {
            method,
            target,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// The same request with these headers.
    pub fn with_headers(mut self, headers: Vec<(String, String)>) -> OpRequest {
        self.headers = headers;
        self
    }

    /// The same request with this body.
    pub fn with_body(mut self, body: Vec<u8>) -> OpRequest {
        self.body = body;
        self
    }

    /// The absolute URL at `endpoint` (`http://host:port`, no trailing slash).
    pub fn url(&self, endpoint: &str) -> String {
        format!("{endpoint}{}", self.target)
    }
}

/// The encoded target of an object (`/bucket/key`) followed by `query` (`?...`, or empty).
fn object_target(bucket: &str, key: &str, query: &str) -> String {
    format!("{}{query}", object_path(bucket, key))
}

/// Answers for the operations' tests.
#[cfg(test)]
mod test_answers {
    use crate::http::Answer;
    use reqwest::header::HeaderMap;

    /// An answer of `status` with `body` and no headers.
    pub fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status,
            headers: HeaderMap::new(),
            body: body.as_bytes().to_vec(),
        }
    }

    /// S3's error document of `code`, as S3 writes it (also inside a 200).
    pub fn document(code: &str) -> String {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\n<Error><Code>{code}</Code>\
             <Message>m</Message><RequestId>r</RequestId></Error>"
        )
    }
}
