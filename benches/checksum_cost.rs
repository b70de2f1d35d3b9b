//! What the end-to-end check (docs/protocol.md section 15) costs a download and an upload,
//! natively on this host, without a NIC: the transfer engine moves an object between an in-memory
//! store and a sink or source that only counts bytes, with the check and without it, alternating,
//! `ROUNDS` times each; 1 and 4 streams. Printed: each run's seconds, the medians and their ratio
//! (with / without, the cost of the check), and the CRC64NVME rate of one core against the NIC
//! rates users have. Run: `cargo bench -p hipobj --bench checksum_cost -- [MIB [ROUNDS [NIC]]]`
//! (benches/checksum-cost keeps the log).
//!
//! What stands in for the NIC (`NIC`):
//! - `memcpy` (the default): each part is one memory copy on the engine's thread. This is a NIC
//!   that costs our CPU as much as the check does, so the ratio is an upper bound no NIC shows.
//! - `R` (a number, GB/s): a NIC of total rate R that moves the bytes by DMA, without our CPU. A
//!   part's transfer holds one shared NIC timeline for `len / R` and the thread waits until its
//!   bytes have landed. The object is all zero bytes and the engine's buffers start zeroed and
//!   only ever hold zeros, so what has "landed" is the object's bytes without a copy; the check
//!   computes the CRC64NVME of them for real and compares it with the stored value, as it does on
//!   a GET over RDMA.

use hipobj::checksum::{CrcAlgo, ObjectChecksum};
use hipobj::engine::{
    self, Buffers, CompletedPart, ErrorClass, Job, ObjectStore, PutTarget, Settings, Sink, Slice,
    Slot, Source,
};
use std::fmt;
use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;
const PART: u64 = 8 << 20;

#[derive(Debug)]
struct Never;
impl fmt::Display for Never {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("never")
    }
}
impl engine::Classify for Never {
    fn class(&self) -> ErrorClass {
        ErrorClass::Fatal
    }
}

/// What moves a part's bytes: the CPU, or a NIC of a total rate by DMA (see the module).
enum Nic {
    Memcpy,
    Dma {
        bytes_per_sec: f64,
        /// When the NIC is free again: transfers take turns on its one timeline.
        free_at: Mutex<Instant>,
    },
}

impl Nic {
    /// `memcpy` (or nothing), or a rate in GB/s; anything else is refused, never measured as
    /// something it did not ask for.
    fn parse(arg: Option<String>) -> Nic {
        match arg.as_deref() {
            None | Some("memcpy") => Nic::Memcpy,
            Some(text) => match text.parse::<f64>() {
                Ok(gbps) if gbps > 0.0 && gbps.is_finite() => Nic::Dma {
                    bytes_per_sec: gbps * 1e9,
                    free_at: Mutex::new(Instant::now()),
                },
                _ => panic!("NIC {text:?}: give `memcpy` or a rate in GB/s above 0"),
            },
        }
    }

    fn name(&self) -> String {
        match self {
            Nic::Memcpy => "memcpy on the engine's thread".into(),
            Nic::Dma { bytes_per_sec, .. } => format!("DMA at {} GB/s", bytes_per_sec / 1e9),
        }
    }

    /// Wait until `len` bytes took their turn on the NIC's timeline (no CPU spent meanwhile).
    fn dma(bytes_per_sec: f64, free_at: &Mutex<Instant>, len: usize) {
        let done = {
            let mut free = free_at.lock().unwrap_or_else(|e| e.into_inner());
            let start = (*free).max(Instant::now());
            *free = start + Duration::from_secs_f64(len as f64 / bytes_per_sec);
            *free
        };
        std::thread::sleep(done.saturating_duration_since(Instant::now()));
    }
}

/// The object in memory; a GET copies the part into the slice (or waits for the NIC's DMA), a
/// PUT copies it out (or waits for the DMA).
struct MemoryStore {
    object: Vec<u8>,
    nic: Nic,
}

impl ObjectStore for MemoryStore {
    type Error = Never;
    fn get(&self, slice: Slice, first: u64) -> Result<u64, Never> {
        if let Nic::Dma {
            bytes_per_sec,
            free_at,
        } = &self.nic
        {
            // The slice holds zeros, as the object does (see the module).
            Nic::dma(*bytes_per_sec, free_at, slice.len);
            return Ok(slice.len as u64);
        }
        let from = &self.object[first as usize..first as usize + slice.len];
        // SAFETY: the engine hands out a live ring buffer of at least `slice.len` bytes at
        // `base + offset` for the length of this call.
        unsafe {
            std::ptr::copy_nonoverlapping(
                from.as_ptr(),
                (slice.base + slice.offset) as *mut u8,
                slice.len,
            )
        };
        Ok(slice.len as u64)
    }
    fn put(
        &self,
        slice: Slice,
        _target: PutTarget<'_>,
        _checksum: Option<ObjectChecksum>,
    ) -> Result<Option<String>, Never> {
        if let Nic::Dma {
            bytes_per_sec,
            free_at,
        } = &self.nic
        {
            Nic::dma(*bytes_per_sec, free_at, slice.len);
            return Ok(Some("etag".into()));
        }
        // SAFETY: as in `get`; read only.
        let bytes = unsafe {
            std::slice::from_raw_parts((slice.base + slice.offset) as *const u8, slice.len)
        };
        std::hint::black_box(bytes.iter().step_by(4096).fold(0u8, |a, b| a ^ b));
        Ok(Some("etag".into()))
    }
    fn create_upload(&self, _checksum: Option<CrcAlgo>) -> Result<String, Never> {
        Ok("upload".into())
    }
    fn complete_upload(
        &self,
        _id: &str,
        _parts: &[CompletedPart],
        _checksum: Option<ObjectChecksum>,
    ) -> Result<(), Never> {
        Ok(())
    }
    fn abort_upload(&self, _id: &str) -> Result<(), Never> {
        Ok(())
    }
}

/// Plain memory standing in for registered buffers.
struct VecSlot(Vec<u8>);
impl Slot for VecSlot {
    fn base(&self) -> usize {
        self.0.as_ptr() as usize
    }
    fn load(&mut self, src: &dyn Source, pos: u64, len: usize) -> io::Result<()> {
        src.read_at(&mut self.0[..len], pos)
    }
    fn store(&self, sink: &dyn Sink, pos: u64, len: usize) -> io::Result<()> {
        sink.write_at(&self.0[..len], pos)
    }
}
struct Memory;
impl Buffers for Memory {
    fn slot(&self, len: usize) -> hipobj::error::Result<Box<dyn Slot>> {
        Ok(Box::new(VecSlot(touched_zeros(len))))
    }
}

/// `len` zero bytes in pages of their own: written once, so that reading them reads memory, not
/// the kernel's one shared zero page that untouched `calloc` memory maps (a CRC of that page
/// runs from the cache, far faster than over a real buffer).
fn touched_zeros(len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    // The allocator may know the bytes are zero; black_box keeps the write.
    std::hint::black_box(&mut v).fill(0);
    v
}

/// A destination that keeps nothing (the copy's write is not what is measured).
struct Discard;
impl Sink for Discard {
    fn write_at(&self, data: &[u8], _pos: u64) -> io::Result<()> {
        std::hint::black_box(data.len());
        Ok(())
    }
}

/// A source of a fixed byte per part (reading a file is not what is measured); zeros when the
/// NIC is a DMA stand-in, as the object is.
struct Pattern {
    zeros: bool,
}
impl Source for Pattern {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        buf.fill(if self.zeros { 0 } else { (pos / PART) as u8 });
        Ok(())
    }
}

fn settings(streams: usize, check: Option<ObjectChecksum>, upload: bool) -> Settings {
    let mut s = Settings::with_concurrency(streams);
    s.part_size = PART;
    s.multipart_threshold = PART;
    s.checksum = check.map(Ok);
    if !upload || check.is_none() {
        s.upload_checksum = None;
    }
    s
}

fn seconds(f: impl FnOnce()) -> f64 {
    let t0 = Instant::now();
    f();
    t0.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1024);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(7);
    let nic = Nic::parse(args.next());
    let zeros = matches!(nic, Nic::Dma { .. });
    let object: Vec<u8> = if zeros {
        touched_zeros(mib * MIB)
    } else {
        (0..mib * MIB).map(|i| (i * 131 + i / 4093) as u8).collect()
    };
    let stored = ObjectChecksum {
        algo: CrcAlgo::Crc64Nvme,
        value: CrcAlgo::Crc64Nvme.of(&object),
    };
    let store = MemoryStore { object, nic };
    let len = (mib * MIB) as u64;
    let cancel = AtomicBool::new(false);
    let progress = |_: u64| {};
    let crc_rate = {
        let t = seconds(|| {
            std::hint::black_box(CrcAlgo::Crc64Nvme.of(&store.object));
        });
        len as f64 / t / 1e9
    };
    println!(
        "host: {} cores, object {mib} MiB, parts {} MiB, {rounds} rounds alternating; NIC: {}; CRC64NVME {crc_rate:.2} GB/s on one core",
        std::thread::available_parallelism().map_or(0, usize::from),
        PART >> 20,
        store.nic.name()
    );
    for streams in [1usize, 4] {
        for (op, upload) in [("GET", false), ("PUT", true)] {
            let (mut with, mut without) = (Vec::new(), Vec::new());
            for round in 0..rounds {
                for checked in [false, true] {
                    let check = checked.then_some(stored);
                    let job = Job {
                        settings: settings(streams, check, upload),
                        progress: &progress,
                        cancel: &cancel,
                    };
                    let t = seconds(|| {
                        let r = if upload {
                            engine::upload(&store, &Pattern { zeros }, len, &Memory, &job)
                        } else {
                            engine::download(&store, 0, len, &Discard, &Memory, &job)
                        };
                        if let Err(e) = r {
                            panic!("{op} failed: {e}");
                        }
                    });
                    println!(
                        "run {op} streams {streams} round {round} check {checked} seconds {t:.4} GB/s {:.2}",
                        len as f64 / t / 1e9
                    );
                    if checked { &mut with } else { &mut without }.push(t);
                }
            }
            let (w, wo) = (median(with), median(without));
            println!(
                "figure {op} streams {streams}: median with check {w:.4} s, without {wo:.4} s, ratio {:.3} (n={rounds} each); GB/s {:.2} vs {:.2}",
                w / wo,
                len as f64 / w / 1e9,
                len as f64 / wo / 1e9
            );
        }
    }
    for nic in [25.0f64, 50.0, 100.0] {
        println!(
            "at {nic} GB/s a check needs {:.1} cores of CRC64NVME at this host's one-core rate",
            nic / crc_rate
        );
    }
}
