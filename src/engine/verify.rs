//! End-to-end checksums in the engine (docs/protocol.md section 15). A download: each part's CRC
//! is computed on the disk thread while its bytes are still in the registered buffer, just before
//! they are written out, and the parts' values are combined into the object's as they arrive, in
//! any order. An upload: each part's CRC is computed as it is read into the registered buffer, and
//! sent with the part.

use super::io::{Sink, Source};
use crate::checksum::{CrcAlgo, CrcPieces, Mismatch, ObjectChecksum};
use std::collections::BTreeMap;
use std::io;
use std::sync::Mutex;

/// A stored checksum and the bytes of the copy it covers: the whole object, or one part of a
/// COMPOSITE multipart object (whose parts each keep their own CRC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Covered {
    /// Offset in the copy.
    pub start: u64,
    pub len: u64,
    pub stored: ObjectChecksum,
    /// The part number, when the checksum is one part's.
    pub part: Option<u32>,
}

/// A sink that checksums what passes through it on the way to `inner`, each byte into the CRC
/// of the stored checksum that covers it.
pub(super) struct CheckingSink<'a> {
    inner: &'a dyn Sink,
    /// In order, back to back.
    covers: &'a [Covered],
    pieces: Vec<Mutex<CrcPieces>>,
}

impl<'a> CheckingSink<'a> {
    pub(super) fn new(inner: &'a dyn Sink, covers: &'a [Covered]) -> CheckingSink<'a> {
        let pieces = covers
            .iter()
            .map(|c| Mutex::new(CrcPieces::new(c.stored.algo)))
            .collect();
        CheckingSink {
            inner,
            covers,
            pieces,
        }
    }

    /// Whether the bytes that landed have the stored checksums: the first that differs.
    pub(super) fn check(self) -> Result<(), Mismatch> {
        for (cover, pieces) in self.covers.iter().zip(self.pieces) {
            let pieces = pieces.into_inner().unwrap_or_else(|p| p.into_inner());
            cover
                .stored
                .check(pieces.value(cover.len))
                .map_err(|m| Mismatch {
                    part: cover.part,
                    ..m
                })?;
        }
        Ok(())
    }

    /// The CRC of `data`, written at `pos`, into the covers it overlaps.
    fn add(&self, mut data: &[u8], mut pos: u64) {
        let mut i = self.covers.partition_point(|c| c.start + c.len <= pos);
        while let (Some(cover), false) = (self.covers.get(i), data.is_empty()) {
            if pos < cover.start {
                // Bytes no stored checksum covers (the covers leave a gap): not counted.
                let skip = (cover.start - pos).min(data.len() as u64);
                data = &data[skip as usize..];
                pos += skip;
                continue;
            }
            let take = (cover.start + cover.len - pos).min(data.len() as u64) as usize;
            // The digest outside the lock: the disk threads checksum their parts at once.
            let mut piece = cover.stored.algo.digest();
            piece.update(&data[..take]);
            self.pieces[i]
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .add_digest(pos - cover.start, piece);
            data = &data[take..];
            pos += take as u64;
            i += 1;
        }
    }
}

impl Sink for CheckingSink<'_> {
    fn write_at(&self, data: &[u8], pos: u64) -> io::Result<()> {
        self.add(data, pos);
        self.inner.write_at(data, pos)
    }
}

/// A source that checksums each part it reads, as the bytes land in the registered buffer that
/// the RDMA READ of the PUT will move (docs/protocol.md rule 4.9: checksums describe the moved
/// bytes); a part sent from registered memory in place has its CRC computed there and
/// [`CheckingSource::record`]ed. The parts' values go with their PUTs; combined, the whole
/// object's goes with the multipart upload's completion.
pub(super) struct CheckingSource<'a> {
    inner: &'a dyn Source,
    algo: CrcAlgo,
    /// The value and length of each part, by its offset in the copy.
    parts: Mutex<BTreeMap<u64, (u64, u64)>>,
}

impl<'a> CheckingSource<'a> {
    /// `inner` checksummed with `algo`; `None` without one.
    pub(super) fn wrap(inner: &'a dyn Source, algo: Option<CrcAlgo>) -> Option<CheckingSource<'a>> {
        algo.map(|algo| CheckingSource {
            inner,
            algo,
            parts: Mutex::new(BTreeMap::new()),
        })
    }

    pub(super) fn algo(&self) -> CrcAlgo {
        self.algo
    }

    fn parts(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, (u64, u64)>> {
        self.parts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The CRC `value` of the `len` bytes of the part at `pos`, computed by the caller.
    pub(super) fn record(&self, pos: u64, len: u64, value: u64) {
        self.parts().insert(pos, (value, len));
    }

    /// The checksum of the part read (or recorded) at `pos`.
    pub(super) fn part(&self, pos: u64) -> Option<ObjectChecksum> {
        let (value, _) = *self.parts().get(&pos)?;
        Some(ObjectChecksum {
            algo: self.algo,
            value,
        })
    }

    /// The checksum of bytes `[0, len)` from the parts, if they cover them once each, in order.
    pub(super) fn whole(&self, len: u64) -> Option<ObjectChecksum> {
        let mut whole: Option<(u64, u64)> = None;
        for (&pos, &(value, n)) in self.parts().iter() {
            whole = match whole {
                None if pos == 0 => Some((value, n)),
                Some((acc, at)) if pos == at => Some((self.algo.combine(acc, value, n), at + n)),
                _ => return None,
            };
        }
        let (value, covered) = whole?;
        (covered == len).then_some(ObjectChecksum {
            algo: self.algo,
            value,
        })
    }
}

impl Source for CheckingSource<'_> {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        self.inner.read_at(buf, pos)?;
        self.record(pos, buf.len() as u64, self.algo.of(buf));
        Ok(())
    }
}

/// The source an upload reads through: the checking one when there is one, else `inner`.
pub(super) fn read_through<'a>(
    checking: &'a Option<CheckingSource<'a>>,
    inner: &'a dyn Source,
) -> &'a dyn Source {
    match checking {
        Some(checking) => checking,
        None => inner,
    }
}
