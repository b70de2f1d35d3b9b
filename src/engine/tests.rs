//! The engine against an in-memory store (no RDMA: the store copies between the slice's memory
//! and its object as the server's RDMA WRITE or READ would), with scripted failures.

use super::*;
use crate::checksum::{CrcAlgo, ObjectChecksum, StoredChecksum};
use crate::error::Error;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

#[derive(Debug)]
struct Failed(u16);

impl Classify for Failed {
    fn class(&self) -> ErrorClass {
        ErrorClass::of_status(self.0, None)
    }
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HTTP {}", self.0)
    }
}

#[derive(Default)]
struct Store {
    object: Mutex<Vec<u8>>,
    uploads: Mutex<BTreeMap<String, BTreeMap<u32, Vec<u8>>>>,
    aborted: AtomicUsize,
    requests: AtomicUsize,
    /// Requests (0-based) answered with this status instead.
    fail: Mutex<BTreeMap<usize, u16>>,
    /// GETs from these object offsets answered with this status once each (whichever worker
    /// asks, whenever: independent of how the workers interleave).
    fail_once_at: Mutex<BTreeMap<u64, u16>>,
    /// When set, UploadPart 1 waits (up to 5 s) for it to be set and notes whether it was.
    part_1_waits_for: Option<std::sync::Arc<AtomicBool>>,
    part_1_saw_it: AtomicBool,
    /// GETs from these object offsets land with their first byte flipped, this many times (a bit
    /// flipped on the server's disk, in its staging, or on the wire).
    corrupt_at: Mutex<BTreeMap<u64, usize>>,
    /// PUTs and UploadParts that carried a checksum (each one checked).
    checksums_sent: AtomicUsize,
    /// The FULL_OBJECT algorithm the last multipart upload was created with.
    upload_algo: Mutex<Option<CrcAlgo>>,
    /// The whole object's checksum the last completion carried (checked).
    whole_checksum: Mutex<Option<ObjectChecksum>>,
    /// The object's parts (length, stored checksum), as HEAD with `partNumber` reports them;
    /// empty: the store does not answer for parts.
    parts: Vec<PartHead>,
    /// The GETs asked (object offset, length).
    gets: Mutex<Vec<(u64, u64)>>,
    /// What a GET of the whole object names in its reply (`x-amz-rdma-checksum`): the server's
    /// stored checksum at the time of that GET.
    named: Mutex<Option<StoredChecksum>>,
    /// The slice each PUT (0) or UploadPart (its number) was sent from, last attempt.
    put_slices: Mutex<BTreeMap<u32, Slice>>,
}

impl Store {
    fn with(object: Vec<u8>) -> Store {
        Store {
            object: Mutex::new(object),
            ..Store::default()
        }
    }

    fn failing(self, at: &[(usize, u16)]) -> Store {
        *self.fail.lock().unwrap() = at.iter().copied().collect();
        self
    }

    fn failing_once_at(self, at: &[(u64, u16)]) -> Store {
        *self.fail_once_at.lock().unwrap() = at.iter().copied().collect();
        self
    }

    fn answer(&self) -> Result<(), Failed> {
        let n = self.requests.fetch_add(1, Ordering::SeqCst);
        match self.fail.lock().unwrap().get(&n) {
            Some(&s) => Err(Failed(s)),
            None => Ok(()),
        }
    }

    fn memory(slice: Slice) -> *mut u8 {
        (slice.base + slice.offset) as *mut u8
    }
}

impl ObjectStore for Store {
    type Error = Failed;

    fn get_named(&self, slice: Slice, first: u64) -> Result<(u64, Option<StoredChecksum>), Failed> {
        let whole = first == 0 && slice.len == self.object.lock().unwrap().len();
        let n = self.get(slice, first)?;
        let named = self.named.lock().unwrap().clone().filter(|_| whole);
        Ok((n, named))
    }

    fn get(&self, slice: Slice, first: u64) -> Result<u64, Failed> {
        self.answer()?;
        self.gets.lock().unwrap().push((first, slice.len as u64));
        if let Some(status) = self.fail_once_at.lock().unwrap().remove(&first) {
            return Err(Failed(status));
        }
        let object = self.object.lock().unwrap();
        let first = first as usize;
        let n = slice.len.min(object.len().saturating_sub(first));
        // SAFETY: the engine hands out slices of live buffers it owns for this call; the test's
        // buffers are Vecs at least `slice.offset + slice.len` long.
        unsafe { std::ptr::copy_nonoverlapping(object[first..].as_ptr(), Self::memory(slice), n) };
        if let Some(times) = self.corrupt_at.lock().unwrap().get_mut(&(first as u64)) {
            if *times > 0 && n > 0 {
                *times -= 1;
                // SAFETY: as above; the slice's first byte was just written.
                unsafe { *Self::memory(slice) ^= 0x01 };
            }
        }
        Ok(n as u64)
    }

    fn put(
        &self,
        slice: Slice,
        target: PutTarget<'_>,
        checksum: Option<ObjectChecksum>,
    ) -> Result<Option<String>, Failed> {
        self.answer()?;
        if let (Some(flag), PutTarget::Part { number: 1, .. }) = (&self.part_1_waits_for, target) {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while !flag.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            self.part_1_saw_it
                .store(flag.load(Ordering::SeqCst), Ordering::SeqCst);
        }
        let number = match target {
            PutTarget::Object => 0,
            PutTarget::Part { number, .. } => number,
        };
        self.put_slices.lock().unwrap().insert(number, slice);
        // SAFETY: as in `get`; the slice is read only.
        let data = unsafe { std::slice::from_raw_parts(Self::memory(slice), slice.len) }.to_vec();
        // As a server does (docs/protocol.md rule 4.9): a checksum that does not describe the
        // moved bytes is BadDigest (400), and nothing is stored.
        if let Some(c) = checksum {
            if c.check(Some(c.algo.of(&data))).is_err() {
                return Err(Failed(400));
            }
            self.checksums_sent.fetch_add(1, Ordering::SeqCst);
        }
        match target {
            PutTarget::Object => *self.object.lock().unwrap() = data,
            PutTarget::Part { upload_id, number } => {
                let mut uploads = self.uploads.lock().unwrap();
                let parts = uploads.get_mut(upload_id).ok_or(Failed(404))?;
                parts.insert(number, data);
            }
        }
        Ok(Some(format!("etag-{}", slice.len)))
    }

    fn create_upload(&self, checksum: Option<CrcAlgo>) -> Result<String, Failed> {
        self.answer()?;
        *self.upload_algo.lock().unwrap() = checksum;
        let mut uploads = self.uploads.lock().unwrap();
        let id = format!("up{}", uploads.len());
        uploads.insert(id.clone(), BTreeMap::new());
        Ok(id)
    }

    fn complete_upload(
        &self,
        id: &str,
        parts: &[CompletedPart],
        checksum: Option<ObjectChecksum>,
    ) -> Result<(), Failed> {
        self.answer()?;
        let stored = self.uploads.lock().unwrap().remove(id).ok_or(Failed(404))?;
        let numbers: Vec<u32> = parts.iter().map(|p| p.number).collect();
        assert_eq!(numbers, stored.keys().copied().collect::<Vec<_>>());
        let object: Vec<u8> = stored.into_values().flatten().collect();
        // The whole object's checksum, as the server checks a FULL_OBJECT one.
        if let Some(c) = checksum {
            if c.check(Some(c.algo.of(&object))).is_err() {
                return Err(Failed(400));
            }
            *self.whole_checksum.lock().unwrap() = Some(c);
        }
        *self.object.lock().unwrap() = object;
        Ok(())
    }

    fn abort_upload(&self, id: &str) -> Result<(), Failed> {
        self.answer()?;
        self.aborted.fetch_add(1, Ordering::SeqCst);
        self.uploads.lock().unwrap().remove(id);
        Ok(())
    }

    fn head_part(&self, number: u32) -> Result<Option<PartHead>, Failed> {
        if self.parts.is_empty() {
            return Ok(None);
        }
        self.answer()?;
        let part = self.parts.get(number as usize - 1).ok_or(Failed(400))?;
        Ok(Some(*part))
    }
}

/// Plain memory standing in for registered buffers; counts what was allocated.
#[derive(Default)]
struct Memory {
    slots: AtomicUsize,
    bytes: AtomicUsize,
}

struct VecSlot(Vec<u8>);

impl Slot for VecSlot {
    fn base(&self) -> usize {
        self.0.as_ptr() as usize
    }
    fn load(&mut self, src: &dyn Source, pos: u64, len: usize) -> std::io::Result<()> {
        src.read_at(&mut self.0[..len], pos)
    }
    fn store(&self, sink: &dyn Sink, pos: u64, len: usize) -> std::io::Result<()> {
        sink.write_at(&self.0[..len], pos)
    }
}

impl Buffers for Memory {
    fn slot(&self, len: usize) -> Result<Box<dyn Slot>, Error> {
        self.slots.fetch_add(1, Ordering::SeqCst);
        self.bytes.fetch_add(len, Ordering::SeqCst);
        Ok(Box::new(VecSlot(vec![0; len])))
    }
}

struct Bytes(Mutex<Vec<u8>>);

impl Sink for Bytes {
    fn write_at(&self, data: &[u8], pos: u64) -> std::io::Result<()> {
        let mut v = self.0.lock().unwrap();
        v[pos as usize..pos as usize + data.len()].copy_from_slice(data);
        Ok(())
    }
}

impl Source for Bytes {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> std::io::Result<()> {
        let v = self.0.lock().unwrap();
        buf.copy_from_slice(&v[pos as usize..pos as usize + buf.len()]);
        Ok(())
    }
}

fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

fn settings(part: u64, concurrency: usize) -> Settings {
    Settings {
        part_size: part,
        concurrency,
        multipart_threshold: part,
        retry: RetryPolicy {
            base: Duration::from_millis(1),
            ..RetryPolicy::standard()
        },
        checksum: None,
        upload_checksum: Some(CrcAlgo::Crc64Nvme),
    }
}

fn run_job<T>(s: Settings, f: impl FnOnce(&Job<'_>) -> T) -> (T, u64) {
    let moved = AtomicU64::new(0);
    let progress = |n: u64| {
        moved.fetch_add(n, Ordering::SeqCst);
    };
    let cancel = AtomicBool::new(false);
    let job = Job {
        settings: s,
        progress: &progress,
        cancel: &cancel,
    };
    let out = f(&job);
    (out, moved.load(Ordering::SeqCst))
}

use std::sync::atomic::AtomicU64;

#[test]
fn a_download_arrives_whole_through_a_small_ring() {
    let object = data(1_000_003);
    let store = Store::with(object.clone());
    let memory = Memory::default();
    let sink = Bytes(Mutex::new(vec![0; 900_000]));
    let (report, moved) = run_job(settings(64 << 10, 4), |job| {
        download(&store, 100_003, 900_000, &sink, &memory, job)
    });
    let report = report.unwrap();
    assert_eq!(*sink.0.lock().unwrap(), object[100_003..]);
    assert_eq!((report.bytes, moved, report.retries), (900_000, 900_000, 0));
    assert_eq!(report.parts, 14);
    let slots = memory.slots.load(Ordering::SeqCst);
    assert!(
        (4..=8).contains(&slots),
        "one buffer per worker, a second while the first is written: {slots}"
    );
    assert_eq!(memory.bytes.load(Ordering::SeqCst), slots * (64 << 10));
}

/// A sink whose write of the first part waits (up to 5 s) until the store has been asked for
/// the part after it: only a download that writes behind its transfers lets that happen.
struct WaitsForTheNextGet<'a> {
    bytes: Bytes,
    store: &'a Store,
    overlapped: AtomicBool,
}

impl Sink for WaitsForTheNextGet<'_> {
    fn write_at(&self, data: &[u8], pos: u64) -> std::io::Result<()> {
        if pos == 0 {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while self.store.requests.load(Ordering::SeqCst) < 2 {
                if std::time::Instant::now() > deadline {
                    return self.bytes.write_at(data, pos);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            self.overlapped.store(true, Ordering::SeqCst);
        }
        self.bytes.write_at(data, pos)
    }
}

#[test]
fn a_download_writes_a_part_while_the_next_one_arrives() {
    let object = data(30_000);
    let store = Store::with(object.clone());
    let sink = WaitsForTheNextGet {
        bytes: Bytes(Mutex::new(vec![0; 30_000])),
        store: &store,
        overlapped: AtomicBool::new(false),
    };
    let (report, moved) = run_job(settings(10_000, 1), |job| {
        download(&store, 0, 30_000, &sink, &Memory::default(), job)
    });
    assert_eq!((report.unwrap().parts, moved), (3, 30_000));
    assert_eq!(*sink.bytes.0.lock().unwrap(), object);
    assert!(
        sink.overlapped.load(Ordering::SeqCst),
        "the second GET started while the first part was being written"
    );
}

struct FailsToWrite;

impl Sink for FailsToWrite {
    fn write_at(&self, _: &[u8], pos: u64) -> std::io::Result<()> {
        match pos {
            0 => Err(std::io::Error::other("disk full")),
            _ => Ok(()),
        }
    }
}

#[test]
fn a_failed_write_behind_fails_the_download() {
    let store = Store::with(data(100_000));
    let (out, moved) = run_job(settings(10_000, 1), |job| {
        download(&store, 0, 100_000, &FailsToWrite, &Memory::default(), job)
    });
    assert!(
        matches!(&out, Err(EngineError::Io(e)) if e.to_string() == "disk full"),
        "{out:?}"
    );
    assert!(
        store.requests.load(Ordering::SeqCst) <= 3,
        "no part starts once the failed write is seen"
    );
    assert!(moved < 100_000, "progress counts written parts only");
}

#[test]
fn a_download_into_registered_memory_needs_no_ring() {
    let object = data(300_000);
    let store = Store::with(object.clone());
    let mut dest = vec![0u8; 299_010];
    let slice = Slice {
        base: dest.as_mut_ptr() as usize,
        offset: 10,
        len: 299_000,
    };
    let (report, _) = run_job(settings(10_000, 8), |job| {
        download_into(&store, 1_000, slice, job)
    });
    assert_eq!(report.unwrap().parts, 30);
    assert_eq!(&dest[10..], &object[1_000..]);
}

#[test]
fn transient_failures_are_retried_and_counted() {
    let object = data(100_000);
    // By part, not by request number: with two workers, requests 0, 3 and 4 could all be one
    // part's three attempts (its backoff long enough for the other worker's two), failing it.
    let store =
        Store::with(object.clone()).failing_once_at(&[(0, 503), (30_000, 500), (40_000, 502)]);
    let sink = Bytes(Mutex::new(vec![0; 100_000]));
    let (report, moved) = run_job(settings(10_000, 2), |job| {
        download(&store, 0, 100_000, &sink, &Memory::default(), job)
    });
    let report = report.unwrap();
    assert_eq!(report.retries, 3);
    assert_eq!(moved, 100_000, "progress counts bytes that arrived, once");
    assert_eq!(*sink.0.lock().unwrap(), object);
}

#[test]
fn a_fatal_failure_is_not_retried_and_stops_the_copy() {
    let store = Store::with(data(100_000)).failing(&[(2, 404)]);
    let sink = Bytes(Mutex::new(vec![0; 100_000]));
    let (out, _) = run_job(settings(10_000, 1), |job| {
        download(&store, 0, 100_000, &sink, &Memory::default(), job)
    });
    match out {
        Err(EngineError::Store { error, retries }) => assert_eq!((error.0, retries), (404, 0)),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store.requests.load(Ordering::SeqCst),
        3,
        "no part after the failure"
    );
}

#[test]
fn three_failures_of_one_request_fail_the_copy() {
    let store = Store::with(data(10)).failing(&[(0, 500), (1, 500), (2, 500)]);
    let sink = Bytes(Mutex::new(vec![0; 10]));
    let (out, _) = run_job(settings(10, 1), |job| {
        download(&store, 0, 10, &sink, &Memory::default(), job)
    });
    assert!(
        matches!(out, Err(EngineError::Store { retries: 2, .. })),
        "{out:?}"
    );
}

#[test]
fn a_short_part_is_an_error() {
    let store = Store::with(data(50));
    let sink = Bytes(Mutex::new(vec![0; 60]));
    let (out, _) = run_job(settings(20, 1), |job| {
        download(&store, 0, 60, &sink, &Memory::default(), job)
    });
    assert!(
        matches!(
            out,
            Err(EngineError::Short {
                first: 40,
                want: 20,
                got: 10
            })
        ),
        "{out:?}"
    );
}

#[test]
fn a_small_upload_is_one_put() {
    let object = data(1000);
    let store = Store::default();
    let src = Bytes(Mutex::new(object.clone()));
    let (report, moved) = run_job(settings(MIN_PART_SIZE, 4), |job| {
        upload(&store, &src, 1000, &Memory::default(), job)
    });
    let report = report.unwrap();
    assert!(!report.multipart);
    assert_eq!((report.parts, moved), (1, 1000));
    assert_eq!(*store.object.lock().unwrap(), object);
}

#[test]
fn a_large_upload_is_a_completed_multipart_upload() {
    let len = 3 * MIN_PART_SIZE as usize + 12345;
    let object = data(len);
    let store = Store::default().failing(&[(2, 503)]);
    let src = Bytes(Mutex::new(object.clone()));
    let memory = Memory::default();
    let (report, moved) = run_job(settings(MIN_PART_SIZE, 3), |job| {
        upload(&store, &src, len as u64, &memory, job)
    });
    let report = report.unwrap();
    assert!(report.multipart);
    assert_eq!((report.parts, report.retries, moved), (4, 1, len as u64));
    assert_eq!(*store.object.lock().unwrap(), object);
    assert!(store.uploads.lock().unwrap().is_empty());
    assert_eq!(memory.slots.load(Ordering::SeqCst), 3);
}

/// A source that notes when the second part's bytes are read.
struct NotesPart2 {
    bytes: Bytes,
    at: u64,
    read: std::sync::Arc<AtomicBool>,
}

impl Source for NotesPart2 {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> std::io::Result<()> {
        if pos == self.at {
            self.read.store(true, Ordering::SeqCst);
        }
        self.bytes.read_at(buf, pos)
    }
}

#[test]
fn an_upload_reads_the_next_part_while_one_is_sent() {
    let len = 3 * MIN_PART_SIZE as usize;
    let object = data(len);
    let read = std::sync::Arc::new(AtomicBool::new(false));
    let store = Store {
        part_1_waits_for: Some(read.clone()),
        ..Store::default()
    };
    let src = NotesPart2 {
        bytes: Bytes(Mutex::new(object.clone())),
        at: MIN_PART_SIZE,
        read,
    };
    let (report, _) = run_job(settings(MIN_PART_SIZE, 1), |job| {
        upload(&store, &src, len as u64, &Memory::default(), job)
    });
    assert_eq!(report.unwrap().parts, 3);
    assert_eq!(*store.object.lock().unwrap(), object);
    assert!(
        store.part_1_saw_it.load(Ordering::SeqCst),
        "part 2 was read from the file while part 1 was being uploaded"
    );
}

/// Registered memory for one buffer in all: every later registration is refused.
#[derive(Default)]
struct OneBuffer(AtomicUsize);

impl Buffers for OneBuffer {
    fn slot(&self, len: usize) -> Result<Box<dyn Slot>, Error> {
        match self.0.fetch_add(1, Ordering::SeqCst) {
            0 => Ok(Box::new(VecSlot(vec![0; len]))),
            _ => Err(Error::invalid("out of registrations")),
        }
    }
}

/// `f` on its own thread: its answer, or a failure when it runs past 20 s (a hang).
fn within_20s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the copy still ran after 20 s")
}

#[test]
fn a_refused_second_buffer_leaves_one_buffer_per_worker() {
    let (up, down) = within_20s(|| {
        let len = 3 * MIN_PART_SIZE as usize;
        let object = data(len);
        let store = Store::default();
        let src = Bytes(Mutex::new(object.clone()));
        let (up, _) = run_job(settings(MIN_PART_SIZE, 1), |job| {
            upload(&store, &src, len as u64, &OneBuffer::default(), job).map(|r| r.parts)
        });
        let sink = Bytes(Mutex::new(vec![0; len]));
        let (down, _) = run_job(settings(MIN_PART_SIZE, 1), |job| {
            download(&store, 0, len as u64, &sink, &OneBuffer::default(), job).map(|r| r.parts)
        });
        let same = *sink.0.lock().unwrap() == object;
        (
            up.map_err(|e| e.to_string()),
            down.map_err(|e| e.to_string()).map(|n| (n, same)),
        )
    });
    assert_eq!(up, Ok(3));
    assert_eq!(down, Ok((3, true)));
}

#[test]
fn a_failed_multipart_upload_is_aborted() {
    let len = 4 * MIN_PART_SIZE as usize;
    let store = Store::default().failing(&[(2, 403)]);
    let src = Bytes(Mutex::new(data(len)));
    let (out, _) = run_job(settings(MIN_PART_SIZE, 1), |job| {
        upload(&store, &src, len as u64, &Memory::default(), job)
    });
    assert!(matches!(out, Err(EngineError::Store { .. })), "{out:?}");
    assert_eq!(store.aborted.load(Ordering::SeqCst), 1);
    assert!(store.uploads.lock().unwrap().is_empty(), "no upload left");
    assert!(store.object.lock().unwrap().is_empty(), "nothing stored");
}

#[test]
fn a_cancelled_upload_is_aborted() {
    let len = 6 * MIN_PART_SIZE as usize;
    let store = Store::default();
    let src = Bytes(Mutex::new(data(len)));
    let cancel = AtomicBool::new(false);
    let progress = |_: u64| cancel.store(true, Ordering::SeqCst);
    let job = Job {
        settings: settings(MIN_PART_SIZE, 1),
        progress: &progress,
        cancel: &cancel,
    };
    let out = upload(&store, &src, len as u64, &Memory::default(), &job);
    assert!(matches!(out, Err(EngineError::Cancelled { .. })), "{out:?}");
    assert_eq!(store.aborted.load(Ordering::SeqCst), 1);
    assert!(store.uploads.lock().unwrap().is_empty());
}

#[test]
fn an_empty_upload_is_refused() {
    let store = Store::default();
    let src = Bytes(Mutex::new(Vec::new()));
    let (out, _) = run_job(settings(MIN_PART_SIZE, 1), |job| {
        upload(&store, &src, 0, &Memory::default(), job)
    });
    assert!(matches!(out, Err(EngineError::Library(_))));
    assert_eq!(store.requests.load(Ordering::SeqCst), 0);
}

/// A store that answers 500 to a GET while more than `capacity` GETs are in flight (a server or a
/// fabric overloaded by too many transfers at once).
struct Overloaded {
    inner: Store,
    capacity: usize,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
}

impl ObjectStore for Overloaded {
    type Error = Failed;

    fn get(&self, slice: Slice, first: u64) -> Result<u64, Failed> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(3));
        let out = if self.in_flight.load(Ordering::SeqCst) > self.capacity {
            Err(Failed(500))
        } else {
            self.inner.get(slice, first)
        };
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        out
    }
    fn put(
        &self,
        slice: Slice,
        target: PutTarget<'_>,
        checksum: Option<ObjectChecksum>,
    ) -> Result<Option<String>, Failed> {
        self.inner.put(slice, target, checksum)
    }
    fn create_upload(&self, checksum: Option<CrcAlgo>) -> Result<String, Failed> {
        self.inner.create_upload(checksum)
    }
    fn complete_upload(
        &self,
        id: &str,
        parts: &[CompletedPart],
        checksum: Option<ObjectChecksum>,
    ) -> Result<(), Failed> {
        self.inner.complete_upload(id, parts, checksum)
    }
    fn abort_upload(&self, id: &str) -> Result<(), Failed> {
        self.inner.abort_upload(id)
    }
}

fn overloaded_download(paced: bool) -> (Result<Report, EngineError<Failed>>, Overloaded, Vec<u8>) {
    let object = data(64 * 1000);
    let store = Overloaded {
        inner: Store::with(object.clone()),
        capacity: 5,
        in_flight: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
    };
    let sink = Bytes(Mutex::new(vec![0; object.len()]));
    let mut s = settings(1000, 16);
    s.retry.max_attempts = 6;
    s.retry.paced = paced;
    let (out, _) = run_job(s, |job| {
        download(
            &store,
            0,
            object.len() as u64,
            &sink,
            &Memory::default(),
            job,
        )
    });
    let got = sink.0.into_inner().unwrap();
    assert!(
        out.is_err() || got == object,
        "a finished copy is byte-exact"
    );
    (out, store, object)
}

#[test]
fn failures_cut_the_requests_in_flight_until_the_store_keeps_up() {
    let (out, store, _) = overloaded_download(true);
    let report = out.expect("the paced copy finishes");
    assert!(report.cuts >= 2, "16 -> 8 -> 4: {report:?}");
    assert!(report.retries > 0);
    assert!(store.peak.load(Ordering::SeqCst) <= 16);
}

#[test]
fn without_the_pace_the_overloaded_store_fails_the_copy() {
    // the guard above shown to matter: 16 GETs in flight all the time, each one answered 500
    let (out, _, _) = overloaded_download(false);
    match out {
        Err(EngineError::Store { error, retries }) => {
            assert_eq!(error.0, 500);
            assert!(retries >= 5);
        }
        other => panic!("{other:?}"),
    }
}

/// The stored CRC64NVME of `object`, as a GET with checksums enabled would report it.
fn stored(object: &[u8]) -> ObjectChecksum {
    ObjectChecksum {
        algo: CrcAlgo::Crc64Nvme,
        value: CrcAlgo::Crc64Nvme.of(object),
    }
}

/// docs/protocol.md rule 16.2: a GET whose reply names the stored checksum of exactly its bytes
/// is compared with the value the download checks against (the HEAD's): the same value passes,
/// another one (the object was replaced after the HEAD) fails the download as changed.
#[test]
fn a_gets_named_checksum_that_is_not_the_heads_means_the_object_changed() {
    let object = data(100_000);
    let crc = CrcAlgo::Crc64Nvme;
    let named = |value: u64| StoredChecksum::stored(crc.into(), &crc.encode(value), false);
    let one_get = |store: &Store| {
        let sink = Bytes(Mutex::new(vec![0; object.len()]));
        let s = Settings {
            checksum: Some(Ok(stored(&object))),
            ..settings(1 << 20, 1)
        };
        let len = object.len() as u64;
        run_job(s, |job| {
            download(store, 0, len, &sink, &Memory::default(), job)
        })
        .0
    };
    let store = Store::with(object.clone());
    *store.named.lock().unwrap() = named(crc.of(&object));
    let report = one_get(&store).expect("the same stored checksum");
    assert!(report.checksum.is_verified(), "{:?}", report.checksum);
    *store.named.lock().unwrap() = named(crc.of(b"another object"));
    match one_get(&store) {
        Err(e @ EngineError::Changed { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("changed") && text.contains(&crc.encode(crc.of(&object))),
                "{text}"
            );
        }
        other => panic!("expected Changed, got {other:?}"),
    }
    assert_eq!(
        store.gets.lock().unwrap().len(),
        2,
        "one GET each, no second read"
    );
}

/// The whole `object` from `store` into `sink` in parts of 64 KiB, 4 at once, checked against
/// its stored CRC64NVME.
fn download_checked(
    store: &Store,
    object: &[u8],
    sink: &Bytes,
) -> Result<Report, EngineError<Failed>> {
    let s = Settings {
        checksum: Some(Ok(stored(object))),
        ..settings(64 << 10, 4)
    };
    let len = object.len() as u64;
    run_job(s, |job| {
        download(store, 0, len, sink, &Memory::default(), job)
    })
    .0
}

#[test]
fn a_download_is_checked_against_the_stored_checksum_as_its_parts_land() {
    use crate::checksum::Verdict;
    let object = data(1_000_003);
    let store = Store::with(object.clone());
    let sink = Bytes(Mutex::new(vec![0; object.len()]));
    let report = download_checked(&store, &object, &sink);
    let report = report.unwrap();
    assert_eq!(
        report.checksum,
        Verdict::Verified(CrcAlgo::Crc64Nvme.into())
    );
    assert_eq!(report.checksum_retries, 0);
    assert_eq!(*sink.0.lock().unwrap(), object);
}

#[test]
fn a_part_that_lands_changed_is_read_again_once_then_the_download_fails() {
    use crate::checksum::Verdict;
    let object = data(500_000);
    // Once: the second read is right, and the report says the object was read twice.
    let store = Store::with(object.clone());
    store.corrupt_at.lock().unwrap().insert(3 * (64 << 10), 1);
    let sink = Bytes(Mutex::new(vec![0; object.len()]));
    let report = download_checked(&store, &object, &sink);
    let report = report.unwrap();
    assert_eq!(
        report.checksum,
        Verdict::Verified(CrcAlgo::Crc64Nvme.into())
    );
    assert_eq!(report.checksum_retries, 1);
    assert_eq!(*sink.0.lock().unwrap(), object);
    // Every time: the download fails, naming the algorithm and both values.
    let store = Store::with(object.clone());
    store.corrupt_at.lock().unwrap().insert(0, usize::MAX);
    let result = download_checked(&store, &object, &sink);
    match result {
        Err(EngineError::Checksum(m)) => {
            assert_eq!(m.algo, CrcAlgo::Crc64Nvme);
            assert_eq!(m.expected, stored(&object).encoded());
            let mut flipped = object.clone();
            flipped[0] ^= 1;
            assert_eq!(
                m.got,
                CrcAlgo::Crc64Nvme.encode(CrcAlgo::Crc64Nvme.of(&flipped))
            );
        }
        other => panic!(
            "expected a checksum failure, got {:?}",
            other.map(|r| r.bytes)
        ),
    }
}

#[test]
fn a_download_that_cannot_be_checked_says_why() {
    use crate::checksum::{Unchecked, Verdict};
    let object = data(100_000);
    let store = Store::with(object.clone());
    let sink = Bytes(Mutex::new(vec![0; 50_000]));
    let s = Settings {
        checksum: Some(Err(Unchecked::Range)),
        ..settings(64 << 10, 2)
    };
    let (report, _) = run_job(s, |job| {
        download(&store, 10, 50_000, &sink, &Memory::default(), job)
    });
    assert_eq!(
        report.unwrap().checksum,
        Verdict::Unchecked(Unchecked::Range)
    );
}

#[test]
fn uploads_send_the_checksum_of_what_they_move_and_of_the_whole_object() {
    let object = data(3 * MIN_PART_SIZE as usize + 17);
    let src = Bytes(Mutex::new(object.clone()));
    // Multipart: every part carries its CRC64NVME, the upload names the algorithm, and the
    // completion carries the whole object's (the store checks each one against the bytes).
    let store = Store::default();
    let (report, _) = run_job(settings(MIN_PART_SIZE, 3), |job| {
        upload(&store, &src, object.len() as u64, &Memory::default(), job)
    });
    let report = report.unwrap();
    assert!(report.multipart);
    assert_eq!(store.checksums_sent.load(Ordering::SeqCst), report.parts);
    assert_eq!(*store.upload_algo.lock().unwrap(), Some(CrcAlgo::Crc64Nvme));
    assert_eq!(*store.whole_checksum.lock().unwrap(), Some(stored(&object)));
    assert_eq!(*store.object.lock().unwrap(), object);
    // One PUT carries the object's.
    let store = Store::default();
    let (report, _) = run_job(settings(4 * MIN_PART_SIZE, 1), |job| {
        upload(&store, &src, object.len() as u64, &Memory::default(), job)
    });
    assert!(!report.unwrap().multipart);
    assert_eq!(store.checksums_sent.load(Ordering::SeqCst), 1);
    // None asked for: none sent.
    let store = Store::default();
    let s = Settings {
        upload_checksum: None,
        ..settings(MIN_PART_SIZE, 3)
    };
    let (report, _) = run_job(s, |job| {
        upload(&store, &src, object.len() as u64, &Memory::default(), job)
    });
    report.unwrap();
    assert_eq!(store.checksums_sent.load(Ordering::SeqCst), 0);
    assert_eq!(*store.whole_checksum.lock().unwrap(), None);
}

/// `object` as a multipart object of parts `sizes` with COMPOSITE CRC32C checksums: each part's
/// own CRC32C (what HEAD with `partNumber` reports), and the object's checksum as the HEAD of
/// the whole object reports it (`<digest>-<parts>`, which no download can compute).
fn composite(object: &[u8], sizes: &[usize]) -> (Store, Settings) {
    use crate::checksum::{Composite, Unchecked};
    let algo = CrcAlgo::Crc32c;
    let mut at = 0;
    let parts = sizes
        .iter()
        .map(|&n| {
            let bytes = &object[at..at + n];
            at += n;
            PartHead {
                len: n as u64,
                checksum: Ok(ObjectChecksum {
                    algo,
                    value: algo.of(bytes),
                }),
            }
        })
        .collect();
    assert_eq!(at, object.len());
    let store = Store {
        parts,
        ..Store::with(object.to_vec())
    };
    let whole = Composite {
        algo,
        parts: Some(sizes.len() as u32),
    };
    let s = Settings {
        checksum: Some(Err(Unchecked::Composite(whole))),
        ..settings(64 << 10, 4)
    };
    (store, s)
}

fn download_all(store: &Store, s: Settings, sink: &Bytes) -> Result<Report, EngineError<Failed>> {
    let len = sink.0.lock().unwrap().len() as u64;
    run_job(s, |job| {
        download(store, 0, len, sink, &Memory::default(), job)
    })
    .0
}

/// Parts of 300,000, 300,000 and 123,457 bytes: not multiples of the 64 KiB GETs.
const PARTS: [usize; 3] = [300_000, 300_000, 123_457];

#[test]
fn a_composite_object_is_checked_part_by_part_along_its_parts() {
    use crate::checksum::Verdict;
    let object = data(PARTS.iter().sum());
    let (store, s) = composite(&object, &PARTS);
    let sink = Bytes(Mutex::new(vec![0; object.len()]));
    let report = download_all(&store, s, &sink).unwrap();
    assert_eq!(report.checksum, Verdict::VerifiedParts(CrcAlgo::Crc32c, 3));
    assert_eq!(
        report.checksum.to_string(),
        "CRC32C verified per part (3 parts)"
    );
    assert_eq!(*sink.0.lock().unwrap(), object);
    // No GET crosses a part's end: each part's bytes are checked against that part's CRC.
    let ends = [300_000u64, 600_000, 723_457];
    for &(first, len) in store.gets.lock().unwrap().iter() {
        let part_end = ends.iter().find(|&&e| e > first).copied().unwrap();
        assert!(
            first + len <= part_end,
            "GET {first}+{len} crosses {part_end}"
        );
    }
}

#[test]
fn a_composite_part_that_lands_changed_is_read_again_once_then_fails_naming_the_part() {
    use crate::checksum::Verdict;
    let object = data(PARTS.iter().sum());
    // Once: read again, then right.
    let (store, s) = composite(&object, &PARTS);
    store.corrupt_at.lock().unwrap().insert(300_000, 1);
    let sink = Bytes(Mutex::new(vec![0; object.len()]));
    let report = download_all(&store, s, &sink).unwrap();
    assert_eq!(report.checksum, Verdict::VerifiedParts(CrcAlgo::Crc32c, 3));
    assert_eq!(report.checksum_retries, 1);
    assert_eq!(*sink.0.lock().unwrap(), object);
    // Every time: part 2's first byte is flipped, and the download fails naming part 2.
    let (store, s) = composite(&object, &PARTS);
    store.corrupt_at.lock().unwrap().insert(300_000, usize::MAX);
    match download_all(&store, s, &sink) {
        Err(EngineError::Checksum(m)) => {
            assert_eq!((m.algo, m.part), (CrcAlgo::Crc32c.into(), Some(2)));
            let part2 = &object[300_000..600_000];
            assert_eq!(
                m.expected,
                CrcAlgo::Crc32c.encode(CrcAlgo::Crc32c.of(part2))
            );
            let mut flipped = part2.to_vec();
            flipped[0] ^= 1;
            assert_eq!(m.got, CrcAlgo::Crc32c.encode(CrcAlgo::Crc32c.of(&flipped)));
            assert!(m.to_string().contains("CRC32C mismatch in part 2"), "{m}");
        }
        other => panic!(
            "expected a checksum failure, got {:?}",
            other.map(|r| r.bytes)
        ),
    }
}

#[test]
fn a_composite_object_whose_parts_cannot_be_checked_says_why() {
    use crate::checksum::{Composite, Unchecked, Verdict};
    let object = data(PARTS.iter().sum());
    let why = Verdict::Unchecked(Unchecked::Composite(Composite {
        algo: CrcAlgo::Crc32c,
        parts: Some(3),
    }));
    // A store that does not ask for parts.
    let (mut store, s) = composite(&object, &PARTS);
    store.parts.clear();
    let sink = Bytes(Mutex::new(vec![0; object.len()]));
    assert_eq!(
        download_all(&store, s.clone(), &sink).unwrap().checksum,
        why
    );
    // A part without a CRC of the object's algorithm.
    let (mut store, _) = composite(&object, &PARTS);
    store.parts[1].checksum = Err(Unchecked::NoneStored);
    assert_eq!(
        download_all(&store, s.clone(), &sink).unwrap().checksum,
        why
    );
    // Parts that are not the object's bytes (the object changed between the HEADs).
    let (mut store, _) = composite(&object, &PARTS);
    store.parts[2].len += 1;
    assert_eq!(download_all(&store, s, &sink).unwrap().checksum, why);
    assert_eq!(*sink.0.lock().unwrap(), object);
}

mod segments;
