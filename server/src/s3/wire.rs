//! Response details where s3s 0.14's serialisation differs from what S3 answers, corrected after
//! s3s wrote the response (an operation cannot: s3s formats these bytes after it returns).
//!
//! - GetObjectAttributes: S3 writes `<ETag>` without quotes (unlike every other XML ETag);
//!   s3s quotes every ETag it serialises.

use bytes::Bytes;
use http::{HeaderValue, Method, Uri};
use s3s::{Body, HttpResponse};

/// What a response needs, decided from its request before s3s consumes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fixup {
    None,
    /// `GET /bucket/key?attributes`: unquote `<ETag>`.
    AttributesEtag,
}

/// The fixup a request's response needs.
pub fn fixup_for(method: &Method, uri: &Uri) -> Fixup {
    let attributes = uri.query().is_some_and(|q| {
        form_urlencoded::parse(q.as_bytes()).any(|(name, _)| name == "attributes")
    });
    if method == Method::GET && attributes {
        Fixup::AttributesEtag
    } else {
        Fixup::None
    }
}

/// Apply `fixup` to a response s3s produced. Only in-memory XML bodies are rewritten (s3s
/// serialises every XML answer into one buffer); anything else passes unchanged.
pub fn apply(fixup: Fixup, resp: &mut HttpResponse) {
    if fixup == Fixup::None || !resp.status().is_success() {
        return;
    }
    let Some(xml) = resp.body_mut().take_bytes() else {
        return;
    };
    let fixed = unquote_etag_elements(&xml);
    if let Ok(len) = HeaderValue::from_str(&fixed.len().to_string()) {
        resp.headers_mut().insert(http::header::CONTENT_LENGTH, len);
    }
    *resp.body_mut() = Body::from(fixed);
}

const OPEN: &[u8] = b"<ETag>\"";
const CLOSE: &[u8] = b"\"</ETag>";

/// `<ETag>"v"</ETag>` -> `<ETag>v</ETag>`, every occurrence; other bytes as they are.
fn unquote_etag_elements(xml: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(xml.len());
    let mut rest = xml;
    while let Some(start) = find(rest, OPEN) {
        let value_start = start + OPEN.len();
        let Some(len) = find(&rest[value_start..], CLOSE) else {
            break;
        };
        out.extend_from_slice(&rest[..start]);
        out.extend_from_slice(b"<ETag>");
        out.extend_from_slice(&rest[value_start..value_start + len]);
        out.extend_from_slice(b"</ETag>");
        rest = &rest[value_start + len + CLOSE.len()..];
    }
    out.extend_from_slice(rest);
    Bytes::from(out)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_attributes_is_fixed() {
        let uri: Uri = "/b/k?attributes".parse().expect("uri");
        assert_eq!(fixup_for(&Method::GET, &uri), Fixup::AttributesEtag);
        assert_eq!(fixup_for(&Method::HEAD, &uri), Fixup::None);
        let plain: Uri = "/b/k?attributesx=1".parse().expect("uri");
        assert_eq!(fixup_for(&Method::GET, &plain), Fixup::None);
        let none: Uri = "/b/k".parse().expect("uri");
        assert_eq!(fixup_for(&Method::GET, &none), Fixup::None);
    }

    #[test]
    fn etags_lose_their_quotes_and_nothing_else_changes() {
        let xml = b"<R><ETag>\"abc-2\"</ETag><ObjectSize>3</ObjectSize><ETag>\"d\"</ETag></R>";
        assert_eq!(
            &unquote_etag_elements(xml)[..],
            b"<R><ETag>abc-2</ETag><ObjectSize>3</ObjectSize><ETag>d</ETag></R>"
        );
        let unclosed = b"<R><ETag>\"abc</R>";
        assert_eq!(&unquote_etag_elements(unclosed)[..], unclosed);
    }

    #[test]
    fn the_response_gets_the_new_length() {
        let mut resp = HttpResponse::new(Body::from(b"<ETag>\"e\"</ETag>".to_vec()));
        resp.headers_mut()
            .insert(http::header::CONTENT_LENGTH, HeaderValue::from(16));
        apply(Fixup::AttributesEtag, &mut resp);
        assert_eq!(
            resp.headers().get(http::header::CONTENT_LENGTH),
            Some(&HeaderValue::from(14))
        );
        assert_eq!(
            resp.body_mut().take_bytes().as_deref(),
            Some(&b"<ETag>e</ETag>"[..])
        );
    }
}
