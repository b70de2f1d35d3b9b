//! The stager on the GPU under test: staged copies each way, a copy that outlives its staging
//! timeout (InternalError, then Busy until it ends, then usable again), and staging memory that
//! outlives the stager's shutdown while such a copy runs.

use crate::device::{pattern, TestGpu, DEVICE, TINY_TIMEOUT};
use hipobj::error::OpError;
use hipobj::hip::{CopyDirection, DeviceBuffer, HostBuffer};
use hipobj::registry::start_use;
use hipobj::stager::{Staged, StagerHandle};
use hipobj_actors::registry::Entry;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(120);

/// What a test registration's drop saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DropReport {
    /// Whether the staging memory held the expected bytes when it was about to be freed.
    staging_complete: bool,
}

/// Where a registration's drop says what its staging memory held.
type DropSlot = Arc<Mutex<Option<DropReport>>>;

/// A staged registration of the tests' own: device memory and its pinned staging buffer.
struct StagedBuf {
    device_ptr: usize,
    staging: HostBuffer,
    /// Bytes the staging memory must hold when it is freed, and where to say what it held.
    expect_on_drop: Option<(Arc<Vec<u8>>, DropSlot)>,
}

impl Staged for StagedBuf {
    fn staging_pair(&self, offset: usize) -> Option<(usize, usize)> {
        Some((self.device_ptr + offset, self.staging.addr() + offset))
    }
}

impl StagedBuf {
    fn staging_bytes(&self) -> &[u8] {
        // SAFETY: the staging buffer is live for `self`'s lifetime; the tests read it only when
        // no copy is running on it, or (on drop) once the stager let the registration go.
        unsafe { std::slice::from_raw_parts(self.staging.as_ptr(), self.staging.len()) }
    }

    fn fill_staging(&self, bytes: &[u8]) {
        assert!(bytes.len() <= self.staging.len());
        // SAFETY: in bounds (checked above); no copy runs on the buffer while the tests fill it.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.staging.as_ptr(), bytes.len()) }
    }
}

impl Drop for StagedBuf {
    fn drop(&mut self) {
        if let Some((expected, report)) = self.expect_on_drop.take() {
            let staging_complete = self.staging_bytes() == expected.as_slice();
            *report.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(DropReport { staging_complete });
        }
    }
}

struct Setup {
    gpu: TestGpu,
    device: DeviceBuffer,
    entry: Arc<Entry<StagedBuf>>,
    stager: StagerHandle<StagedBuf>,
    len: usize,
}

fn setup(len: usize) -> Setup {
    let gpu = TestGpu::from_env();
    let rt = gpu.runtime();
    let device = gpu.alloc(len);
    let staging = rt.alloc_host(len).expect("staging memory");
    let buf = StagedBuf {
        device_ptr: device.addr(),
        staging,
        expect_on_drop: None,
    };
    let entry = Entry::new(device.addr(), len, buf);
    let stager = StagerHandle::spawn(rt, DEVICE).expect("stager");
    Setup {
        gpu,
        device,
        entry,
        stager,
        len,
    }
}

impl Setup {
    fn copy(
        &self,
        direction: CopyDirection,
        offset: usize,
        len: usize,
        timeout: Duration,
    ) -> Result<(), hipobj::error::Error> {
        let guard = start_use(&self.entry)?;
        self.stager
            .copy(guard, direction, offset, len, timeout)
            .map(drop)
    }

    /// Ask until the registration can be used again; how many Busy answers came first.
    fn wait_until_usable(&self) -> usize {
        let deadline = Instant::now() + LONG;
        let mut busy = 0;
        loop {
            match start_use(&self.entry) {
                Ok(_) => return busy,
                Err(e) if e.code == OpError::Busy && Instant::now() < deadline => {
                    busy += 1;
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(e) => panic!("the registration did not become usable: {e}"),
            }
        }
    }
}

#[test]
fn staged_copies_each_way_are_byte_exact() {
    let s = setup((8 << 20) + 123);
    let len = s.len;
    let down = pattern(len, 1);
    s.gpu.write(&s.device, &down);
    s.copy(CopyDirection::DeviceToHost, 0, len, LONG)
        .expect("device -> host");
    assert!(
        s.entry.payload().staging_bytes() == down.as_slice(),
        "staging differs after D2H"
    );

    let up = pattern(len, 2);
    s.entry.payload().fill_staging(&up);
    s.copy(CopyDirection::HostToDevice, 0, len, LONG)
        .expect("host -> device");
    assert!(s.gpu.read(&s.device, len) == up, "device differs after H2D");

    // Part of the buffer at an offset: only those bytes change.
    let (offset, part) = ((1 << 20) + 7, 65_536 + 3);
    let mut staged = up.clone();
    staged[offset..offset + part].copy_from_slice(&pattern(part, 3));
    s.entry.payload().fill_staging(&staged);
    s.copy(CopyDirection::HostToDevice, offset, part, LONG)
        .expect("partial host -> device");
    let mut expected = up.clone();
    expected[offset..offset + part].copy_from_slice(&staged[offset..offset + part]);
    assert!(
        s.gpu.read(&s.device, len) == expected,
        "partial H2D wrote outside its range"
    );
    assert_eq!(s.entry.uses(), 0);
}

#[test]
fn copy_past_its_timeout_is_internal_error_then_busy_then_usable() {
    let gpu = TestGpu::from_env();
    let len = gpu.large_copy_len();
    drop(gpu);
    let s = setup(len);
    let data = pattern(len, 4);
    s.gpu.write(&s.device, &data);
    s.gpu.make_copies_slow();

    let started = Instant::now();
    let err = s
        .copy(CopyDirection::DeviceToHost, 0, len, TINY_TIMEOUT)
        .expect_err("a copy of this size cannot finish within the tiny timeout");
    let gave_up = started.elapsed();
    assert_eq!(err.code, OpError::InternalError, "{err}");
    // The copy still runs: every use of the registration is Busy until it ends.
    let busy = start_use(&s.entry)
        .map(drop)
        .expect_err("usable while its copy runs");
    assert_eq!(busy.code, OpError::Busy, "{busy}");
    let more_busy = s.wait_until_usable();
    let usable = started.elapsed();
    eprintln!(
        "{len}-byte copy: InternalError after {gave_up:?} (timeout {TINY_TIMEOUT:?}), Busy {} more times, usable after {usable:?}",
        more_busy
    );
    // Usable only once the copy has ended: the staging memory holds all of it (its tail first,
    // which a copy still running would write last).
    let staging = s.entry.payload().staging_bytes();
    assert!(
        staging[len - 4096..] == data[len - 4096..],
        "usable before the copy ended"
    );
    assert!(
        staging == data.as_slice(),
        "the timed-out copy did not complete"
    );

    // Usable again: a fresh copy with a normal timeout succeeds.
    s.gpu.make_copies_fast();
    let again = pattern(1 << 20, 5);
    s.entry.payload().fill_staging(&again);
    s.copy(CopyDirection::HostToDevice, 0, again.len(), LONG)
        .expect("a copy after the timed-out one");
    assert!(s.gpu.read(&s.device, again.len()) == again);
}

#[test]
fn staging_memory_outlives_shutdown_while_a_copy_runs() {
    let gpu = TestGpu::from_env();
    let len = gpu.large_copy_len();
    gpu.make_copies_slow();
    let rt = gpu.runtime();
    let device = gpu.alloc(len);
    let data = Arc::new(pattern(len, 6));
    gpu.write(&device, &data);
    let report: DropSlot = Arc::new(Mutex::new(None));
    let buf = StagedBuf {
        device_ptr: device.addr(),
        staging: rt.alloc_host(len).expect("staging memory"),
        expect_on_drop: Some((data.clone(), report.clone())),
    };
    let entry = Entry::new(device.addr(), len, buf);
    let stager: StagerHandle<StagedBuf> = StagerHandle::spawn(rt, DEVICE).expect("stager");
    let guard = start_use(&entry).expect("use");
    let err = stager
        .copy(guard, CopyDirection::DeviceToHost, 0, len, TINY_TIMEOUT)
        .map(drop)
        .expect_err("a copy of this size cannot finish within the tiny timeout");
    assert_eq!(err.code, OpError::InternalError);

    // Shut down: the stager's handle and our registration go while the copy runs.
    let shut_down = Instant::now();
    drop(stager);
    drop(entry);
    assert_eq!(
        *report.lock().unwrap_or_else(|p| p.into_inner()),
        None,
        "staging memory released while its copy was running"
    );
    let deadline = Instant::now() + LONG;
    let seen = loop {
        if let Some(seen) = *report.lock().unwrap_or_else(|p| p.into_inner()) {
            break seen;
        }
        assert!(Instant::now() < deadline, "staging memory never released");
        std::thread::sleep(Duration::from_millis(1));
    };
    eprintln!(
        "staging memory released {:?} after shutdown: {seen:?}",
        shut_down.elapsed()
    );
    assert!(
        seen.staging_complete,
        "staging memory freed before its copy had written all of it"
    );
    drop(device);
}
