//! Cutting a copy into parts: ranged GETs of at most one registration (also along the parts of a
//! multipart object, none crossing a part's end), or the parts of a multipart upload within
//! S3's limits.

use crate::error::{Error, Result};
use crate::runtime::MAX_REGISTRATION;

/// S3's smallest part (all but the last).
pub const MIN_PART_SIZE: u64 = 5 << 20;
/// S3's largest part (and largest single PUT).
pub const MAX_PART_SIZE: u64 = 5 << 30;
/// S3's most parts in one upload.
pub const MAX_PARTS: u64 = 10_000;

/// One part: bytes `first .. first + len` of the object, at `pos` of the copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    /// 0-based; a multipart upload's part number is `index + 1`.
    pub index: usize,
    /// Object offset.
    pub first: u64,
    /// Offset in the copy (the file, or the destination buffer).
    pub pos: u64,
    pub len: u64,
}

/// `len` bytes from object offset `start`, in parts of `part_size` (the last may be shorter), or
/// cut along given boundaries ([`Plan::along`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub start: u64,
    pub len: u64,
    pub part_size: u64,
    /// The parts of [`Plan::along`], in order; empty for parts of `part_size`.
    cut: Vec<Part>,
}

impl Plan {
    /// Ranged GETs: parts of `part_size` bytes, none larger than one registration.
    pub fn ranges(start: u64, len: u64, part_size: u64) -> Result<Plan> {
        if part_size == 0 {
            return Err(Error::invalid("the part size is 0"));
        }
        Ok(Plan {
            start,
            len,
            part_size: part_size.min(MAX_REGISTRATION as u64),
            cut: Vec::new(),
        })
    }

    /// Ranged GETs of the object bytes from `start` that lie in `spans` (lengths, back to back:
    /// an object's S3 parts), each span in parts of at most `part_size` bytes, none crossing a
    /// span's end (so that every part's bytes belong to one stored checksum).
    pub fn along(start: u64, spans: &[u64], part_size: u64) -> Result<Plan> {
        let uniform = Plan::ranges(start, 0, part_size)?;
        let mut cut = Vec::new();
        let mut pos = 0u64;
        for &span in spans {
            let end = pos
                .checked_add(span)
                .ok_or_else(|| Error::invalid("the parts' lengths overflow"))?;
            while pos < end {
                let len = (end - pos).min(uniform.part_size);
                cut.push(Part {
                    index: cut.len(),
                    first: start + pos,
                    pos,
                    len,
                });
                pos += len;
            }
        }
        Ok(Plan {
            len: pos,
            cut,
            ..uniform
        })
    }

    /// A multipart upload of `len` bytes: `part_size` grown as needed to stay within 10,000
    /// parts (as the AWS CLI does), never below 5 MiB, never above 5 GiB.
    pub fn multipart(len: u64, part_size: u64) -> Result<Plan> {
        if part_size < MIN_PART_SIZE {
            return Err(Error::invalid(format!(
                "a multipart upload needs parts of at least 5 MiB, not {part_size} bytes"
            )));
        }
        // An UploadPart is one transfer of one registration (4 GiB) and at most 5 GiB.
        let largest = MAX_PART_SIZE.min(MAX_REGISTRATION as u64);
        let part_size = part_size.max(len.div_ceil(MAX_PARTS)).min(largest);
        if len.div_ceil(part_size) > MAX_PARTS {
            return Err(Error::invalid(format!(
                "{len} bytes do not fit 10,000 parts of at most {largest} bytes"
            )));
        }
        Ok(Plan {
            start: 0,
            len,
            part_size,
            cut: Vec::new(),
        })
    }

    /// Number of parts.
    pub fn count(&self) -> usize {
        if !self.cut.is_empty() {
            return self.cut.len();
        }
        self.len.div_ceil(self.part_size) as usize
    }

    /// Part `index`, if there is one.
    pub fn part(&self, index: usize) -> Option<Part> {
        if !self.cut.is_empty() {
            return self.cut.get(index).copied();
        }
        let pos = (index as u64).checked_mul(self.part_size)?;
        if pos >= self.len {
            return None;
        }
        Some(Part {
            index,
            first: self.start + pos,
            pos,
            len: (self.len - pos).min(self.part_size),
        })
    }

    /// The largest part (the buffer size a worker needs).
    pub fn largest(&self) -> u64 {
        match self.cut.iter().map(|p| p.len).max() {
            Some(largest) => largest,
            None => self.part_size.min(self.len),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_the_bytes_once_in_order() {
        let p = Plan::ranges(100, 25, 10).unwrap();
        let parts: Vec<Part> = (0..p.count()).filter_map(|i| p.part(i)).collect();
        assert_eq!(parts.len(), 3);
        assert_eq!((parts[0].first, parts[0].pos, parts[0].len), (100, 0, 10));
        assert_eq!((parts[2].first, parts[2].pos, parts[2].len), (120, 20, 5));
        assert_eq!(p.part(3), None);
        assert_eq!(p.largest(), 10);
    }

    #[test]
    fn parts_along_spans_never_cross_a_span() {
        // Spans of 25, 10 and 3 bytes from object offset 100, in parts of at most 10.
        let p = Plan::along(100, &[25, 10, 3], 10).unwrap();
        let parts: Vec<(u64, u64, u64)> = (0..p.count())
            .filter_map(|i| p.part(i))
            .map(|p| (p.first, p.pos, p.len))
            .collect();
        assert_eq!(
            parts,
            [
                (100, 0, 10),
                (110, 10, 10),
                (120, 20, 5),
                (125, 25, 10),
                (135, 35, 3)
            ]
        );
        assert_eq!((p.len, p.largest()), (38, 10));
        assert!((0..p.count()).all(|i| p.part(i).map(|p| p.index) == Some(i)));
        assert_eq!(p.part(5), None);
        assert!(Plan::along(0, &[1], 0).is_err());
    }

    #[test]
    fn a_range_is_never_larger_than_a_registration() {
        let p = Plan::ranges(0, 9 << 30, 8 << 30).unwrap();
        assert_eq!(p.part_size, 4 << 30);
        assert_eq!(p.count(), 3);
        assert!(Plan::ranges(0, 1, 0).is_err());
    }

    #[test]
    fn multipart_stays_within_s3_limits() {
        assert!(
            Plan::multipart(100 << 20, 1 << 20).is_err(),
            "parts under 5 MiB"
        );
        let p = Plan::multipart(100 << 20, 8 << 20).unwrap();
        assert_eq!(p.count(), 13);
        // 200 GiB in 8 MiB parts would be 25,600 parts: the part size grows.
        let big = Plan::multipart(200 << 30, 8 << 20).unwrap();
        assert!(big.count() as u64 <= MAX_PARTS);
        assert!(big.part_size >= (200u64 << 30).div_ceil(MAX_PARTS));
        // 4.5 GiB: past one registration and near one PUT, in parts that fit both.
        let p = Plan::multipart(9 << 29, 64 << 20).unwrap();
        assert_eq!(p.count(), 72);
        assert!(Plan::multipart(60_000 << 30, 8 << 20).is_err());
    }
}
