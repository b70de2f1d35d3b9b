//! A checksum S3 stored, of any algorithm, and its wire form `x-amz-rdma-checksum` (docs/protocol.md
//! section 16): the checksum the server stored of the bytes a token GET moved, sent beside
//! `x-amz-rdma-reply` instead of `x-amz-checksum-*`.
//!
//! A token GET's HTTP body is empty; an S3 SDK that validates response checksums (boto3 and the
//! other AWS SDKs by default) checks any `x-amz-checksum-*` header against that empty body and
//! fails the call. The stored value therefore travels in a header no SDK reads:
//! `<ALGORITHM> <base64>[ COMPOSITE]`, the same header hipobj-rc-v2's FINAL carries. This module is
//! its one parser and one writer, for v1 and v2, client and server, Rust, C and Python.

use std::fmt;

use super::{Composite, CrcAlgo, Mismatch, ObjectChecksum, Unchecked, Verdict};

/// The header's name (lowercase, as HTTP/2 and the header maps of the SDKs give it).
pub const RDMA_CHECKSUM: &str = "x-amz-rdma-checksum";

/// The word that marks a COMPOSITE value (a digest of the parts' digests).
const COMPOSITE: &str = "COMPOSITE";

/// Every algorithm S3 stores: the CRCs, which combine over pieces, and the SHAs, which only the
/// holder of every byte in order can check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Crc(CrcAlgo),
    Sha256,
    Sha1,
}

impl Algorithm {
    /// In the order a server picks the one it sends when it stores several.
    pub const PREFERRED: [Algorithm; 5] = [
        Algorithm::Crc(CrcAlgo::Crc64Nvme),
        Algorithm::Crc(CrcAlgo::Crc32c),
        Algorithm::Crc(CrcAlgo::Crc32),
        Algorithm::Sha256,
        Algorithm::Sha1,
    ];

    /// From S3's name (`CRC64NVME`, `sha256`, ...), any case.
    pub fn parse(name: &str) -> Option<Algorithm> {
        Algorithm::PREFERRED
            .into_iter()
            .find(|a| a.as_str().eq_ignore_ascii_case(name))
    }

    /// S3's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Crc(c) => c.as_str(),
            Algorithm::Sha256 => "SHA256",
            Algorithm::Sha1 => "SHA1",
        }
    }

    /// Bytes of a value.
    fn width(self) -> usize {
        match self {
            Algorithm::Crc(CrcAlgo::Crc64Nvme) => 8,
            Algorithm::Crc(_) => 4,
            Algorithm::Sha256 => 32,
            Algorithm::Sha1 => 20,
        }
    }

    /// The value of `data` as S3 writes it (base64).
    pub fn encoded_of(self, data: &[u8]) -> String {
        use sha1::Digest as _;
        match self {
            Algorithm::Crc(c) => c.encode(c.of(data)),
            Algorithm::Sha256 => base64_simd::STANDARD.encode_to_string(sha2::Sha256::digest(data)),
            Algorithm::Sha1 => base64_simd::STANDARD.encode_to_string(sha1::Sha1::digest(data)),
        }
    }

    /// Whether `text` is canonical base64 (as S3 writes it) of a value of this algorithm.
    fn is_value(self, text: &str) -> bool {
        let b64 = base64_simd::STANDARD;
        b64.decode_to_vec(text)
            .is_ok_and(|raw| raw.len() == self.width() && b64.encode_to_string(&raw) == text)
    }
}

impl From<CrcAlgo> for Algorithm {
    fn from(c: CrcAlgo) -> Algorithm {
        Algorithm::Crc(c)
    }
}

impl PartialEq<CrcAlgo> for Algorithm {
    fn eq(&self, other: &CrcAlgo) -> bool {
        *self == Algorithm::Crc(*other)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A checksum S3 stored: one `x-amz-rdma-checksum` value, or what a plain reply's
/// `x-amz-checksum-*` headers say ([`StoredChecksum::from_s3_headers`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredChecksum {
    pub algorithm: Algorithm,
    /// The value as S3 writes it: base64, and `-<parts>` after a COMPOSITE one.
    pub value: String,
    /// A digest of the parts' digests, not a checksum of the moved bytes.
    pub composite: bool,
}

/// A header value that is not `<ALGORITHM> <base64>[ COMPOSITE]`: what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed(pub String);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{RDMA_CHECKSUM} is malformed: {}", self.0)
    }
}

impl StoredChecksum {
    /// The checksum of bytes the server stored (`value` as S3 wrote it); `None` when the value is
    /// not one of `algorithm` (a store's damaged record is never sent).
    pub fn stored(algorithm: Algorithm, value: &str, composite: bool) -> Option<StoredChecksum> {
        let c = StoredChecksum {
            algorithm,
            value: value.trim().to_string(),
            composite,
        };
        c.value_is_well_formed().then_some(c)
    }

    /// A header's value: `<ALGORITHM> <base64>[ COMPOSITE]`, separated by single spaces or tabs.
    pub fn parse(text: &str) -> Result<StoredChecksum, Malformed> {
        let mut words = text.split_ascii_whitespace();
        let (Some(name), Some(value)) = (words.next(), words.next()) else {
            return Err(Malformed(format!("{text:?} has no '<ALGORITHM> <base64>'")));
        };
        let composite = match words.next() {
            None => false,
            Some(w) if w == COMPOSITE => true,
            Some(w) => return Err(Malformed(format!("unknown checksum type {w:?}"))),
        };
        if let Some(extra) = words.next() {
            return Err(Malformed(format!("unexpected {extra:?} after the type")));
        }
        let algorithm = Algorithm::parse(name)
            .ok_or_else(|| Malformed(format!("unknown algorithm {name:?}")))?;
        StoredChecksum::stored(algorithm, value, composite)
            .ok_or_else(|| Malformed(format!("{value:?} is not a {algorithm} value")))
    }

    /// What a plain GET or HEAD reply's `x-amz-checksum-<algorithm>` and `x-amz-checksum-type`
    /// headers say (`header` looks a header up by its lowercase name; a revision-5 server's token
    /// reply too): the first stored algorithm in [`Algorithm::PREFERRED`] order, as stored.
    /// `Err` names a value that is not one of its algorithm; `Ok(None)`: none stored.
    pub fn from_s3_headers(
        header: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<StoredChecksum>, Unchecked> {
        let typed_composite =
            header("x-amz-checksum-type").is_some_and(|t| t.trim().eq_ignore_ascii_case(COMPOSITE));
        for algorithm in Algorithm::PREFERRED {
            let name = format!("x-amz-checksum-{}", algorithm.as_str().to_ascii_lowercase());
            let Some(value) = header(&name) else {
                continue;
            };
            let composite = typed_composite || value.contains('-');
            return StoredChecksum::stored(algorithm, &value, composite)
                .map(Some)
                .ok_or(Unchecked::Malformed(algorithm.as_str()));
        }
        Ok(None)
    }

    /// A full value is base64 of the algorithm's width; a COMPOSITE one adds `-<parts>`.
    fn value_is_well_formed(&self) -> bool {
        let (digest, parts) = match self.value.split_once('-') {
            Some((d, n)) => (d, Some(n)),
            None => (self.value.as_str(), None),
        };
        let parts_ok = match parts {
            None => true,
            Some(n) => self.composite && n.parse::<u32>().is_ok_and(|n| n > 0),
        };
        parts_ok && self.algorithm.is_value(digest)
    }

    /// The header's value.
    pub fn header_value(&self) -> String {
        self.to_string()
    }

    /// What a download checked piece by piece (the engine, Python) checks against: a full CRC;
    /// a COMPOSITE or SHA value says why it cannot serve.
    pub fn object_checksum(&self) -> Result<ObjectChecksum, Unchecked> {
        match (self.algorithm, self.composite) {
            (Algorithm::Crc(algo), false) => algo
                .decode(&self.value)
                .map(|value| ObjectChecksum { algo, value })
                .ok_or(Unchecked::Malformed(algo.as_str())),
            (Algorithm::Crc(algo), true) => Err(Unchecked::Composite(Composite {
                algo,
                parts: self.value.split_once('-').and_then(|(_, n)| n.parse().ok()),
            })),
            (sha, _) => Err(Unchecked::NotCombinable(sha.as_str())),
        }
    }

    /// The bytes that landed, all of them in hand and in order (a C application's buffer): any
    /// algorithm's full value is checked; a COMPOSITE value is not the checksum of these bytes.
    pub fn check_bytes(&self, landed: &[u8]) -> Result<Result<Algorithm, Mismatch>, Unchecked> {
        if self.composite {
            return Err(self
                .object_checksum()
                .err()
                .unwrap_or(Unchecked::NoneStored));
        }
        let got = self.algorithm.encoded_of(landed);
        Ok(if got == self.value {
            Ok(self.algorithm)
        } else {
            Err(Mismatch {
                algo: self.algorithm,
                part: None,
                expected: self.value.clone(),
                got,
            })
        })
    }
}

/// What the bytes of a whole object, all in hand and in order (a C application's buffer), are
/// against the checksum a GET reply names (`header` looks a header up by its lowercase name):
/// `x-amz-rdma-checksum` on a token reply, else a plain reply's (or a revision-5 server's)
/// `x-amz-checksum-*`. Every full value is checked, SHA included; a COMPOSITE one is unchecked.
pub fn check_reply(
    landed: &[u8],
    header: impl Fn(&str) -> Option<String>,
) -> Result<Verdict, Mismatch> {
    let stored = match header(RDMA_CHECKSUM) {
        Some(text) => StoredChecksum::parse(&text)
            .map(Some)
            .map_err(|_| Unchecked::Malformed(RDMA_CHECKSUM)),
        None => StoredChecksum::from_s3_headers(&header),
    };
    let stored = match stored {
        Ok(Some(stored)) => stored,
        Ok(None) => return Ok(Verdict::Unchecked(Unchecked::NoneStored)),
        Err(why) => return Ok(Verdict::Unchecked(why)),
    };
    match stored.check_bytes(landed) {
        Ok(found) => found.map(Verdict::Verified),
        Err(why) => Ok(Verdict::Unchecked(why)),
    }
}

impl fmt::Display for StoredChecksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.algorithm, self.value)?;
        if self.composite {
            write!(f, " {COMPOSITE}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHECK: &[u8] = b"123456789";

    #[test]
    fn every_algorithm_round_trips_and_checks_the_bytes() {
        for algorithm in Algorithm::PREFERRED {
            let value = algorithm.encoded_of(CHECK);
            let c = StoredChecksum::stored(algorithm, &value, false).expect("well formed");
            let text = c.header_value();
            assert_eq!(text, format!("{} {value}", algorithm.as_str()));
            assert_eq!(StoredChecksum::parse(&text), Ok(c.clone()));
            assert_eq!(c.check_bytes(CHECK), Ok(Ok(algorithm)), "{algorithm}");
            let m = c
                .check_bytes(b"123456780")
                .expect("checked")
                .expect_err("a flipped byte");
            assert_eq!((m.algo, m.expected.as_str()), (algorithm, value.as_str()));
            assert!(m.to_string().contains(algorithm.as_str()), "{m}");
        }
        let c = StoredChecksum::parse("CRC64NVME rosUhgp5mIg=").expect("v2's FINAL form");
        assert_eq!(
            c.object_checksum(),
            Ok(ObjectChecksum {
                algo: CrcAlgo::Crc64Nvme,
                value: CrcAlgo::Crc64Nvme.of(CHECK)
            })
        );
    }

    #[test]
    fn a_composite_value_names_its_parts_and_is_not_the_bytes_checksum() {
        let c = StoredChecksum::parse("CRC32C 4waSgw==-3 COMPOSITE").expect("composite");
        assert!(c.composite);
        assert_eq!(c.header_value(), "CRC32C 4waSgw==-3 COMPOSITE");
        let why = Unchecked::Composite(Composite {
            algo: CrcAlgo::Crc32c,
            parts: Some(3),
        });
        assert_eq!(c.object_checksum(), Err(why));
        assert_eq!(c.check_bytes(CHECK), Err(why));
        let sha = StoredChecksum::parse(&format!(
            "SHA256 {}-2 COMPOSITE",
            Algorithm::Sha256.encoded_of(CHECK)
        ))
        .expect("a SHA256 composite");
        assert_eq!(
            sha.object_checksum(),
            Err(Unchecked::NotCombinable("SHA256"))
        );
    }

    #[test]
    fn malformed_values_are_refused_with_the_reason() {
        for bad in [
            "",
            "CRC64NVME",
            "MD5 rosUhgp5mIg=",
            "CRC32 rosUhgp5mIg=",
            "CRC64NVME rosUhgp5mIg=-2",
            "CRC64NVME rosUhgp5mIg= FULL_OBJECT",
            "CRC32C 4waSgw==-0 COMPOSITE",
            "CRC32C 4waSgw==-x COMPOSITE",
            "CRC64NVME rosUhgp5mIg= COMPOSITE extra",
            "CRC64NVME not-base64!",
        ] {
            let e = StoredChecksum::parse(bad).expect_err(bad);
            assert!(e.to_string().starts_with(RDMA_CHECKSUM), "{bad}: {e}");
        }
        assert_eq!(
            Algorithm::parse("crc64nvme"),
            Some(CrcAlgo::Crc64Nvme.into())
        );
    }
}
