//! A download's end-to-end check (docs/protocol.md section 15): each part's CRC is computed on the
//! disk thread while its bytes are still in the registered buffer, just before they are written
//! out, and the parts' values are combined into the object's as they arrive, in any order.

use super::io::Sink;
use crate::checksum::{CrcPieces, Mismatch, ObjectChecksum};
use std::io;
use std::sync::Mutex;

/// A sink that checksums what passes through it on the way to `inner`.
pub(super) struct CheckingSink<'a> {
    inner: &'a dyn Sink,
    stored: ObjectChecksum,
    pieces: Mutex<CrcPieces>,
}

impl<'a> CheckingSink<'a> {
    pub(super) fn new(inner: &'a dyn Sink, stored: ObjectChecksum) -> CheckingSink<'a> {
        CheckingSink {
            inner,
            stored,
            pieces: Mutex::new(CrcPieces::new(stored.algo)),
        }
    }

    /// Whether the `len` bytes that landed have the stored checksum.
    pub(super) fn check(self, len: u64) -> Result<(), Mismatch> {
        let pieces = self.pieces.into_inner().unwrap_or_else(|p| p.into_inner());
        self.stored.check(pieces.value(len)).map(|_| ())
    }
}

impl Sink for CheckingSink<'_> {
    fn write_at(&self, data: &[u8], pos: u64) -> io::Result<()> {
        // The digest outside the lock: the disk threads checksum their parts at once.
        let mut piece = self.stored.algo.digest();
        piece.update(data);
        self.pieces
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add_digest(pos, piece);
        self.inner.write_at(data, pos)
    }
}
