//! Multipart uploads: CreateMultipartUpload and the upload id it answers, UploadPart's query,
//! CompleteMultipartUpload (its XML body of quoted part ETags, and its answer, which may carry an
//! error inside a 200), AbortMultipartUpload.

use super::error::ErrorAnswer;
use super::xml::{self, escape_text, XmlError};
use super::{etag, object_target, OpRequest};
use crate::http::Answer;
use crate::path::query_value;

/// `?uploadId=ID`: the query of CompleteMultipartUpload, AbortMultipartUpload and ListParts.
pub fn upload_query(upload_id: &str) -> String {
    format!("?uploadId={}", query_value(upload_id))
}

/// `?partNumber=N&uploadId=ID`: the query of UploadPart (and of a part's HEAD or GET).
pub fn part_query(upload_id: &str, number: u32) -> String {
    format!("?partNumber={number}&uploadId={}", query_value(upload_id))
}

/// The encoded target of UploadPart `number` of `upload_id` (`/bucket/key?partNumber=..`).
pub fn part_target(bucket: &str, key: &str, upload_id: &str, number: u32) -> String {
    object_target(bucket, key, &part_query(upload_id, number))
}

/// CreateMultipartUpload of `bucket`/`key`, with the caller's `headers` (the object's metadata,
/// its checksum algorithm).
pub fn create(bucket: &str, key: &str, headers: Vec<(String, String)>) -> OpRequest {
    OpRequest::new("POST", object_target(bucket, key, "?uploads")).with_headers(headers)
}

/// The upload id of a CreateMultipartUpload's answer.
pub fn upload_id(body: &[u8]) -> Result<String, XmlError> {
    xml::read(body, "InitiateMultipartUploadResult", |root| {
        let id = root.text("UploadId");
        if id.is_empty() {
            return Err(XmlError {
                what: "InitiateMultipartUploadResult".into(),
                why: "no UploadId".into(),
            });
        }
        Ok(id)
    })
}

/// One part of a completion: its number and the ETag its upload answered (quoted or not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartEtag<'a> {
    pub number: u32,
    pub etag: &'a str,
}

impl<'a> PartEtag<'a> {
    pub fn new(number: u32, etag: &'a str) -> PartEtag<'a> {
        PartEtag { number, etag }
    }
}

/// CompleteMultipartUpload of `upload_id` with `parts` (in order), and the caller's `headers`
/// (the whole object's checksum, which the store compares with what it assembled).
pub fn complete<'a>(
    bucket: &str,
    key: &str,
    upload_id: &str,
    parts: impl IntoIterator<Item = PartEtag<'a>>,
    headers: Vec<(String, String)>,
) -> OpRequest {
    OpRequest::new("POST", object_target(bucket, key, &upload_query(upload_id)))
        .with_headers(headers)
        .with_body(completion_body(parts).into_bytes())
}

/// `<CompleteMultipartUpload>` with each part's number and its ETag, quoted once.
pub fn completion_body<'a>(parts: impl IntoIterator<Item = PartEtag<'a>>) -> String {
    let mut xml = String::from("<CompleteMultipartUpload>");
    for part in parts {
        xml.push_str(&format!(
            "<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>",
            part.number,
            escape_text(&etag::quoted(part.etag))
        ));
    }
    xml.push_str("</CompleteMultipartUpload>");
    xml
}

/// What a CompleteMultipartUpload's answer says: done, or the error it stands for, a failed
/// status or an error document inside a 200 alike ([`ErrorAnswer::of_late_failure`]).
pub fn completion_outcome(answer: &Answer) -> Result<(), ErrorAnswer> {
    match ErrorAnswer::of_late_failure(answer) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

/// AbortMultipartUpload of `upload_id`.
pub fn abort(bucket: &str, key: &str, upload_id: &str) -> OpRequest {
    OpRequest::new(
        "DELETE",
        object_target(bucket, key, &upload_query(upload_id)),
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_answers::answer;
    use super::*;
    use crate::class::ErrorClass;

    #[test]
    fn targets_encode_the_key_and_the_upload_id() {
        assert_eq!(upload_query("a/b+c"), "?uploadId=a%2Fb%2Bc");
        assert_eq!(part_query("a/b+c", 7), "?partNumber=7&uploadId=a%2Fb%2Bc");
        assert_eq!(
            part_target("b", "dir/k 1", "u=1", 2),
            "/b/dir/k%201?partNumber=2&uploadId=u%3D1"
        );
        let abort = abort("b", "k", "u1");
        assert_eq!(
            (abort.method, abort.target.as_str()),
            ("DELETE", "/b/k?uploadId=u1")
        );
        assert!(abort.body.is_empty());
    }

    #[test]
    fn create_asks_for_an_upload_and_reads_its_id() {
        let headers = vec![("x-amz-meta-a".to_string(), "1".to_string())];
        let req = create("b", "k", headers.clone());
        assert_eq!(req.method, "POST");
        assert_eq!(req.target, "/b/k?uploads");
        assert_eq!(req.headers, headers);
        let answer = r#"<?xml version="1.0" encoding="UTF-8"?>
            <InitiateMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
            <Bucket>b</Bucket><Key>k</Key><UploadId>VXBsb2FkIElE&amp;x</UploadId>
            </InitiateMultipartUploadResult>"#;
        assert_eq!(
            upload_id(answer.as_bytes()),
            Ok("VXBsb2FkIElE&x".to_string())
        );
        let none =
            "<InitiateMultipartUploadResult><Bucket>b</Bucket></InitiateMultipartUploadResult>";
        assert!(upload_id(none.as_bytes()).is_err());
        assert!(upload_id(b"<Error><Code>SlowDown</Code></Error>").is_err());
    }

    #[test]
    fn the_completion_body_quotes_every_etag_once() {
        let parts = [
            PartEtag::new(1, "\"9b2cf535f27731c974343645a3985328\""),
            PartEtag::new(2, "6f5902ac237024bdd0c176cb93063dc4"),
        ];
        let req = complete("b", "k", "up 1", parts, Vec::new());
        assert_eq!(
            (req.method, req.target.as_str()),
            ("POST", "/b/k?uploadId=up%201")
        );
        assert_eq!(
            String::from_utf8_lossy(&req.body),
            "<CompleteMultipartUpload>\
             <Part><PartNumber>1</PartNumber><ETag>\"9b2cf535f27731c974343645a3985328\"</ETag></Part>\
             <Part><PartNumber>2</PartNumber><ETag>\"6f5902ac237024bdd0c176cb93063dc4\"</ETag></Part>\
             </CompleteMultipartUpload>"
        );
        // What the store reads back is the ETag as it answered it.
        xml::read(&req.body, "CompleteMultipartUpload", |root| {
            let etags: Vec<String> = root.all("Part").map(|p| p.text("ETag")).collect();
            assert_eq!(etags[0], "\"9b2cf535f27731c974343645a3985328\"");
            assert_eq!(etags[1], "\"6f5902ac237024bdd0c176cb93063dc4\"");
            Ok::<_, XmlError>(())
        })
        .expect("the body is XML");
        let odd = completion_body([PartEtag::new(3, "a&b<c>")]);
        assert!(odd.contains("<ETag>\"a&amp;b&lt;c&gt;\"</ETag>"), "{odd}");
    }

    #[test]
    fn a_completion_is_done_only_without_an_error() {
        let done = answer(
            200,
            "<CompleteMultipartUploadResult><ETag>\"e-2\"</ETag></CompleteMultipartUploadResult>",
        );
        assert_eq!(completion_outcome(&done), Ok(()));
        let class =
            |status, body: &str| completion_outcome(&answer(status, body)).map_err(|e| e.class);
        let slow = "<?xml version=\"1.0\"?>\n<Error><Code>SlowDown</Code></Error>";
        assert_eq!(class(200, slow), Err(ErrorClass::Throttling));
        let internal = "<Error><Code>InternalError</Code></Error>";
        assert_eq!(class(200, internal), Err(ErrorClass::Transient));
        let invalid = "<Error><Code>InvalidPart</Code></Error>";
        assert_eq!(class(200, invalid), Err(ErrorClass::Fatal));
        assert_eq!(class(400, invalid), Err(ErrorClass::Fatal));
        assert_eq!(class(503, ""), Err(ErrorClass::Throttling));
    }
}
