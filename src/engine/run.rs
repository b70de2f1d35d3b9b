//! Running a plan: `concurrency` named worker threads, each with its own ring buffer (and a
//! second while the first is at its disk thread), take parts in order until none is left, the
//! first failure, or a cancel.

use super::disk::{Disk, FileSide};
use super::pace::Pace;
use super::plan::{Part, Plan, MAX_PARTS};
use super::retry::Retrier;
use super::ring::{Buffers, Slot};
use super::segments::Segments;
use super::verify::{read_through, CheckingSink, CheckingSource, Covered};
use super::{
    CompletedPart, EngineError, Job, ObjectStore, PartHead, PutTarget, Report, Sink, Slice, Source,
};
use crate::checksum::{Composite, ObjectChecksum, StoredChecksum, Unchecked, Verdict};
use crate::error::Error;
use crate::runtime::MAX_REGISTRATION;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

type Outcome<T, E> = Result<T, EngineError<E>>;

/// A worker's work on one part, told the part it takes next (if it took one ahead).
type PartWork<'w, S, T, E> = dyn Fn(&mut S, Part, Option<Part>) -> Outcome<T, E> + Sync + 'w;

impl<'a> Retrier<'a> {
    /// A copy's retrier, with the limit on its requests in flight (`pace`).
    fn new(job: &'a Job<'_>) -> Retrier<'a> {
        let mut retrier = Retrier::with_policy(&job.settings.retry, job.cancel);
        if job.settings.retry.paced {
            retrier.pace = Some(Pace::new(job.settings.concurrency));
        }
        retrier
    }

    /// Times a failure cut the requests in flight.
    fn cuts(&self) -> u64 {
        self.pace.as_ref().map_or(0, Pace::cuts)
    }

    /// One request of the store, retried; a final failure carries the retries so far.
    fn store<T, E: super::Classify + std::fmt::Display>(
        &self,
        what: &dyn Fn() -> String,
        op: impl FnMut() -> Result<T, E>,
    ) -> Outcome<T, E> {
        self.run(what, op).map_err(|error| EngineError::Store {
            error,
            retries: self.retries(),
        })
    }
}

/// Run `work` on every part of `plan`, one thread per state in `states`; the results in part
/// order. After the first failure no part starts, and that failure is the answer. (How many of
/// them send a request at once is the retrier's pace.) With `ahead`, a worker takes its next part
/// before it works on the current one and `work` is told which (an upload reads it meanwhile),
/// except the last parts, which go to whichever worker is free first.
fn for_each_part<S: Send, T: Send, E: Send>(
    plan: &Plan,
    states: &mut [S],
    ahead: bool,
    cancel: &AtomicBool,
    work: &PartWork<'_, S, T, E>,
) -> Outcome<Vec<T>, E> {
    let count = plan.count();
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let results: Mutex<Vec<Option<T>>> = Mutex::new((0..count).map(|_| None).collect());
    let failure: Mutex<Option<EngineError<E>>> = Mutex::new(None);
    let fail = |e: EngineError<E>| {
        stop.store(true, Ordering::Relaxed);
        failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(e);
    };
    let claim = || plan.part(next.fetch_add(1, Ordering::Relaxed));
    // A part taken ahead waits for its worker's current one, so the last `workers` parts are
    // left for whichever worker is free first.
    let workers = states.len();
    let claim_ahead = || {
        let mut i = next.load(Ordering::Relaxed);
        loop {
            if i + workers >= count {
                return None;
            }
            match next.compare_exchange_weak(i, i + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return plan.part(i),
                Err(now) => i = now,
            }
        }
    };
    std::thread::scope(|scope| {
        let (stop, results, fail) = (&stop, &results, &fail);
        let (claim, claim_ahead) = (&claim, &claim_ahead);
        for (n, state) in states.iter_mut().enumerate() {
            let worker = move || {
                let mut current = claim();
                while let Some(part) = current {
                    if stop.load(Ordering::Relaxed) || cancel.load(Ordering::Relaxed) {
                        return;
                    }
                    let after = if ahead { claim_ahead() } else { None };
                    match work(state, part, after) {
                        Ok(t) => {
                            if let Some(slot) = results
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .get_mut(part.index)
                            {
                                *slot = Some(t);
                            }
                        }
                        Err(e) => return fail(e),
                    }
                    current = after.or_else(claim);
                }
            };
            if let Err(e) = std::thread::Builder::new()
                .name(format!("hipobj-engine-{n:02}"))
                .spawn_scoped(scope, worker)
            {
                fail(EngineError::Io(e));
            }
        }
    });
    if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    let done: Option<Vec<T>> = results.into_iter().collect();
    done.ok_or(EngineError::Cancelled { retries: 0 })
}

/// When a copy's workers register their first ring buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RingStart {
    /// Before any part moves (a refusal fails the copy before it starts).
    Now,
    /// When a worker first needs one: an upload from registered memory may need none.
    WhenNeeded,
}

/// The workers' disks ([`Disk`]): each with its ring buffer and its disk thread, run by
/// `for_each_part`; the parts' results, or the first failure (a part's, then the disks'). An
/// upload's workers take their next part ahead, for their disk to read meanwhile.
fn with_disks<'a, T: Send, E: Send>(
    side: FileSide<'a>,
    buffers: &'a dyn Buffers,
    plan: &Plan,
    job: &'a Job<'a>,
    start: RingStart,
    work: &PartWork<'_, Disk<'a>, T, E>,
) -> Outcome<Vec<T>, E> {
    let slots: Vec<Option<Box<dyn Slot>>> = match start {
        RingStart::Now => ring(buffers, plan, job.settings.concurrency)?
            .into_iter()
            .map(Some)
            .collect(),
        RingStart::WhenNeeded => (0..workers(plan, job.settings.concurrency))
            .map(|_| None)
            .collect(),
    };
    let len = slots_len(plan)?;
    let ahead = matches!(side, FileSide::Source(_));
    std::thread::scope(|scope| {
        let mut disks = Vec::with_capacity(slots.len());
        for (n, slot) in slots.into_iter().enumerate() {
            let name = format!("hipobj-disk-{n:02}");
            disks.push(
                Disk::start(scope, name, side, job.progress, slot, buffers, len)
                    .map_err(EngineError::Io)?,
            );
        }
        let result = for_each_part(plan, &mut disks, ahead, job.cancel, work);
        let finished: Vec<std::io::Result<()>> = disks.into_iter().map(Disk::finish).collect();
        let disks_done: std::io::Result<Vec<()>> = finished.into_iter().collect();
        let parts = result?;
        disks_done.map_err(EngineError::Io)?;
        Ok(parts)
    })
}

/// The length of each ring buffer: the plan's largest part.
fn slots_len<E>(plan: &Plan) -> Outcome<usize, E> {
    usize::try_from(plan.largest())
        .map_err(|_| EngineError::Library(Error::invalid("the part size does not fit memory")))
}

/// Workers for `plan`: `concurrency`, but no more than it has parts.
fn workers(plan: &Plan, concurrency: usize) -> usize {
    concurrency.max(1).min(plan.count())
}

/// The ring's first buffers: one per worker, as large as the largest part (a worker's [`Disk`]
/// registers its second when it needs one).
fn ring<E>(
    buffers: &dyn Buffers,
    plan: &Plan,
    concurrency: usize,
) -> Outcome<Vec<Box<dyn Slot>>, E> {
    let len = slots_len(plan)?;
    (0..workers(plan, concurrency))
        .map(|_| buffers.slot(len).map_err(EngineError::Library))
        .collect()
}

/// A part's GET, retried, and the checks that the server wrote all of it and, where its reply
/// names the stored checksum of exactly these bytes, that it is the one `covers` check against.
fn get_part<S: ObjectStore>(
    store: &S,
    retrier: &Retrier<'_>,
    slice: Slice,
    part: Part,
    covers: &[Covered],
) -> Outcome<(), S::Error> {
    let last = part.first + part.len - 1;
    let (got, named) = retrier.store(&|| format!("GET bytes {}-{last}", part.first), || {
        store.get_named(slice, part.first)
    })?;
    if got != part.len {
        return Err(EngineError::Short {
            first: part.first,
            want: part.len,
            got,
        });
    }
    match named {
        Some(named) => same_stored_checksum(&named, part, covers),
        None => Ok(()),
    }
}

/// A reply's `x-amz-rdma-checksum` against the stored checksum the download checks the same
/// bytes against (a cover of exactly `part`'s bytes): another value means the object changed
/// after the HEAD that gave the covers.
fn same_stored_checksum<E>(
    named: &StoredChecksum,
    part: Part,
    covers: &[Covered],
) -> Outcome<(), E> {
    let Some(cover) = covers
        .iter()
        .find(|c| c.start == part.pos && c.len == part.len)
    else {
        return Ok(());
    };
    match named.object_checksum() {
        Ok(value) if value != cover.stored => Err(EngineError::Changed {
            first: part.first,
            checked: format!("{} {}", cover.stored.algo, cover.stored.encoded()),
            named: named.header_value(),
        }),
        _ => Ok(()),
    }
}

fn report<T, E>(
    result: Outcome<Vec<T>, E>,
    retrier: &Retrier<'_>,
    bytes: u64,
) -> Outcome<Report, E> {
    let retries = retrier.retries();
    match result {
        Ok(parts) => Ok(Report {
            bytes,
            parts: parts.len(),
            retries,
            multipart: false,
            cuts: retrier.cuts(),
            ..Report::default()
        }),
        Err(EngineError::Cancelled { .. }) => Err(EngineError::Cancelled { retries }),
        Err(e) => Err(e),
    }
}

/// Object bytes `start .. start + len` into `sink` at offsets `0 .. len`: ranged GETs through
/// the ring, written where they belong as they arrive. With `settings.checksum` the bytes are
/// checked against the object's stored checksum as they land (or, for a COMPOSITE multipart
/// object, each part against its own: [`Check`]); a mismatch runs the download again once
/// (fresh tokens), a second one fails with [`EngineError::Checksum`].
pub fn download<S: ObjectStore>(
    store: &S,
    start: u64,
    len: u64,
    sink: &dyn Sink,
    buffers: &dyn Buffers,
    job: &Job<'_>,
) -> Outcome<Report, S::Error> {
    let once = |sink: &dyn Sink, plan: &Plan, covers: &[Covered]| {
        download_once(store, plan, covers, sink, buffers, job)
    };
    let check = match job.settings.checksum {
        None => return once(sink, &ranges(start, len, job)?, &[]),
        Some(stored) => Check::of(store, start, len, stored, job)?,
    };
    let check = match check {
        Ok(check) => check,
        Err(why) => {
            let mut report = once(sink, &ranges(start, len, job)?, &[])?;
            report.checksum = Verdict::Unchecked(why);
            return Ok(report);
        }
    };
    let mut retries = 0;
    loop {
        let checking = CheckingSink::new(sink, &check.covers);
        let mut report = once(&checking, &check.plan, &check.covers)?;
        match checking.check() {
            Ok(()) => {
                report.checksum = check.verdict;
                report.checksum_retries = retries;
                return Ok(report);
            }
            Err(mismatch) if retries == 0 => {
                tracing::warn!("{mismatch}: reading the object again");
                retries += 1;
            }
            Err(mismatch) => return Err(EngineError::Checksum(mismatch)),
        }
    }
}

/// A download's ranged GETs of `settings.part_size`.
fn ranges<E>(start: u64, len: u64, job: &Job<'_>) -> Outcome<Plan, E> {
    Plan::ranges(start, len, job.settings.part_size).map_err(EngineError::Library)
}

/// What a download's bytes are checked against (docs/protocol.md section 15), how the download
/// is cut for it, and what a match is called.
struct Check {
    /// The stored checksums and the bytes of the copy each covers, back to back.
    covers: Vec<Covered>,
    plan: Plan,
    verdict: Verdict,
}

impl Check {
    /// The check of object bytes `start .. start + len` against `stored` (what the object's HEAD
    /// said), or why there is none.
    fn of<S: ObjectStore>(
        store: &S,
        start: u64,
        len: u64,
        stored: Result<ObjectChecksum, Unchecked>,
        job: &Job<'_>,
    ) -> Outcome<Result<Check, Unchecked>, S::Error> {
        match stored {
            Ok(stored) => Ok(Ok(Check {
                covers: vec![Covered {
                    start: 0,
                    len,
                    stored,
                    part: None,
                }],
                plan: ranges(start, len, job)?,
                verdict: Verdict::Verified(stored.algo.into()),
            })),
            Err(Unchecked::Composite(c)) => Check::per_part(store, start, len, c, job),
            Err(why) => Ok(Err(why)),
        }
    }

    /// A COMPOSITE multipart object, part by part: each part's length and CRC from a HEAD with
    /// `partNumber`, the download cut along the parts (no GET crosses a part's end), each
    /// part's CRC compared with its own. Unchecked (COMPOSITE) when the store does not ask for
    /// parts, the value names no part count, a part has no CRC of the object's algorithm, or
    /// the parts are not the bytes asked for.
    fn per_part<S: ObjectStore>(
        store: &S,
        start: u64,
        len: u64,
        c: Composite,
        job: &Job<'_>,
    ) -> Outcome<Result<Check, Unchecked>, S::Error> {
        let unchecked = Ok(Err(Unchecked::Composite(c)));
        let Some(count) = c.parts.filter(|n| (1..=MAX_PARTS).contains(&u64::from(*n))) else {
            return unchecked;
        };
        let retrier = Retrier::new(job);
        let mut covers = Vec::with_capacity(count as usize);
        let mut at = 0u64;
        for number in 1..=count {
            let head = retrier.store(&|| format!("HEAD part {number}"), || {
                store.head_part(number)
            })?;
            let Some(PartHead {
                len: part_len,
                checksum: Ok(stored),
            }) = head
            else {
                return unchecked;
            };
            if stored.algo != c.algo {
                return unchecked;
            }
            covers.push(Covered {
                start: at,
                len: part_len,
                stored,
                part: Some(number),
            });
            at = at.saturating_add(part_len);
        }
        if start != 0 || at != len {
            return unchecked;
        }
        let spans: Vec<u64> = covers.iter().map(|c| c.len).collect();
        let plan =
            Plan::along(start, &spans, job.settings.part_size).map_err(EngineError::Library)?;
        Ok(Ok(Check {
            covers,
            plan,
            verdict: Verdict::VerifiedParts(c.algo, count),
        }))
    }
}

/// One run of a download's `plan` into `sink`.
fn download_once<S: ObjectStore>(
    store: &S,
    plan: &Plan,
    covers: &[Covered],
    sink: &dyn Sink,
    buffers: &dyn Buffers,
    job: &Job<'_>,
) -> Outcome<Report, S::Error> {
    let retrier = Retrier::new(job);
    let result = with_disks(
        FileSide::Sink(sink),
        buffers,
        plan,
        job,
        RingStart::Now,
        &|disk: &mut Disk<'_>, part, _| {
            let slot = disk.free_buffer().map_err(EngineError::Io)?;
            if let Err(e) = get_part(store, &retrier, slot.slice(part.len as usize), part, covers) {
                disk.give_back(slot);
                return Err(e);
            }
            disk.store(slot, part).map_err(EngineError::Io)
        },
    );
    report(result, &retrier, plan.len)
}

/// Object bytes `start .. start + dest.len` straight into registered memory `dest` (no ring):
/// concurrent ranged GETs, each into its own place (a safetensors checkpoint's destination).
pub fn download_into<S: ObjectStore>(
    store: &S,
    start: u64,
    dest: Slice,
    job: &Job<'_>,
) -> Outcome<Report, S::Error> {
    let len = dest.len as u64;
    let plan = Plan::ranges(start, len, job.settings.part_size).map_err(EngineError::Library)?;
    let retrier = Retrier::new(job);
    let result = for_each_part(
        &plan,
        &mut vec![(); workers(&plan, job.settings.concurrency)],
        false,
        job.cancel,
        &|_, part, _| {
            let slice = Slice {
                base: dest.base,
                offset: dest.offset + part.pos as usize,
                len: part.len as usize,
            };
            get_part(store, &retrier, slice, part, &[])?;
            (job.progress)(part.len);
            Ok(())
        },
    );
    report(result, &retrier, len)
}

/// What an upload sends: bytes `0 .. len` of `source`, through the ring, except the parts that
/// lie whole in one registered slice of `direct`, sent from there without a copy.
#[derive(Clone, Copy)]
pub(super) struct Outgoing<'a> {
    pub source: &'a dyn Source,
    pub len: u64,
    pub direct: Option<&'a Segments<'a>>,
}

impl Outgoing<'_> {
    /// The registered slice that holds `part` whole, if one does.
    fn direct(&self, part: Part) -> Option<Slice> {
        self.direct?.slice(part.pos, part.len)
    }

    /// `part` unless it goes direct: the part a disk thread may read ahead.
    fn copied(&self, part: Option<Part>) -> Option<Part> {
        part.filter(|p| self.direct(*p).is_none())
    }

    /// When the workers need their ring buffers: before anything moves for a file, when a part
    /// is first copied for registered memory (all of an upload's parts may go direct).
    fn ring_start(&self) -> RingStart {
        match self.direct {
            None => RingStart::Now,
            Some(_) => RingStart::WhenNeeded,
        }
    }
}

/// The registered slice that holds `part` whole, if one does, with its CRC (computed where the
/// bytes are) recorded with `checking`.
fn direct_part<E>(
    out: &Outgoing<'_>,
    checking: &Option<CheckingSource<'_>>,
    part: Part,
) -> Outcome<Option<Slice>, E> {
    let (Some(segments), Some(slice)) = (out.direct, out.direct(part)) else {
        return Ok(None);
    };
    if let Some(checking) = checking {
        let value = segments
            .crc(slice, checking.algo())
            .map_err(EngineError::Library)?;
        checking.record(part.pos, part.len, value);
    }
    Ok(Some(slice))
}

/// `len` bytes of `source` (offsets `0 .. len`) as the object: one PUT up to the multipart
/// threshold, else a multipart upload with one RDMA UploadPart per part, completed when every
/// part arrived and aborted when the copy fails or is cancelled.
pub fn upload<S: ObjectStore>(
    store: &S,
    source: &dyn Source,
    len: u64,
    buffers: &dyn Buffers,
    job: &Job<'_>,
) -> Outcome<Report, S::Error> {
    let out = Outgoing {
        source,
        len,
        direct: None,
    };
    send(store, out, buffers, job)
}

/// An upload of `out` ([`upload`]).
pub(super) fn send<S: ObjectStore>(
    store: &S,
    out: Outgoing<'_>,
    buffers: &dyn Buffers,
    job: &Job<'_>,
) -> Outcome<Report, S::Error> {
    if out.len == 0 {
        return Err(EngineError::Library(Error::invalid(
            "an empty object has no bytes to move over RDMA",
        )));
    }
    let single = out.len <= job.settings.multipart_threshold && out.len <= MAX_REGISTRATION as u64;
    if single {
        upload_single(store, out, buffers, job)
    } else {
        upload_multipart(store, out, buffers, job)
    }
}

fn upload_single<S: ObjectStore>(
    store: &S,
    out: Outgoing<'_>,
    buffers: &dyn Buffers,
    job: &Job<'_>,
) -> Outcome<Report, S::Error> {
    let len = out.len;
    let retrier = Retrier::new(job);
    let plan = Plan::ranges(0, len, len).map_err(EngineError::Library)?;
    let whole = plan
        .part(0)
        .ok_or_else(|| EngineError::Library(Error::internal("no part")))?;
    let checking = CheckingSource::wrap(out.source, job.settings.upload_checksum);
    // A ring buffer only for bytes that are not in one registered slice already.
    let mut slots = Vec::new();
    let slice = match direct_part(&out, &checking, whole)? {
        Some(slice) => slice,
        None => {
            slots = ring(buffers, &plan, 1)?;
            let slot = slots
                .first_mut()
                .ok_or_else(|| EngineError::Library(Error::internal("no ring buffer")))?;
            let n = len as usize;
            slot.load(read_through(&checking, out.source), 0, n)
                .map_err(EngineError::Io)?;
            slot.slice(n)
        }
    };
    let checksum = checking.as_ref().and_then(|c| c.part(0));
    retrier.store(&|| "PUT".into(), || {
        store.put(slice, PutTarget::Object, checksum)
    })?;
    drop(slots);
    (job.progress)(len);
    Ok(Report {
        bytes: len,
        parts: 1,
        retries: retrier.retries(),
        multipart: false,
        cuts: retrier.cuts(),
        ..Report::default()
    })
}

/// A multipart upload under way, as its workers see it.
struct PartUpload<'u, S> {
    store: &'u S,
    out: Outgoing<'u>,
    checking: &'u Option<CheckingSource<'u>>,
    retrier: &'u Retrier<'u>,
    id: &'u str,
}

impl<S: ObjectStore> PartUpload<'_, S> {
    /// A worker's `part`: its bytes sent from where they are (registered memory) or from a ring
    /// buffer its disk filled, as UploadPart `part.index + 1`. The disk reads `next` meanwhile
    /// when it is copied.
    fn send(
        &self,
        disk: &mut Disk<'_>,
        part: Part,
        next: Option<Part>,
    ) -> Outcome<CompletedPart, S::Error> {
        let next = self.out.copied(next);
        let (slice, slot) = match direct_part(&self.out, self.checking, part)? {
            Some(slice) => {
                disk.read_next(next).map_err(EngineError::Io)?;
                (slice, None)
            }
            None => {
                let source = read_through(self.checking, self.out.source);
                let slot = disk.load(source, part, next).map_err(EngineError::Io)?;
                (slot.slice(part.len as usize), Some(slot))
            }
        };
        let number = part.index as u32 + 1;
        let target = PutTarget::Part {
            upload_id: self.id,
            number,
        };
        let checksum = self.checking.as_ref().and_then(|c| c.part(part.pos));
        let answer = self.retrier.store(&|| format!("UploadPart {number}"), || {
            self.store.put(slice, target, checksum)
        });
        if let Some(slot) = slot {
            disk.give_back(slot);
        }
        let etag = answer?.ok_or_else(|| {
            EngineError::Library(Error::s3(format!("UploadPart {number} answered no ETag")))
        })?;
        Ok(CompletedPart { number, etag })
    }
}

fn upload_multipart<S: ObjectStore>(
    store: &S,
    out: Outgoing<'_>,
    buffers: &dyn Buffers,
    job: &Job<'_>,
) -> Outcome<Report, S::Error> {
    let len = out.len;
    let plan = Plan::multipart(len, job.settings.part_size).map_err(EngineError::Library)?;
    let retrier = Retrier::new(job);
    let algo = job.settings.upload_checksum;
    let checking = CheckingSource::wrap(out.source, algo);
    let source = read_through(&checking, out.source);
    let id = retrier.store(&|| "CreateMultipartUpload".into(), || {
        store.create_upload(algo)
    })?;
    let parts = PartUpload {
        store,
        out,
        checking: &checking,
        retrier: &retrier,
        id: &id,
    };
    let uploaded = with_disks(
        FileSide::Source(source),
        buffers,
        &plan,
        job,
        out.ring_start(),
        &|disk: &mut Disk<'_>, part, next| {
            let done = parts.send(disk, part, next)?;
            (job.progress)(part.len);
            Ok(done)
        },
    );
    let whole = checking.as_ref().and_then(|c| c.whole(len));
    let result = uploaded.and_then(|parts| {
        retrier.store(&|| "CompleteMultipartUpload".into(), || {
            store.complete_upload(&id, &parts, whole)
        })?;
        Ok(parts.len())
    });
    match result {
        Ok(parts) => Ok(Report {
            bytes: len,
            parts,
            retries: retrier.retries(),
            multipart: true,
            cuts: retrier.cuts(),
            ..Report::default()
        }),
        Err(e) => {
            abort(store, &id, &job.settings.retry);
            match e {
                EngineError::Cancelled { .. } => Err(EngineError::Cancelled {
                    retries: retrier.retries(),
                }),
                e => Err(e),
            }
        }
    }
}

/// AbortMultipartUpload, retried even after a cancel (nothing of a failed copy may remain).
fn abort<S: ObjectStore>(store: &S, id: &str, policy: &super::RetryPolicy) {
    let never = AtomicBool::new(false);
    let retrier = Retrier::with_policy(policy, &never);
    match retrier.run(&|| format!("AbortMultipartUpload {id}"), || {
        store.abort_upload(id)
    }) {
        Ok(()) => tracing::info!(upload_id = id, "multipart upload aborted"),
        Err(e) => tracing::warn!(upload_id = id, "aborting the multipart upload failed: {e}"),
    }
}
