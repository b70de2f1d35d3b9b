//! ETag quoting. S3 sends an ETag quoted (`"9b2cf535f27731c974343645a3985328"`: the `ETag`
//! header, a listing's `<ETag>`) and takes it quoted (CompleteMultipartUpload's parts,
//! `If-Match`); the project keeps and compares it unquoted.

/// `etag` without its surrounding quotes (as it is when it has none).
pub fn unquoted(etag: &str) -> &str {
    etag.trim_matches('"')
}

/// `etag` in quotes, once (an ETag already quoted is not quoted again).
pub fn quoted(etag: &str) -> String {
    format!("\"{}\"", unquoted(etag))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_etag_is_quoted_once_and_unquoted_whole() {
        // (as sent or answered, quoted once, unquoted)
        let cases = [
            ("abc-2", "\"abc-2\"", "abc-2"),
            ("\"abc-2\"", "\"abc-2\"", "abc-2"),
            ("\"\"abc\"\"", "\"abc\"", "abc"),
            ("", "\"\"", ""),
        ];
        for (etag, once, bare) in cases {
            assert_eq!(quoted(etag), once, "quoted {etag}");
            assert_eq!(unquoted(etag), bare, "unquoted {etag}");
            assert_eq!(unquoted(&quoted(etag)), bare, "round trip {etag}");
        }
    }
}
