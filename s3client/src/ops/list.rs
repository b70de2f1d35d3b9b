//! ListObjectsV2: a page's request, the page read from its answer, and every page of a prefix.

use super::xml::{self, XmlError};
use super::{etag, object_target, OpRequest};
use crate::path::query_value;

/// One object of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedObject {
    pub key: String,
    pub size: u64,
    /// Unquoted.
    pub etag: String,
    /// `LastModified` as the store wrote it (ISO 8601), "" when it wrote none.
    pub last_modified: String,
}

/// One page of a listing, and the token of the next one if there is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListPage {
    pub objects: Vec<ListedObject>,
    pub next: Option<String>,
}

/// ListObjectsV2 of the keys of `bucket` under `prefix`, from `continuation` (the previous
/// page's token) or from the start.
pub fn request(bucket: &str, prefix: &str, continuation: Option<&str>) -> OpRequest {
    let mut query = format!("?list-type=2&prefix={}", query_value(prefix));
    if let Some(token) = continuation {
        query.push_str(&format!("&continuation-token={}", query_value(token)));
    }
    OpRequest::new("GET", object_target(bucket, "", &query))
}

/// The page a ListObjectsV2 answer holds; the next page's token only while the listing says it
/// is truncated.
pub fn page(body: &[u8]) -> Result<ListPage, XmlError> {
    xml::read(body, "ListBucketResult", |root| {
        let objects = root
            .all("Contents")
            .map(|c| {
                Ok(ListedObject {
                    key: c.text("Key"),
                    size: c.number("Size")?,
                    etag: etag::unquoted(&c.text("ETag")).to_owned(),
                    last_modified: c.text("LastModified"),
                })
            })
            .collect::<Result<Vec<_>, XmlError>>()?;
        let token = root.text("NextContinuationToken");
        let next = (root.flag("IsTruncated") && !token.is_empty()).then_some(token);
        Ok(ListPage { objects, next })
    })
}

/// Every object of `bucket` under `prefix`, in the store's order: page after page, each
/// request sent by `fetch`, which answers the body of a successful answer.
pub fn objects<E: From<XmlError>>(
    bucket: &str,
    prefix: &str,
    mut fetch: impl FnMut(OpRequest) -> Result<Vec<u8>, E>,
) -> Result<Vec<ListedObject>, E> {
    let mut all = Vec::new();
    let mut continuation: Option<String> = None;
    loop {
        let body = fetch(request(bucket, prefix, continuation.as_deref()))?;
        let page = page(&body)?;
        all.extend(page.objects);
        match page.next {
            Some(token) => continuation = Some(token),
            None => return Ok(all),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(truncated: bool, token: &str, keys: &[&str]) -> Vec<u8> {
        let contents: String = keys
            .iter()
            .map(|k| {
                format!(
                    "<Contents><Key>{k}</Key><Size>{}</Size><ETag>&quot;e-{k}&quot;</ETag>\
                     <LastModified>2026-12-01T08:00:00.000Z</LastModified></Contents>",
                    k.len()
                )
            })
            .collect();
        format!(
            "<?xml version=\"1.0\"?><ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
             <IsTruncated>{truncated}</IsTruncated><NextContinuationToken>{token}</NextContinuationToken>\
             {contents}</ListBucketResult>"
        )
        .into_bytes()
    }

    #[test]
    fn a_page_request_encodes_the_prefix_and_the_token() {
        let first = request("b", "dir/a b", None);
        assert_eq!(
            (first.method, first.target.as_str()),
            ("GET", "/b?list-type=2&prefix=dir%2Fa%20b")
        );
        let next = request("b", "", Some("t/1+"));
        assert_eq!(
            next.target,
            "/b?list-type=2&prefix=&continuation-token=t%2F1%2B"
        );
    }

    #[test]
    fn a_page_gives_its_objects_unquoted_and_the_next_token() {
        let p = page(&listing(true, "t1", &["a&amp;b", "c"])).expect("page");
        assert_eq!(p.next.as_deref(), Some("t1"));
        assert_eq!(p.objects.len(), 2);
        assert_eq!(
            p.objects[0],
            ListedObject {
                key: "a&b".into(),
                size: 7,
                etag: "e-a&b".into(),
                last_modified: "2026-12-01T08:00:00.000Z".into(),
            }
        );
        // The last page: no token, or a token but not truncated.
        assert_eq!(page(&listing(false, "", &["c"])).expect("page").next, None);
        assert_eq!(
            page(&listing(false, "t9", &["c"])).expect("page").next,
            None
        );
        let bad_size = b"<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>";
        assert!(page(bad_size).is_err());
    }

    #[test]
    fn every_page_is_fetched_in_turn() {
        let mut asked = Vec::new();
        let all = objects("b", "p", |req| {
            asked.push(req.target.clone());
            Ok::<_, XmlError>(match asked.len() {
                1 => listing(true, "t1", &["p1", "p2"]),
                _ => listing(false, "", &["p3"]),
            })
        })
        .expect("listing");
        let keys: Vec<&str> = all.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["p1", "p2", "p3"]);
        assert_eq!(
            asked,
            [
                "/b?list-type=2&prefix=p",
                "/b?list-type=2&prefix=p&continuation-token=t1"
            ]
        );
        let failed = objects("b", "p", |_| {
            Err::<Vec<u8>, _>(XmlError {
                what: "x".into(),
                why: "y".into(),
            })
        });
        assert!(failed.is_err());
    }
}
