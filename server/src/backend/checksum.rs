//! Object checksums (CRC32, CRC32C, SHA1, SHA256, CRC64NVME): computed while bytes are written,
//! verified against what the client sent, stored with the object. The digests are s3s's own
//! (`s3s::checksum::ChecksumHasher`, which wraps crc-fast, sha1 and sha2).

use hipobj::checksum::{Algorithm, StoredChecksum};
use s3s::checksum::ChecksumHasher;
use s3s::crypto::Checksum as _;
use serde::{Deserialize, Serialize};

use super::{StorageError, StorageResult};

/// One checksum algorithm S3 knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChecksumAlgo {
    Crc32,
    Crc32c,
    Sha1,
    Sha256,
    Crc64Nvme,
}

impl ChecksumAlgo {
    pub const ALL: [ChecksumAlgo; 5] = [
        ChecksumAlgo::Crc32,
        ChecksumAlgo::Crc32c,
        ChecksumAlgo::Sha1,
        ChecksumAlgo::Sha256,
        ChecksumAlgo::Crc64Nvme,
    ];

    /// From S3's name (`CRC32`, `crc32c`, ...), any case.
    pub fn parse(name: &str) -> Option<ChecksumAlgo> {
        match name.to_ascii_uppercase().as_str() {
            "CRC32" => Some(ChecksumAlgo::Crc32),
            "CRC32C" => Some(ChecksumAlgo::Crc32c),
            "SHA1" => Some(ChecksumAlgo::Sha1),
            "SHA256" => Some(ChecksumAlgo::Sha256),
            "CRC64NVME" => Some(ChecksumAlgo::Crc64Nvme),
            _ => None,
        }
    }

    /// S3's name.
    pub fn as_str(self) -> &'static str {
        match self {
            ChecksumAlgo::Crc32 => "CRC32",
            ChecksumAlgo::Crc32c => "CRC32C",
            ChecksumAlgo::Sha1 => "SHA1",
            ChecksumAlgo::Sha256 => "SHA256",
            ChecksumAlgo::Crc64Nvme => "CRC64NVME",
        }
    }

    /// Digest length in bytes.
    pub fn digest_len(self) -> usize {
        match self {
            ChecksumAlgo::Crc32 | ChecksumAlgo::Crc32c => 4,
            ChecksumAlgo::Sha1 => 20,
            ChecksumAlgo::Sha256 => 32,
            ChecksumAlgo::Crc64Nvme => 8,
        }
    }
}

/// The checksum a token GET that moved `moved` (the bytes sent) of the object reports in
/// `x-amz-rdma-checksum` (docs/protocol.md rule 16.2), for v1 and hipobj-rc-v2 alike: the stored
/// checksum of the whole object (COMPOSITE marked), or of exactly one whole part of a multipart
/// object (that part's own, a checksum of its bytes); none for any other range or when nothing
/// is stored. When several algorithms are stored, the first in the library's
/// [`Algorithm::PREFERRED`] order.
pub fn moved_checksum(
    info: &super::ObjectInfo,
    moved: &std::ops::Range<u64>,
) -> Option<StoredChecksum> {
    if *moved == (0..info.size) {
        return info.checksums.preferred(info.checksums.composite);
    }
    part_checksums(info, moved)?.preferred(false)
}

/// The stored checksums of the part of a multipart object whose bytes are exactly `range`.
fn part_checksums<'i>(
    info: &'i super::ObjectInfo,
    range: &std::ops::Range<u64>,
) -> Option<&'i Checksums> {
    let mut start = 0u64;
    for (size, sums) in info.part_sizes.iter().zip(&info.part_checksums) {
        if start > range.start {
            return None;
        }
        let end = start.saturating_add(*size);
        if (start..end) == *range {
            return Some(sums);
        }
        start = end;
    }
    None
}

/// What an object's ETag is (the operator's `--etag`; docs/etag.md). S3 and the default: the
/// hex MD5 of the bytes, which one core computes at about 0.7 GB/s and only in order. `Crc64Nvme`:
/// the hex CRC64NVME of the bytes (16 digits), which runs at memory speed with carry-less
/// multiplication and is computed per piece as the pieces land, in any order, then combined
/// ([`hipobj::checksum::CrcPieces`], the library's); the checksum itself is stored and returned as S3 returns a FULL_OBJECT
/// CRC64NVME. A `Content-MD5` the client sends is still computed and checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EtagAlgo {
    #[default]
    Md5,
    Crc64nvme,
}

/// The checksum the store computes and keeps for an object whose writer named none (`--default-checksum`).
/// S3's rule since 2025: a full-object CRC64NVME of every new object, multipart included, so a
/// reader can check what it received end to end (docs/etag.md). `None` is for a
/// store that cannot afford the CRC (it runs at memory speed with carry-less multiplication).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DefaultChecksum {
    #[default]
    Crc64nvme,
    None,
}

/// Base64 checksum values, one optional slot per algorithm.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checksums {
    pub crc32: Option<String>,
    pub crc32c: Option<String>,
    pub sha1: Option<String>,
    pub sha256: Option<String>,
    pub crc64nvme: Option<String>,
    /// The values are COMPOSITE multipart checksums (`<digest of part digests>-<parts>`), not
    /// checksums of the whole object (FULL_OBJECT).
    #[serde(default)]
    pub composite: bool,
}

impl Checksums {
    /// The checksums an S3 store's HEAD or GET answer names (`x-amz-checksum-<algorithm>`, and
    /// `x-amz-checksum-type: COMPOSITE` for a multipart object's digest of its parts), read
    /// through `header` (lowercase names): what a gateway keeps of its store's object.
    pub fn from_reply(header: impl Fn(&str) -> Option<String>) -> Checksums {
        let mut sums = Checksums::default();
        for algo in ChecksumAlgo::ALL {
            let name = format!("x-amz-checksum-{}", algo.as_str().to_ascii_lowercase());
            sums.set(algo, header(&name));
        }
        sums.composite = header("x-amz-checksum-type").as_deref() == Some("COMPOSITE");
        sums
    }

    /// The first stored value in [`Algorithm::PREFERRED`] order, as `x-amz-rdma-checksum` names
    /// it (`composite`: the values are digests of the parts' digests).
    fn preferred(&self, composite: bool) -> Option<StoredChecksum> {
        Algorithm::PREFERRED.into_iter().find_map(|algorithm| {
            let value = self.get(ChecksumAlgo::parse(algorithm.as_str())?)?;
            StoredChecksum::stored(algorithm, value, composite)
        })
    }

    pub fn get(&self, algo: ChecksumAlgo) -> Option<&String> {
        match algo {
            ChecksumAlgo::Crc32 => self.crc32.as_ref(),
            ChecksumAlgo::Crc32c => self.crc32c.as_ref(),
            ChecksumAlgo::Sha1 => self.sha1.as_ref(),
            ChecksumAlgo::Sha256 => self.sha256.as_ref(),
            ChecksumAlgo::Crc64Nvme => self.crc64nvme.as_ref(),
        }
    }

    pub fn set(&mut self, algo: ChecksumAlgo, value: Option<String>) {
        let slot = match algo {
            ChecksumAlgo::Crc32 => &mut self.crc32,
            ChecksumAlgo::Crc32c => &mut self.crc32c,
            ChecksumAlgo::Sha1 => &mut self.sha1,
            ChecksumAlgo::Sha256 => &mut self.sha256,
            ChecksumAlgo::Crc64Nvme => &mut self.crc64nvme,
        };
        *slot = value;
    }

    /// Algorithms with a value.
    pub fn algos(&self) -> impl Iterator<Item = ChecksumAlgo> + '_ {
        ChecksumAlgo::ALL
            .into_iter()
            .filter(|a| self.get(*a).is_some())
    }

    /// The ETag of [`EtagAlgo::Crc64Nvme`]: the CRC64NVME value in lowercase hex.
    pub fn crc64nvme_etag(&self) -> Option<String> {
        let value = self.crc64nvme.as_deref()?;
        let bytes = base64_simd::STANDARD.decode_to_vec(value).ok()?;
        (bytes.len() == 8).then(|| hex::encode(bytes))
    }

    pub fn is_empty(&self) -> bool {
        self.algos().next().is_none()
    }

    fn from_dto(c: s3s::dto::Checksum) -> Checksums {
        Checksums {
            crc32: c.checksum_crc32,
            crc32c: c.checksum_crc32c,
            sha1: c.checksum_sha1,
            sha256: c.checksum_sha256,
            crc64nvme: c.checksum_crc64nvme,
            composite: false,
        }
    }
}

/// Computes the checksums a write needs, in one pass.
pub struct ChecksumComputer {
    hasher: ChecksumHasher,
}

impl ChecksumComputer {
    /// Compute every algorithm in `expected` plus `extra`.
    pub fn new(expected: &Checksums, extra: Option<ChecksumAlgo>) -> Self {
        let mut hasher = ChecksumHasher::default();
        for algo in expected.algos().chain(extra) {
            match algo {
                ChecksumAlgo::Crc32 => hasher.crc32 = Some(Default::default()),
                ChecksumAlgo::Crc32c => hasher.crc32c = Some(Default::default()),
                ChecksumAlgo::Sha1 => hasher.sha1 = Some(Default::default()),
                ChecksumAlgo::Sha256 => hasher.sha256 = Some(Default::default()),
                ChecksumAlgo::Crc64Nvme => hasher.crc64nvme = Some(Default::default()),
            }
        }
        ChecksumComputer { hasher }
    }

    pub fn update(&mut self, data: &[u8]) {
        self.hasher.update(data);
    }

    /// Whether it computes CRC64NVME.
    pub fn computes_crc64nvme(&self) -> bool {
        self.hasher.crc64nvme.is_some()
    }

    /// Whether it computes nothing (no digest needs the bytes in order).
    pub fn computes_nothing(&self) -> bool {
        let h = &self.hasher;
        h.crc32.is_none()
            && h.crc32c.is_none()
            && h.sha1.is_none()
            && h.sha256.is_none()
            && h.crc64nvme.is_none()
    }

    /// The computed values, checked against `expected`.
    pub fn finish(self, expected: &Checksums) -> StorageResult<Checksums> {
        let got = Checksums::from_dto(self.hasher.finalize());
        for algo in expected.algos() {
            if expected.get(algo) != got.get(algo) {
                return Err(StorageError::ChecksumMismatch(algo));
            }
        }
        Ok(got)
    }
}

/// Base64 `algo` digest of zero bytes (what an SDK sends as the checksum of an empty body).
pub fn empty_digest(algo: ChecksumAlgo) -> Option<String> {
    let none = Checksums::default();
    ChecksumComputer::new(&none, Some(algo))
        .finish(&none)
        .ok()
        .and_then(|c| c.get(algo).cloned())
}

/// Checksum of a multipart object from its parts' checksums: the digest of the concatenated
/// binary part digests, then `-<parts>` (S3's COMPOSITE type). `None` if a part lacks it.
pub fn composite(algo: ChecksumAlgo, parts: &[&Checksums]) -> Option<String> {
    let mut joined = Vec::with_capacity(parts.len() * algo.digest_len());
    for part in parts {
        let raw = base64_simd::STANDARD.decode_to_vec(part.get(algo)?).ok()?;
        joined.extend_from_slice(&raw);
    }
    let digest: Vec<u8> = match algo {
        ChecksumAlgo::Crc32 => s3s::crypto::Crc32::checksum(&joined).as_ref().to_vec(),
        ChecksumAlgo::Crc32c => s3s::crypto::Crc32c::checksum(&joined).as_ref().to_vec(),
        ChecksumAlgo::Sha1 => s3s::crypto::Sha1::checksum(&joined).as_ref().to_vec(),
        ChecksumAlgo::Sha256 => s3s::crypto::Sha256::checksum(&joined).as_ref().to_vec(),
        ChecksumAlgo::Crc64Nvme => s3s::crypto::Crc64Nvme::checksum(&joined).as_ref().to_vec(),
    };
    Some(format!(
        "{}-{}",
        base64_simd::STANDARD.encode_to_string(&digest),
        parts.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store's answer names its checksums as S3 does; each is kept under its algorithm, and a
    /// COMPOSITE type marks the values as digests of parts.
    #[test]
    fn a_stores_reply_names_the_checksums_the_gateway_keeps() {
        let reply = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let full = Checksums::from_reply(reply(&[
            ("x-amz-checksum-crc64nvme", "rosUhgp5mIg="),
            ("x-amz-checksum-crc32c", "4waSgw=="),
            ("x-amz-checksum-type", "FULL_OBJECT"),
        ]));
        assert_eq!(full.crc64nvme.as_deref(), Some("rosUhgp5mIg="));
        assert_eq!(full.crc32c.as_deref(), Some("4waSgw=="));
        assert_eq!(
            (full.crc32.as_deref(), full.sha256.as_deref()),
            (None, None)
        );
        assert!(!full.composite);
        let parts = Checksums::from_reply(reply(&[
            ("x-amz-checksum-crc32", "AAAAAA==-3"),
            ("x-amz-checksum-type", "COMPOSITE"),
        ]));
        assert_eq!(parts.crc32.as_deref(), Some("AAAAAA==-3"));
        assert!(parts.composite);
        assert!(Checksums::from_reply(reply(&[])).is_empty());
    }
    use hipobj::checksum::{CrcAlgo, CrcPieces};

    #[test]
    fn verifies_and_reports_mismatch() {
        // CRC32 of "hello" is 0x3610a686.
        let good = Checksums {
            crc32: Some("NhCmhg==".into()),
            ..Default::default()
        };
        let mut c = ChecksumComputer::new(&good, Some(ChecksumAlgo::Sha256));
        c.update(b"hel");
        c.update(b"lo");
        let got = c.finish(&good).expect("matches");
        assert_eq!(got.crc32.as_deref(), Some("NhCmhg=="));
        assert_eq!(
            got.sha256.as_deref(),
            Some("LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ=")
        );
        let bad = Checksums {
            crc32: Some("AAAAAA==".into()),
            ..Default::default()
        };
        let mut c = ChecksumComputer::new(&bad, None);
        c.update(b"hello");
        assert!(matches!(
            c.finish(&bad),
            Err(StorageError::ChecksumMismatch(ChecksumAlgo::Crc32))
        ));
    }

    fn ordered_crc64nvme(data: &[u8]) -> String {
        let none = Checksums::default();
        let mut c = ChecksumComputer::new(&none, Some(ChecksumAlgo::Crc64Nvme));
        c.update(data);
        c.finish(&none)
            .expect("computed")
            .crc64nvme
            .expect("crc64nvme")
    }

    #[test]
    fn crc_pieces_in_any_order_equal_s3s_ordered_crc64nvme() {
        let data: Vec<u8> = (0..300_001u32).map(|i| (i * 31 + i / 97) as u8).collect();
        for chunk in [1usize, 7, 4096, 65_536, 300_001] {
            let mut pieces: Vec<(usize, &[u8])> = data.chunks(chunk).enumerate().collect();
            pieces.reverse();
            let mut crc = CrcPieces::new(CrcAlgo::Crc64Nvme);
            for (i, piece) in pieces {
                crc.add((i * chunk) as u64, piece);
            }
            let value = crc.value(data.len() as u64).expect("covered");
            assert_eq!(
                CrcAlgo::Crc64Nvme.encode(value),
                ordered_crc64nvme(&data),
                "chunk {chunk}"
            );
        }
        assert_eq!(
            CrcAlgo::Crc64Nvme.encode(CrcPieces::new(CrcAlgo::Crc64Nvme).value(0).expect("empty")),
            ordered_crc64nvme(b"")
        );
    }

    #[test]
    fn crc_pieces_refuse_a_hole_an_overlap_or_a_short_cover() {
        let mut crc = CrcPieces::new(CrcAlgo::Crc64Nvme);
        crc.add(0, b"hello ");
        crc.add(7, b"orld");
        assert_eq!(crc.value(11), None, "a hole at 6");
        crc.add(6, b"w");
        let value = crc.value(11).expect("the hole filled");
        assert_eq!(
            CrcAlgo::Crc64Nvme.encode(value),
            ordered_crc64nvme(b"hello world")
        );
        assert_eq!(crc.value(12), None, "shorter than the object");
        // An overlap and a hole of the same size: the lengths add up, the cover does not.
        let mut crc = CrcPieces::new(CrcAlgo::Crc64Nvme);
        crc.add(0, b"hello ");
        crc.add(5, b" wo");
        crc.add(9, b"ld");
        assert_eq!(crc.value(11), None, "5..6 twice, 8..9 never");
        // Overlaps between pieces past a hole, either way round.
        for (first, second) in [
            ((4, &b"abc"[..]), (6, &b"de"[..])),
            ((6, &b"de"[..]), (4, &b"abc"[..])),
        ] {
            let mut crc = CrcPieces::new(CrcAlgo::Crc64Nvme);
            crc.add(first.0, first.1);
            crc.add(second.0, second.1);
            crc.add(0, b"0123");
            assert_eq!(crc.value(8), None, "6 written twice");
        }
    }

    #[test]
    fn names_round_trip() {
        for a in ChecksumAlgo::ALL {
            assert_eq!(ChecksumAlgo::parse(a.as_str()), Some(a));
        }
        assert_eq!(ChecksumAlgo::parse("md5"), None);
    }
}
