//! The S3 error a server answered a failed request with, read once from the answer's status,
//! headers and body (`<Error><Code>..</Code><Message>..</Message><RequestId>..</RequestId>`), for
//! every client of the library: the command line prints it, the Python package raises it in
//! botocore's `ClientError` shape, the gateway maps a store's refusal by its code, and the retry
//! classes read its code. The library's error type carries it (`hipobj::s3error` re-exports it).

use crate::class::ErrorClass;
use std::fmt;
use std::time::Duration;

/// What the server said about a request it refused.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct S3ErrorReply {
    /// The HTTP status.
    pub status: u16,
    /// `<Code>` (e.g. `NoSuchBucket`), if the body had one.
    pub code: Option<String>,
    /// `<Message>`, if the body had one.
    pub message: Option<String>,
    /// `x-amz-request-id`, else the body's `<RequestId>`.
    pub request_id: Option<String>,
    /// `Retry-After` in seconds (a `503` of a busy server or an unavailable store).
    pub retry_after: Option<Duration>,
}

impl S3ErrorReply {
    /// The error of an answer with `status`, headers looked up by lowercase name through `get`,
    /// and `body`; `None` for a 2xx whose body is not an error document (S3 may answer 200 with
    /// one: its root element is `<Error>`). A 2xx body is looked at only up to that root element,
    /// so an object's bytes are never read as text (an 8 MiB part was converted and searched
    /// whole, most of a plain-HTTP GET's CPU time).
    pub fn parse<'a>(
        status: u16,
        get: impl Fn(&str) -> Option<&'a str>,
        body: &[u8],
    ) -> Option<S3ErrorReply> {
        if (200..300).contains(&status) && !is_error_document(body) {
            return None;
        }
        let text = String::from_utf8_lossy(body);
        let error = element(&text, "Error");
        let field = |tag| error.and_then(|e| element(e, tag)).map(xml_unescape);
        Some(S3ErrorReply {
            status,
            code: field("Code"),
            message: field("Message"),
            request_id: get("x-amz-request-id")
                .map(str::to_owned)
                .or_else(|| field("RequestId")),
            retry_after: get("retry-after")
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs),
        })
    }

    /// The AWS SDKs' retry class of this answer.
    pub fn class(&self) -> ErrorClass {
        ErrorClass::of_status(self.status, self.code.as_deref())
    }
}

/// `Code: Message (status)`, or `HTTP status` when the body named no code.
impl fmt::Display for S3ErrorReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.code, &self.message) {
            (Some(c), Some(m)) => write!(f, "{c}: {m} ({})", self.status),
            (Some(c), None) => write!(f, "{c} ({})", self.status),
            _ => write!(f, "HTTP {}", self.status),
        }
    }
}

/// The text between the first `<tag>` and the `</tag>` after it.
/// Whether `body`'s root element is `<Error>`: after blanks and an XML declaration, read from
/// the body's first bytes only.
fn is_error_document(body: &[u8]) -> bool {
    const HEAD: usize = 512;
    let head = String::from_utf8_lossy(&body[..body.len().min(HEAD)]);
    let mut rest = head.trim_start();
    if let Some(declared) = rest.strip_prefix("<?xml") {
        let Some(end) = declared.find("?>") else {
            return false;
        };
        rest = declared[end + 2..].trim_start();
    }
    rest.starts_with("<Error>") || rest.starts_with("<Error ")
}

fn element<'x>(xml: &'x str, tag: &str) -> Option<&'x str> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = xml.find(&open)? + open.len();
    let len = xml[start..].find(&close)?;
    Some(&xml[start..start + len])
}

/// XML character data with its predefined entities (and `&#34;`, `&#39;`) decoded.
pub fn xml_unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_SUCH_BUCKET: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>\
        <Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message>\
        <BucketName>b</BucketName><RequestId>body-id</RequestId></Error>";

    #[test]
    fn a_no_such_bucket_answer_is_read() {
        let e = S3ErrorReply::parse(404, |_| None, NO_SUCH_BUCKET.as_bytes()).expect("an error");
        assert_eq!(e.status, 404);
        assert_eq!(e.code.as_deref(), Some("NoSuchBucket"));
        assert_eq!(
            e.message.as_deref(),
            Some("The specified bucket does not exist")
        );
        assert_eq!(e.request_id.as_deref(), Some("body-id"));
        assert_eq!(
            e.to_string(),
            "NoSuchBucket: The specified bucket does not exist (404)"
        );
        assert_eq!(e.class(), ErrorClass::Fatal);
    }

    #[test]
    fn headers_give_the_request_id_and_retry_after() {
        let headers = |n: &str| match n {
            "x-amz-request-id" => Some("hdr-id"),
            "retry-after" => Some("2"),
            _ => None,
        };
        let body = b"<Error><Code>SlowDown</Code><Message>a &amp; b &lt;c&gt;</Message></Error>";
        let e = S3ErrorReply::parse(503, headers, body).expect("an error");
        assert_eq!(e.request_id.as_deref(), Some("hdr-id"));
        assert_eq!(e.retry_after, Some(Duration::from_secs(2)));
        assert_eq!(e.message.as_deref(), Some("a & b <c>"));
        assert_eq!(e.class(), ErrorClass::Throttling);
    }

    #[test]
    fn a_success_is_no_error_unless_its_body_is_one() {
        assert_eq!(S3ErrorReply::parse(200, |_| None, b"<R>ok</R>"), None);
        // an object's bytes that merely contain an error document are no error
        let object = b"data <Error><Code>InternalError</Code></Error> more";
        assert_eq!(S3ErrorReply::parse(200, |_| None, object), None);
        let declared =
            b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\n<Error><Code>SlowDown</Code></Error>";
        let e = S3ErrorReply::parse(200, |_| None, declared).expect("an error document");
        assert_eq!(e.code.as_deref(), Some("SlowDown"));
        let e = S3ErrorReply::parse(200, |_| None, b"<Error><Code>InternalError</Code></Error>");
        assert_eq!(e.map(|e| e.to_string()), Some("InternalError (200)".into()));
        let bare = S3ErrorReply::parse(400, |_| None, b"").expect("an error");
        assert_eq!(
            (bare.code.clone(), bare.to_string()),
            (None, "HTTP 400".into())
        );
    }
}
