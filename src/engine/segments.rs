//! An upload whose bytes lie in memory already (a checkpoint: headers the writer built, then
//! tensors): segments laid end to end, host byte strings and slices of registered memory (host or
//! GPU). A part (or the single PUT) that lies whole in one registered slice is sent from there:
//! no ring buffer, no copy, its CRC computed where the bytes are. The others (across a segment's
//! end, or in host bytes) are copied into a ring buffer first, registered device memory read back
//! by the GPU runtime.

use super::io::Source;
use super::run::{send, Outgoing};
use super::{Buffers, EngineError, Job, ObjectStore, Report, Slice};
use crate::checksum::CrcAlgo;
use crate::error::{Error, OpError, Result};
use crate::runtime::Runtime;
use std::io;

/// One piece of an upload's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment<'a> {
    /// Host bytes (not registered: copied into a ring buffer).
    Bytes(&'a [u8]),
    /// A slice of a registration (its `base`), host or device memory.
    Registered(Slice),
}

impl Segment<'_> {
    fn len(&self) -> u64 {
        match self {
            Segment::Bytes(b) => b.len() as u64,
            Segment::Registered(s) => s.len as u64,
        }
    }
}

/// Registered memory as an upload reads it: the runtime's registrations (plain memory in tests).
pub trait RegisteredMemory: Sync {
    /// The length of the registration based at `base`, if there is one.
    fn registered_len(&self, base: usize) -> Option<usize>;
    /// The CRC (`algo`) of `slice`'s bytes, read where they are.
    fn crc(&self, slice: Slice, algo: CrcAlgo) -> Result<u64>;
    /// Copy `slice`'s bytes into `dst` (`slice.len` bytes).
    fn read(&self, slice: Slice, dst: &mut [u8]) -> Result<()>;
}

impl RegisteredMemory for Runtime {
    fn registered_len(&self, base: usize) -> Option<usize> {
        Runtime::registered_len(self, base)
    }

    fn crc(&self, slice: Slice, algo: CrcAlgo) -> Result<u64> {
        self.crc_of_registered(slice.base, slice.offset, slice.len, algo)
    }

    fn read(&self, slice: Slice, dst: &mut [u8]) -> Result<()> {
        let dst = dst
            .get_mut(..slice.len)
            .ok_or_else(|| Error::internal("a read larger than its destination"))?;
        self.read_registered(slice.base, slice.offset, dst)
    }
}

/// An upload's segments, checked, and where each ends in the object.
pub(super) struct Segments<'a> {
    segments: &'a [Segment<'a>],
    /// The object offset just past each segment.
    ends: Vec<u64>,
    memory: &'a dyn RegisteredMemory,
}

impl<'a> Segments<'a> {
    /// `segments` in order; refused when a registered slice is not inside its registration.
    fn new(segments: &'a [Segment<'a>], memory: &'a dyn RegisteredMemory) -> Result<Segments<'a>> {
        let mut ends = Vec::with_capacity(segments.len());
        let mut end = 0u64;
        for (i, segment) in segments.iter().enumerate() {
            if let Segment::Registered(slice) = segment {
                check_registered(i, *slice, memory)?;
            }
            end += segment.len();
            ends.push(end);
        }
        Ok(Segments {
            segments,
            ends,
            memory,
        })
    }

    /// The upload's length: every segment's bytes.
    fn len(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }

    /// The segment holding object byte `pos` (none holds bytes past the end), and where it
    /// starts.
    fn at(&self, pos: u64) -> Option<(&Segment<'a>, u64)> {
        let i = self.ends.partition_point(|end| *end <= pos);
        let segment = self.segments.get(i)?;
        let start = self.ends[i] - segment.len();
        Some((segment, start))
    }

    /// The registered slice that holds object bytes `pos .. pos + len` whole, if one does.
    pub(super) fn slice(&self, pos: u64, len: u64) -> Option<Slice> {
        let (Segment::Registered(slice), start) = self.at(pos)? else {
            return None;
        };
        let within = (pos - start) as usize;
        let fits = within as u64 + len <= slice.len as u64;
        fits.then_some(Slice {
            base: slice.base,
            offset: slice.offset + within,
            len: len as usize,
        })
    }

    /// The CRC of a registered slice's bytes, read where they are.
    pub(super) fn crc(&self, slice: Slice, algo: CrcAlgo) -> Result<u64> {
        self.memory.crc(slice, algo)
    }
}

/// A registered segment must lie inside a registration: checked before anything moves.
fn check_registered(i: usize, slice: Slice, memory: &dyn RegisteredMemory) -> Result<()> {
    let Some(registered) = memory.registered_len(slice.base) else {
        return Err(Error::new(
            OpError::BufNotRegistered,
            format!("segment {i}: no registration at {:#x}", slice.base),
        ));
    };
    let inside = slice
        .offset
        .checked_add(slice.len)
        .is_some_and(|end| end <= registered);
    if !inside {
        return Err(Error::invalid(format!(
            "segment {i}: {} bytes at {} do not fit the {registered}-byte registration at {:#x}",
            slice.len, slice.offset, slice.base
        )));
    }
    Ok(())
}

impl Source for Segments<'_> {
    /// The bytes of every segment `buf` overlaps: host bytes copied, registered memory read.
    fn read_at(&self, mut buf: &mut [u8], mut pos: u64) -> io::Result<()> {
        while !buf.is_empty() {
            let (segment, start) = self
                .at(pos)
                .ok_or_else(|| io::Error::other("a read past the upload's segments"))?;
            let within = (pos - start) as usize;
            let n = buf.len().min(segment.len() as usize - within);
            let (here, rest) = std::mem::take(&mut buf).split_at_mut(n);
            match segment {
                Segment::Bytes(bytes) => here.copy_from_slice(&bytes[within..within + n]),
                Segment::Registered(slice) => {
                    let part = Slice {
                        base: slice.base,
                        offset: slice.offset + within,
                        len: n,
                    };
                    self.memory.read(part, here).map_err(io::Error::other)?;
                }
            }
            buf = rest;
            pos += n as u64;
        }
        Ok(())
    }
}

/// `segments` end to end as the object, as [`super::upload`] uploads a file (one PUT up to the
/// multipart threshold, else a multipart upload; retries, checksums, abort on failure), each part
/// that lies whole in one registered segment sent straight from its memory. `memory` is the
/// runtime the segments are registered with. Refused before anything moves when the segments
/// hold no bytes or a registered segment is not inside its registration.
pub fn upload_from<S: ObjectStore>(
    store: &S,
    segments: &[Segment<'_>],
    memory: &dyn RegisteredMemory,
    buffers: &dyn Buffers,
    job: &Job<'_>,
) -> std::result::Result<Report, EngineError<S::Error>> {
    let segments = Segments::new(segments, memory).map_err(EngineError::Library)?;
    let out = Outgoing {
        source: &segments,
        len: segments.len(),
        direct: Some(&segments),
    };
    send(store, out, buffers, job)
}
