//! End-to-end checksums (docs/protocol.md section 15): the CRCs S3 stores with an object, computed
//! over bytes that land in pieces, in any order, and compared with what the server stored.
//!
//! One implementation for both ends: the server keeps a full-object CRC64NVME of every new object
//! ([`CrcPieces`] over the pieces RDMA and HTTP write), and the transfer engine checks what a GET
//! moved against the object's stored checksum ([`ObjectChecksum`], [`Verdict`]). CRC32, CRC32C and
//! CRC64NVME combine (the CRC of `a ++ b` from the CRCs of `a` and `b` and the length of `b`), so
//! the parts of a download, each checked as it lands, give the whole object's value without a
//! second pass. SHA-1 and SHA-256 do not combine: those objects are reported unchecked, with the
//! reason. A COMPOSITE multipart checksum is a digest of the parts' digests ([`Composite`]): the
//! engine checks such an object part by part, against each part's stored CRC.

use std::collections::BTreeMap;
use std::fmt;

pub mod stored;
pub use stored::{Algorithm, StoredChecksum, RDMA_CHECKSUM};

use crate::hip::{read_device_memory, GpuRuntime, HipError};
use crc_fast::{CrcAlgorithm, Digest};

/// A CRC algorithm S3 stores: the ones whose values combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CrcAlgo {
    Crc64Nvme,
    Crc32c,
    Crc32,
}

impl CrcAlgo {
    /// In the order a reader prefers them (S3's default first, then the SDKs' request defaults).
    pub const PREFERRED: [CrcAlgo; 3] = [CrcAlgo::Crc64Nvme, CrcAlgo::Crc32c, CrcAlgo::Crc32];

    /// From S3's name (`CRC64NVME`, `crc32c`, ...), any case.
    pub fn parse(name: &str) -> Option<CrcAlgo> {
        CrcAlgo::PREFERRED
            .into_iter()
            .find(|a| a.as_str().eq_ignore_ascii_case(name))
    }

    /// S3's name.
    pub fn as_str(self) -> &'static str {
        match self {
            CrcAlgo::Crc64Nvme => "CRC64NVME",
            CrcAlgo::Crc32c => "CRC32C",
            CrcAlgo::Crc32 => "CRC32",
        }
    }

    /// The response header that carries a stored value (`x-amz-checksum-crc64nvme`, ...).
    pub fn header(self) -> &'static str {
        match self {
            CrcAlgo::Crc64Nvme => "x-amz-checksum-crc64nvme",
            CrcAlgo::Crc32c => "x-amz-checksum-crc32c",
            CrcAlgo::Crc32 => "x-amz-checksum-crc32",
        }
    }

    /// Bytes of a value.
    fn width(self) -> usize {
        match self {
            CrcAlgo::Crc64Nvme => 8,
            CrcAlgo::Crc32c | CrcAlgo::Crc32 => 4,
        }
    }

    fn crc_fast(self) -> CrcAlgorithm {
        match self {
            CrcAlgo::Crc64Nvme => CrcAlgorithm::Crc64Nvme,
            CrcAlgo::Crc32c => CrcAlgorithm::Crc32Iscsi,
            CrcAlgo::Crc32 => CrcAlgorithm::Crc32IsoHdlc,
        }
    }

    /// A running digest of this algorithm.
    pub fn digest(self) -> Digest {
        Digest::new(self.crc_fast())
    }

    /// The value of `data`.
    pub fn of(self, data: &[u8]) -> u64 {
        crc_fast::checksum(self.crc_fast(), data)
    }

    /// The value of `a ++ b` from the values of `a` and of `b` (`b_len` bytes).
    pub fn combine(self, a: u64, b: u64, b_len: u64) -> u64 {
        crc_fast::checksum_combine(self.crc_fast(), a, b, b_len)
    }

    /// A value as S3 writes it: base64 of its big-endian bytes.
    pub fn encode(self, value: u64) -> String {
        let bytes = value.to_be_bytes();
        base64_simd::STANDARD.encode_to_string(&bytes[8 - self.width()..])
    }

    /// A value S3 wrote; `None` if it is not base64 of this algorithm's width.
    pub fn decode(self, text: &str) -> Option<u64> {
        let raw = base64_simd::STANDARD.decode_to_vec(text.trim()).ok()?;
        if raw.len() != self.width() {
            return None;
        }
        Some(raw.iter().fold(0u64, |v, b| (v << 8) | u64::from(*b)))
    }
}

impl fmt::Display for CrcAlgo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The CRC of bytes that arrive in pieces, in any order. Bytes covered from offset 0 go into one
/// running digest, at the speed of an in-order checksum; a piece that lands further on keeps a
/// digest of its own, combined into the running one once the gap before it is filled (a few
/// GF(2) products per piece). A piece over bytes already counted makes the value unknown
/// ([`CrcPieces::value`] is `None`: the caller checksums the bytes in order instead).
pub struct CrcPieces {
    algo: CrcAlgo,
    /// The bytes `[0, prefix.get_amount())`, in order.
    prefix: Digest,
    /// Pieces past the prefix, by offset.
    later: BTreeMap<u64, Digest>,
    overlapped: bool,
}

impl CrcPieces {
    pub fn new(algo: CrcAlgo) -> CrcPieces {
        CrcPieces {
            algo,
            prefix: algo.digest(),
            later: BTreeMap::new(),
            overlapped: false,
        }
    }

    /// The `data` written at `offset`.
    pub fn add(&mut self, offset: u64, data: &[u8]) {
        let end = offset.saturating_add(data.len() as u64);
        let in_order =
            offset == self.prefix.get_amount() && !self.overlaps_a_later_piece(offset, end);
        if in_order && !self.overlapped && !data.is_empty() {
            // The running digest takes it straight: no combination.
            self.prefix.update(data);
            self.absorb_the_pieces_now_joined();
            return;
        }
        let mut piece = self.algo.digest();
        piece.update(data);
        self.add_digest(offset, piece);
    }

    /// A piece whose digest the caller computed (of this algorithm; e.g. on its own thread,
    /// outside a lock around these pieces), written at `offset`.
    pub fn add_digest(&mut self, offset: u64, piece: Digest) {
        let len = piece.get_amount();
        if len == 0 || self.overlapped {
            return;
        }
        let covered = self.prefix.get_amount();
        let end = offset.saturating_add(len);
        if offset < covered || self.overlaps_a_later_piece(offset, end) {
            self.overlapped = true;
        } else if offset == covered {
            self.prefix.combine(&piece);
            self.absorb_the_pieces_now_joined();
        } else {
            self.later.insert(offset, piece);
        }
    }

    fn overlaps_a_later_piece(&self, offset: u64, end: u64) -> bool {
        let before = self.later.range(..=offset).next_back();
        let after = self.later.range(offset..end).next();
        before.is_some_and(|(&start, piece)| start + piece.get_amount() > offset) || after.is_some()
    }

    fn absorb_the_pieces_now_joined(&mut self) {
        while let Some(piece) = self.later.remove(&self.prefix.get_amount()) {
            self.prefix.combine(&piece);
        }
    }

    /// The CRC of bytes `[0, len)` when the pieces cover exactly those, once each; `None` after a
    /// hole or an overlap.
    pub fn value(&self, len: u64) -> Option<u64> {
        let covered = !self.overlapped && self.later.is_empty() && self.prefix.get_amount() == len;
        covered.then(|| self.prefix.finalize())
    }
}

/// Host bytes the check of device memory copies at a time (a GPU destination's bytes are read
/// back through a bounce of this size, never all at once).
pub const DEVICE_BOUNCE: usize = 8 << 20;

/// The CRC (`algo`) of `len` bytes of device memory at `ptr` on `device`: the check of bytes the
/// NIC wrote straight into GPU memory (docs/protocol.md section 15), read back through a host
/// bounce of at most `bounce` bytes at a time ([`DEVICE_BOUNCE`]).
///
/// # Safety
/// `ptr .. ptr + len` must be device memory of `device` that stays allocated for the call.
pub unsafe fn of_device_memory(
    gpu: &dyn GpuRuntime,
    device: i32,
    ptr: usize,
    len: usize,
    algo: CrcAlgo,
    bounce: usize,
) -> Result<u64, HipError> {
    let mut host = vec![0u8; bounce.clamp(1, len.max(1))];
    let mut digest = algo.digest();
    let mut done = 0usize;
    while done < len {
        let n = host.len().min(len - done);
        // SAFETY: the caller's contract covers `ptr + done .. + n` (inside `ptr .. ptr + len`).
        unsafe { read_device_memory(gpu, device, ptr + done, &mut host[..n])? };
        digest.update(&host[..n]);
        done += n;
    }
    Ok(digest.finalize())
}

/// Whether downloads are checked: the AWS SDKs' `response_checksum_validation` values, as the
/// command line (`--checksum-mode`) and Python (`checksum_mode`) take them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChecksumMode {
    /// Check whenever the server stores a full-object CRC (the SDKs' default).
    #[default]
    WhenSupported,
    /// Check only what an operation requires: a GET requires nothing, so nothing is checked.
    WhenRequired,
    Off,
}

impl ChecksumMode {
    pub const NAMES: [&'static str; 3] = ["when_supported", "when_required", "off"];

    /// From its name; an unknown name is a clear error.
    pub fn parse(name: &str) -> Result<ChecksumMode, String> {
        match name {
            "when_supported" => Ok(ChecksumMode::WhenSupported),
            "when_required" => Ok(ChecksumMode::WhenRequired),
            "off" => Ok(ChecksumMode::Off),
            other => Err(format!(
                "checksum mode {other:?}: expected one of {}",
                ChecksumMode::NAMES.join(", ")
            )),
        }
    }

    /// Whether a download is checked in this mode.
    pub fn checks(self) -> bool {
        self == ChecksumMode::WhenSupported
    }

    /// What a download is checked against in this mode, given what the server stored.
    pub fn check_against(
        self,
        stored: Result<ObjectChecksum, Unchecked>,
    ) -> Result<ObjectChecksum, Unchecked> {
        if self.checks() {
            stored
        } else {
            Err(Unchecked::Off)
        }
    }
}

/// A full-object CRC the server stored with an object (`x-amz-checksum-type: FULL_OBJECT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectChecksum {
    pub algo: CrcAlgo,
    pub value: u64,
}

impl ObjectChecksum {
    /// From a GET or HEAD reply asked with `x-amz-checksum-mode: ENABLED` (`header` looks a
    /// response header up by its lowercase name): the first full-object CRC in
    /// [`CrcAlgo::PREFERRED`] order, or why the reply gives none a download can be checked
    /// against (a COMPOSITE value: [`Unchecked::Composite`], with its algorithm and parts).
    pub fn from_headers(
        header: impl Fn(&str) -> Option<String>,
    ) -> Result<ObjectChecksum, Unchecked> {
        Self::read(header, false)
    }

    /// From the reply to a GET or HEAD of one part (`partNumber=N`, `x-amz-checksum-mode:
    /// ENABLED`): the part's own CRC. S3 sends it with the object's checksum type, so a part of
    /// a COMPOSITE object has a plain value under `x-amz-checksum-type: COMPOSITE`.
    pub fn of_part(header: impl Fn(&str) -> Option<String>) -> Result<ObjectChecksum, Unchecked> {
        Self::read(header, true)
    }

    fn read(
        header: impl Fn(&str) -> Option<String>,
        part: bool,
    ) -> Result<ObjectChecksum, Unchecked> {
        // A token GET's reply (revision 6): the stored checksum of the moved bytes, in the one
        // header no S3 SDK validates against the empty body.
        if let Some(text) = header(RDMA_CHECKSUM) {
            return StoredChecksum::parse(&text)
                .map_err(|_| Unchecked::Malformed(RDMA_CHECKSUM))?
                .object_checksum();
        }
        // A plain GET or HEAD, or a revision-5 server's token reply.
        let composite = !part
            && header("x-amz-checksum-type")
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("COMPOSITE"));
        for algo in CrcAlgo::PREFERRED {
            let Some(text) = header(algo.header()) else {
                continue;
            };
            // A COMPOSITE value is `<digest of the parts' digests>-<parts>`.
            let parts = text.split_once('-').map(|(_, n)| n.trim().parse().ok());
            if !part && (composite || parts.is_some()) {
                let parts = parts.flatten();
                return Err(Unchecked::Composite(Composite { algo, parts }));
            }
            return algo
                .decode(&text)
                .map(|value| ObjectChecksum { algo, value })
                .ok_or(Unchecked::Malformed(algo.as_str()));
        }
        let sha = [
            ("x-amz-checksum-sha256", "SHA256"),
            ("x-amz-checksum-sha1", "SHA1"),
        ];
        match sha.into_iter().find(|(name, _)| header(name).is_some()) {
            Some((_, algo)) => Err(Unchecked::NotCombinable(algo)),
            None => Err(Unchecked::NoneStored),
        }
    }

    /// Base64, as S3 writes it.
    pub fn encoded(&self) -> String {
        self.algo.encode(self.value)
    }
}

/// A COMPOSITE multipart checksum (`<digest of the parts' CRCs>-<parts>`): not the CRC of the
/// object's bytes, but each part's CRC is stored too (GET/HEAD with `partNumber`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Composite {
    pub algo: CrcAlgo,
    /// The `-<parts>` of the value, when it has one.
    pub parts: Option<u32>,
}

/// Why a download was not checked end to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unchecked {
    /// `--checksum-mode off` / `checksum_mode="off"`.
    Off,
    /// The server sent no checksum (none stored, or it does not return them).
    NoneStored,
    /// A COMPOSITE multipart checksum (a digest of the parts' digests) whose parts could not
    /// be checked one by one (the caller cannot ask for them, or a part has no CRC of its own).
    Composite(Composite),
    /// A SHA checksum, which a download in parts cannot combine.
    NotCombinable(&'static str),
    /// The stored value is not a value of its algorithm.
    Malformed(&'static str),
    /// Part of the object was asked for (a range): the server's checksum is of the whole.
    Range,
    /// The bytes landed in device memory, which the check does not read.
    DeviceMemory,
}

impl fmt::Display for Unchecked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unchecked::Off => f.write_str("checksums off"),
            Unchecked::NoneStored => f.write_str("the server sent no checksum"),
            Unchecked::Composite(c) => {
                write!(f, "the object has a COMPOSITE {} checksum", c.algo)
            }
            Unchecked::NotCombinable(a) => {
                write!(
                    f,
                    "the object has only a {a} checksum, which parts cannot combine"
                )
            }
            Unchecked::Malformed(a) => write!(f, "the server's {a} value is malformed"),
            Unchecked::Range => f.write_str("a range of the object (its checksum is of the whole)"),
            Unchecked::DeviceMemory => f.write_str("the bytes are in device memory"),
        }
    }
}

/// What a download's check found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Verdict {
    /// Not asked for (the caller checks nothing, or a transfer that is not a download).
    #[default]
    NotAsked,
    /// The bytes that landed have the object's stored checksum.
    Verified(Algorithm),
    /// Each part of a COMPOSITE multipart object has its stored checksum (this many parts).
    VerifiedParts(CrcAlgo, u32),
    /// Not checked, and why.
    Unchecked(Unchecked),
}

impl Verdict {
    /// Whether the bytes were checked and found right (whole, or part by part).
    pub fn is_verified(&self) -> bool {
        matches!(self, Verdict::Verified(_) | Verdict::VerifiedParts(..))
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::NotAsked => f.write_str("not checked"),
            Verdict::Verified(a) => write!(f, "{a} verified"),
            Verdict::VerifiedParts(a, n) => write!(f, "{a} verified per part ({n} parts)"),
            Verdict::Unchecked(why) => write!(f, "unchecked: {why}"),
        }
    }
}

/// The bytes that landed do not have the object's stored checksum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    pub algo: Algorithm,
    /// The part (1-based) whose checksum differs, when parts are checked one by one.
    pub part: Option<u32>,
    /// The server's value (base64, as S3 writes it).
    pub expected: String,
    /// The value of what landed.
    pub got: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} mismatch", self.algo)?;
        if let Some(n) = self.part {
            write!(f, " in part {n}")?;
        }
        write!(
            f,
            ": the server stored {}, the bytes that landed have {}",
            self.expected, self.got
        )
    }
}

impl ObjectChecksum {
    /// Compare with the value of what landed (`None`: the pieces did not cover the object once).
    pub fn check(&self, landed: Option<u64>) -> Result<CrcAlgo, Mismatch> {
        match landed {
            Some(v) if v == self.value => Ok(self.algo),
            other => Err(Mismatch {
                algo: self.algo.into(),
                part: None,
                expected: self.encoded(),
                got: other.map_or_else(|| "an incomplete cover".into(), |v| self.algo.encode(v)),
            }),
        }
    }

    /// Compare with the bytes that landed, all of them in hand.
    pub fn check_bytes(&self, landed: &[u8]) -> Result<CrcAlgo, Mismatch> {
        self.check(Some(self.algo.of(landed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check values of the three CRCs ("123456789"), as S3 encodes them.
    const CHECK: [(CrcAlgo, &str); 3] = [
        (CrcAlgo::Crc64Nvme, "rosUhgp5mIg="),
        (CrcAlgo::Crc32c, "4waSgw=="),
        (CrcAlgo::Crc32, "y/Q5Jg=="),
    ];

    #[test]
    fn the_check_values_encode_and_decode_as_s3_writes_them() {
        for (algo, text) in CHECK {
            let v = algo.of(b"123456789");
            assert_eq!(algo.encode(v), text, "{algo}");
            assert_eq!(algo.decode(text), Some(v));
            assert_eq!(CrcAlgo::parse(&algo.as_str().to_lowercase()), Some(algo));
        }
        assert_eq!(CrcAlgo::Crc32.decode("rosUhgp5mIg="), None, "wrong width");
        assert_eq!(CrcAlgo::Crc32.decode("not base64!"), None);
    }

    #[test]
    fn pieces_in_any_order_give_the_in_order_value() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 31 % 251) as u8).collect();
        let cuts = [0, 1, 999, 4096, 4097, 9000, 10_000];
        for algo in CrcAlgo::PREFERRED {
            let mut pieces = CrcPieces::new(algo);
            for w in cuts.windows(2).rev() {
                pieces.add(w[0] as u64, &data[w[0]..w[1]]);
            }
            assert_eq!(pieces.value(10_000), Some(algo.of(&data)), "{algo}");
        }
        assert_eq!(
            CrcPieces::new(CrcAlgo::Crc64Nvme).value(0),
            Some(CrcAlgo::Crc64Nvme.of(b""))
        );
    }

    #[test]
    fn a_hole_an_overlap_or_a_short_cover_has_no_value() {
        let mut hole = CrcPieces::new(CrcAlgo::Crc32c);
        hole.add(0, b"hello");
        hole.add(6, b"world");
        assert_eq!(hole.value(11), None);
        let mut overlap = CrcPieces::new(CrcAlgo::Crc32c);
        overlap.add(0, b"hello ");
        overlap.add(4, b"o world");
        assert_eq!(overlap.value(11), None);
        let mut short = CrcPieces::new(CrcAlgo::Crc32c);
        short.add(0, b"hello");
        assert_eq!(short.value(11), None);
    }

    fn headers<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn a_reply_names_its_full_object_crc_or_why_there_is_none() {
        let got = ObjectChecksum::from_headers(headers(&[
            ("x-amz-checksum-crc32", "y/Q5Jg=="),
            ("x-amz-checksum-crc64nvme", "rosUhgp5mIg="),
            ("x-amz-checksum-type", "FULL_OBJECT"),
        ]));
        assert_eq!(
            got.map(|c| c.algo),
            Ok(CrcAlgo::Crc64Nvme),
            "CRC64NVME preferred"
        );
        let composite = headers(&[("x-amz-checksum-crc32c", "AAAAAA==-3")]);
        let algo = CrcAlgo::Crc32c;
        assert_eq!(
            ObjectChecksum::from_headers(composite),
            Err(Unchecked::Composite(Composite {
                algo,
                parts: Some(3)
            }))
        );
        // A part of a COMPOSITE object: its own CRC, under the object's checksum type.
        let part = headers(&[
            ("x-amz-checksum-crc32c", "4waSgw=="),
            ("x-amz-checksum-type", "COMPOSITE"),
        ]);
        assert_eq!(
            ObjectChecksum::from_headers(&part),
            Err(Unchecked::Composite(Composite { algo, parts: None }))
        );
        assert_eq!(
            ObjectChecksum::of_part(&part),
            Ok(ObjectChecksum {
                algo,
                value: algo.of(b"123456789")
            })
        );
        let whole = headers(&[("x-amz-checksum-crc32c", "AAAAAA==-3")]);
        assert_eq!(
            ObjectChecksum::of_part(whole),
            Err(Unchecked::Malformed("CRC32C")),
            "a part's value is never COMPOSITE"
        );
        let sha = headers(&[("x-amz-checksum-sha256", "x")]);
        assert_eq!(
            ObjectChecksum::from_headers(sha),
            Err(Unchecked::NotCombinable("SHA256"))
        );
        assert_eq!(
            ObjectChecksum::from_headers(headers(&[])),
            Err(Unchecked::NoneStored)
        );
        let bad = headers(&[("x-amz-checksum-crc32", "rosUhgp5mIg=")]);
        assert_eq!(
            ObjectChecksum::from_headers(bad),
            Err(Unchecked::Malformed("CRC32"))
        );
    }

    #[test]
    fn checksum_modes_are_the_sdks_names_and_only_when_supported_checks() {
        for name in ChecksumMode::NAMES {
            let mode = ChecksumMode::parse(name).expect(name);
            assert_eq!(mode.checks(), name == "when_supported");
        }
        assert!(ChecksumMode::parse("WHEN_SUPPORTED").is_err());
        let stored = Err(Unchecked::NoneStored);
        assert_eq!(ChecksumMode::Off.check_against(stored), Err(Unchecked::Off));
        assert_eq!(ChecksumMode::WhenSupported.check_against(stored), stored);
    }

    #[test]
    fn a_check_names_the_algorithm_and_both_values() {
        let stored = ObjectChecksum {
            algo: CrcAlgo::Crc64Nvme,
            value: CrcAlgo::Crc64Nvme.of(b"123456789"),
        };
        assert_eq!(
            stored.check(Some(CrcAlgo::Crc64Nvme.of(b"123456789"))),
            Ok(CrcAlgo::Crc64Nvme)
        );
        let e = stored
            .check(Some(CrcAlgo::Crc64Nvme.of(b"123456780")))
            .expect_err("a flipped byte");
        assert_eq!(e.expected, "rosUhgp5mIg=");
        let text = e.to_string();
        assert!(
            text.contains("CRC64NVME") && text.contains("rosUhgp5mIg="),
            "{text}"
        );
        assert!(stored.check(None).is_err());
    }

    /// Device memory is read back through the bounce in pieces, and the pieces' CRC is the CRC
    /// of the bytes: a length that is no multiple of the bounce, and one under it.
    #[cfg(feature = "sim-gpu")]
    #[test]
    fn the_crc_of_device_memory_is_read_back_through_the_bounce() {
        use crate::hip::{DeviceBuffer, SimGpu};
        let gpu = SimGpu::new(1);
        let data: Vec<u8> = (0..100_003u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let buffer = DeviceBuffer::new(gpu.clone(), 0, data.len()).expect("device memory");
        buffer.write(0, &data).expect("upload");
        let ptr = buffer.addr();
        for bounce in [4096, 65_536, DEVICE_BOUNCE] {
            for algo in [CrcAlgo::Crc64Nvme, CrcAlgo::Crc32c] {
                // SAFETY: `ptr .. + data.len()` is device memory of device 0, allocated above.
                let crc = unsafe { of_device_memory(&*gpu, 0, ptr, data.len(), algo, bounce) };
                assert_eq!(crc, Ok(algo.of(&data)), "{algo}, bounce {bounce}");
            }
        }
        // SAFETY: as above; the first 1000 bytes only.
        let head = unsafe { of_device_memory(&*gpu, 0, ptr, 1000, CrcAlgo::Crc64Nvme, 4096) };
        assert_eq!(head, Ok(CrcAlgo::Crc64Nvme.of(&data[..1000])));
        // A copy the runtime refuses is the check's error, never a value.
        // SAFETY: `ptr` is device memory of device 0; device 5 does not exist (refused).
        let refused = unsafe { of_device_memory(&*gpu, 5, ptr, 1000, CrcAlgo::Crc64Nvme, 4096) };
        assert!(refused.is_err(), "{refused:?}");
    }
}
