//! A worker's file side, overlapped with its transfers: a download's part is written to the file
//! by the worker's disk thread while the worker's next ranged GET lands in its other buffer, and an
//! upload's next part is read from the file while the current one is uploaded (as s5cmd and
//! boto3's transfer manager keep the disk and the network busy at once). Each worker has at most
//! two buffers: the first from the ring (or registered when the worker first needs one: an upload
//! from registered memory sends most parts without), the second registered only when the first is
//! at the disk (and the worker goes on with one if that registration fails).

use super::plan::Part;
use super::ring::{Buffers, Slot};
use super::{Sink, Source};
use crossbeam_channel::{Receiver, Sender};
use std::io;
use std::thread::Scope;

/// The file side of a copy, shared by every worker's disk thread: what it does with a buffer
/// handed to it (a download's part: write it to the sink, then report its bytes; an upload's
/// next part: read it from the source).
#[derive(Clone, Copy)]
pub(super) enum FileSide<'a> {
    Sink(&'a dyn Sink),
    Source(&'a dyn Source),
}

type Finished = (Box<dyn Slot>, Part, io::Result<()>);

/// One worker's buffers and its disk thread.
pub(super) struct Disk<'b> {
    to_disk: Option<Sender<(Box<dyn Slot>, Part)>>,
    from_disk: Receiver<Finished>,
    /// Buffers at the disk thread now.
    at_disk: usize,
    /// Buffers free for the worker's next transfer.
    free: Vec<Box<dyn Slot>>,
    /// Whether the worker has its first buffer (it may register it when it needs it).
    has_first: bool,
    /// Whether the worker may still register its second buffer.
    may_grow: bool,
    buffers: &'b dyn Buffers,
    buffer_len: usize,
}

impl<'b> Disk<'b> {
    /// The worker's disk thread, started in `scope`, and its first buffer `first` (`None`:
    /// registered when the worker first needs a buffer, and a refusal then is that part's
    /// failure).
    pub(super) fn start<'scope, 'env: 'scope>(
        scope: &'scope Scope<'scope, 'env>,
        name: String,
        side: FileSide<'env>,
        progress: &'env (dyn Fn(u64) + Sync),
        first: Option<Box<dyn Slot>>,
        buffers: &'b dyn Buffers,
        buffer_len: usize,
    ) -> io::Result<Disk<'b>> {
        let (to_disk, tasks) = crossbeam_channel::bounded::<(Box<dyn Slot>, Part)>(2);
        let (done, from_disk) = crossbeam_channel::bounded::<Finished>(2);
        std::thread::Builder::new()
            .name(name)
            .spawn_scoped(scope, move || {
                for (mut slot, part) in tasks {
                    let len = part.len as usize;
                    let r = match side {
                        FileSide::Sink(sink) => {
                            slot.store(sink, part.pos, len).map(|()| progress(part.len))
                        }
                        FileSide::Source(src) => slot.load(src, part.pos, len),
                    };
                    if done.send((slot, part, r)).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Disk {
            to_disk: Some(to_disk),
            from_disk,
            at_disk: 0,
            has_first: first.is_some(),
            free: first.into_iter().collect(),
            may_grow: true,
            buffers,
            buffer_len,
        })
    }

    /// A buffer for the next transfer: a spare one, or the one the disk thread finishes next (its
    /// failure is the copy's).
    pub(super) fn free_buffer(&mut self) -> io::Result<Box<dyn Slot>> {
        if let Some(slot) = self.spare()? {
            return Ok(slot);
        }
        if self.at_disk == 0 {
            return Err(io::Error::other(
                "no buffer: none free and none at the disk",
            ));
        }
        let (slot, _, r) = self.wait()?;
        r.map(|()| slot)
    }

    /// A buffer at hand without waiting: a free one, the first one registered now (its refusal
    /// is the caller's failure), or the second one registered now (once; if that registration is
    /// refused, the worker goes on with one).
    fn spare(&mut self) -> io::Result<Option<Box<dyn Slot>>> {
        if let Some(slot) = self.free.pop() {
            return Ok(Some(slot));
        }
        if !self.has_first {
            let first = self
                .buffers
                .slot(self.buffer_len)
                .map_err(io::Error::other)?;
            self.has_first = true;
            return Ok(Some(first));
        }
        if !self.may_grow {
            return Ok(None);
        }
        self.may_grow = false;
        Ok(self
            .buffers
            .slot(self.buffer_len)
            .inspect_err(|e| tracing::debug!("a second ring buffer was refused ({e}): one it is"))
            .ok())
    }

    /// Give a buffer back unused (its transfer failed).
    pub(super) fn give_back(&mut self, slot: Box<dyn Slot>) {
        self.free.push(slot);
    }

    /// Hand `slot`, holding `part`'s bytes, to the disk thread to write.
    pub(super) fn store(&mut self, slot: Box<dyn Slot>, part: Part) -> io::Result<()> {
        self.send(slot, part)
    }

    /// A buffer holding `part`'s bytes from the source: the one the disk thread read ahead (the
    /// only thing an upload's disk holds between calls), or one read now. With `next` and a
    /// second buffer, the disk thread reads that part into it meanwhile.
    pub(super) fn load(
        &mut self,
        source: &dyn Source,
        part: Part,
        next: Option<Part>,
    ) -> io::Result<Box<dyn Slot>> {
        let slot = if self.at_disk > 0 {
            self.read_ahead(part)?
        } else {
            let mut slot = self.free_buffer()?;
            if let Err(e) = slot.load(source, part.pos, part.len as usize) {
                self.free.push(slot);
                return Err(e);
            }
            slot
        };
        self.read_next(next)?;
        Ok(slot)
    }

    /// With `next`, have the disk thread read that part meanwhile, into a buffer at hand (with
    /// one buffer, the next part is read when due). The worker's next [`Disk::load`] must be of
    /// `next`.
    pub(super) fn read_next(&mut self, next: Option<Part>) -> io::Result<()> {
        if let Some(next) = next {
            if let Some(spare) = self.spare()? {
                self.send(spare, next)?;
            }
        }
        Ok(())
    }

    /// The buffer the disk thread read `part` into (waits for it).
    fn read_ahead(&mut self, part: Part) -> io::Result<Box<dyn Slot>> {
        let (slot, ahead, r) = self.wait()?;
        let r = r.and_then(|()| match ahead.index == part.index {
            true => Ok(()),
            false => Err(io::Error::other(
                "the part read ahead is not the one asked for",
            )),
        });
        match r {
            Ok(()) => Ok(slot),
            Err(e) => {
                self.free.push(slot);
                Err(e)
            }
        }
    }

    /// Wait for everything at the disk thread and stop it: the first failure, if any.
    pub(super) fn finish(mut self) -> io::Result<()> {
        self.to_disk = None;
        let mut first = Ok(());
        while self.at_disk > 0 {
            if let Err(e) = self.wait().and_then(|(_, _, r)| r) {
                first = first.and(Err(e));
            }
        }
        first
    }

    fn send(&mut self, slot: Box<dyn Slot>, part: Part) -> io::Result<()> {
        let to_disk = self
            .to_disk
            .as_ref()
            .ok_or_else(|| io::Error::other("the disk thread was stopped"))?;
        to_disk
            .send((slot, part))
            .map_err(|_| io::Error::other("the disk thread stopped"))?;
        self.at_disk += 1;
        Ok(())
    }

    fn wait(&mut self) -> io::Result<Finished> {
        let finished = self
            .from_disk
            .recv()
            .map_err(|_| io::Error::other("the disk thread stopped"))?;
        self.at_disk -= 1;
        Ok(finished)
    }
}
