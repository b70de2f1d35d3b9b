//! S3 key, path and query encoding (RFC 3986: unreserved characters kept, every other byte of
//! the UTF-8 form percent-encoded; `/` kept between a key's segments).

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// What S3 leaves unescaped in a path segment or a query value (RFC 3986 unreserved).
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A key for the URL path: each `/`-separated segment percent-encoded, the slashes kept.
pub fn encode_key(key: &str) -> String {
    let segments: Vec<String> = key.split('/').map(query_value).collect();
    segments.join("/")
}

/// `/bucket`, or `/bucket/key` when `key` is not empty, percent-encoded.
pub fn object_path(bucket: &str, key: &str) -> String {
    let mut path = format!("/{}", query_value(bucket));
    if !key.is_empty() {
        path.push('/');
        path.push_str(&encode_key(key));
    }
    path
}

/// A query value (or a single path segment), percent-encoded: `/` too.
pub fn query_value(v: &str) -> String {
    utf8_percent_encode(v, UNRESERVED).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_characters_are_encoded_and_slashes_kept() {
        assert_eq!(encode_key("a b/c+d~"), "a%20b/c%2Bd~");
        assert_eq!(encode_key("x~y_z.-/A9"), "x~y_z.-/A9");
        assert_eq!(
            encode_key("!*'();:@&=$,?#[]%"),
            "%21%2A%27%28%29%3B%3A%40%26%3D%24%2C%3F%23%5B%5D%25"
        );
        // AWS's example key of the SigV4 documentation.
        assert_eq!(encode_key("test$file.text"), "test%24file.text");
    }

    #[test]
    fn unicode_is_encoded_as_its_utf8_bytes() {
        assert_eq!(encode_key("données/ü"), "donn%C3%A9es/%C3%BC");
        assert_eq!(encode_key("日本"), "%E6%97%A5%E6%9C%AC");
    }

    #[test]
    fn paths_and_queries() {
        assert_eq!(object_path("b", ""), "/b");
        assert_eq!(object_path("b", "a/b c+d"), "/b/a/b%20c%2Bd");
        // Empty segments and dot segments stay as they are (S3 keys are not file paths).
        assert_eq!(object_path("b", "a//../c/"), "/b/a//../c/");
        assert_eq!(query_value("a/b+c d"), "a%2Fb%2Bc%20d");
    }
}
