//! Object keys as single file names: bytes outside `[A-Za-z0-9_.~-]`, and a leading `.`, become
//! `%XX`, so keys like `a` and `a/b` can both exist and no stored name starts with a dot (names
//! starting with a dot are the store's own).

use super::{StorageError, StorageResult};

/// Longest file name most filesystems take.
const MAX_NAME: usize = 255;

fn keeps(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~')
}

/// A key as one file name.
pub fn encode_key(key: &str) -> StorageResult<String> {
    if key.is_empty() {
        return Err(StorageError::InvalidKey);
    }
    let mut out = String::with_capacity(key.len());
    for (i, &b) in key.as_bytes().iter().enumerate() {
        if keeps(b) && !(i == 0 && b == b'.') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.len() > MAX_NAME {
        return Err(StorageError::InvalidKey);
    }
    Ok(out)
}

/// The key a file name stands for; `None` for names this store did not write.
pub fn decode_key(name: &str) -> Option<String> {
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let s = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(s, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_encoding_round_trips_and_hides_dots() {
        for key in ["a", "a/b", ".meta", "x y%z", "ünï", "..", "a.b"] {
            let name = encode_key(key).expect("encodable");
            assert!(!name.starts_with('.'), "{name}");
            assert!(!name.contains('/'));
            assert_eq!(decode_key(&name).as_deref(), Some(key));
        }
        assert!(matches!(encode_key(""), Err(StorageError::InvalidKey)));
        assert!(matches!(
            encode_key(&"/".repeat(100)),
            Err(StorageError::InvalidKey)
        ));
    }
}
