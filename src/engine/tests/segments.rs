//! Uploads from segments (`upload_from`) against the in-memory store: host bytes and "registered"
//! memory (plain host memory here, or the simulated GPU's device memory), end to end.

use super::*;
use crate::engine::{upload_from, RegisteredMemory, Segment};

const P: usize = MIN_PART_SIZE as usize;

/// Plain memory standing in for the runtime's registrations (base -> length), read as the runtime
/// reads host memory; counts the CRCs computed in place and the reads into the ring.
#[derive(Default)]
struct Registrations {
    lens: BTreeMap<usize, usize>,
    crcs: AtomicUsize,
    reads: AtomicUsize,
}

impl Registrations {
    fn of(buffers: &[&[u8]]) -> Registrations {
        Registrations {
            lens: buffers
                .iter()
                .map(|b| (b.as_ptr() as usize, b.len()))
                .collect(),
            ..Registrations::default()
        }
    }

    fn bytes(&self, slice: Slice) -> Result<&[u8], Error> {
        let len = self
            .lens
            .get(&slice.base)
            .ok_or_else(|| Error::invalid("not registered"))?;
        if slice.offset + slice.len > *len {
            return Err(Error::invalid("past the registration"));
        }
        // SAFETY: the test's registrations are live Vecs of `len` bytes at `base`, read only.
        Ok(unsafe { std::slice::from_raw_parts(Store::memory(slice), slice.len) })
    }
}

impl RegisteredMemory for Registrations {
    fn registered_len(&self, base: usize) -> Option<usize> {
        self.lens.get(&base).copied()
    }
    fn crc(&self, slice: Slice, algo: CrcAlgo) -> Result<u64, Error> {
        self.crcs.fetch_add(1, Ordering::SeqCst);
        Ok(algo.of(self.bytes(slice)?))
    }
    fn read(&self, slice: Slice, dst: &mut [u8]) -> Result<(), Error> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        dst.copy_from_slice(self.bytes(slice)?);
        Ok(())
    }
}

fn registered(buffer: &[u8], offset: usize, len: usize) -> Segment<'static> {
    Segment::Registered(Slice {
        base: buffer.as_ptr() as usize,
        offset,
        len,
    })
}

/// The bytes `segments` stand for, end to end.
fn concatenation(segments: &[Segment<'_>], memory: &Registrations) -> Vec<u8> {
    let mut all = Vec::new();
    for segment in segments {
        match segment {
            Segment::Bytes(b) => all.extend_from_slice(b),
            Segment::Registered(s) => all.extend_from_slice(memory.bytes(*s).unwrap()),
        }
    }
    all
}

/// A checkpoint's layout in parts of `P`: a 100-byte header, tensor A (3P + 50 bytes at offset 10
/// of its registration), 20 bytes between, tensor B (2P bytes at offset 0 of its own). Parts 1
/// (header + A) and 4 (A, the bytes between, B) span segments; 2, 3, 5 and 6 lie inside one.
struct Checkpoint {
    header: Vec<u8>,
    between: Vec<u8>,
    a: Vec<u8>,
    b: Vec<u8>,
}

impl Checkpoint {
    fn new() -> Checkpoint {
        let mut b = data(2 * P);
        b.reverse();
        Checkpoint {
            header: vec![7; 100],
            between: vec![9; 20],
            a: data(10 + 3 * P + 50 + 33),
            b,
        }
    }

    fn segments(&self) -> Vec<Segment<'_>> {
        vec![
            Segment::Bytes(&self.header),
            registered(&self.a, 10, 3 * P + 50),
            Segment::Bytes(&self.between),
            registered(&self.b, 0, 2 * P),
        ]
    }

    fn memory(&self) -> Registrations {
        Registrations::of(&[&self.a, &self.b])
    }

    fn base(buffer: &[u8]) -> usize {
        buffer.as_ptr() as usize
    }
}

#[test]
fn parts_inside_one_registration_go_from_there_and_the_others_through_the_ring() {
    let c = Checkpoint::new();
    let segments = c.segments();
    let memory = c.memory();
    let object = concatenation(&segments, &memory);
    assert_eq!(object.len(), 5 * P + 170);
    let store = Store::default();
    let ring = Memory::default();
    let (report, moved) = run_job(settings(MIN_PART_SIZE, 3), |job| {
        upload_from(&store, &segments, &memory, &ring, job)
    });
    let report = report.unwrap();
    assert!(report.multipart);
    assert_eq!(
        (report.parts, report.bytes, moved),
        (6, object.len() as u64, object.len() as u64)
    );
    assert_eq!(*store.object.lock().unwrap(), object);
    // Direct parts were sent from their registration, at their place in it.
    let sent = store.put_slices.lock().unwrap().clone();
    let (a, b) = (Checkpoint::base(&c.a), Checkpoint::base(&c.b));
    let at = |base, offset| Slice {
        base,
        offset,
        len: P,
    };
    assert_eq!(sent[&2], at(a, 10 + P - 100));
    assert_eq!(sent[&3], at(a, 10 + 2 * P - 100));
    assert_eq!(sent[&5], at(b, P - 170));
    assert_eq!(
        sent[&6],
        Slice {
            base: b,
            offset: 2 * P - 170,
            len: 170
        }
    );
    // The spanning ones were copied into ring buffers (neither registration), A's bytes read.
    for n in [1, 4] {
        assert!(![a, b].contains(&sent[&n].base), "part {n}: {:?}", sent[&n]);
        assert_eq!(sent[&n].offset, 0);
    }
    assert!(memory.reads.load(Ordering::SeqCst) >= 2);
    let slots = ring.slots.load(Ordering::SeqCst);
    assert!(
        (1..=4).contains(&slots),
        "ring buffers for two copied parts only: {slots}"
    );
    // Every part carried the CRC of its bytes (the store refuses another with 400), the direct
    // ones computed in place, and the completion the whole object's.
    assert_eq!(store.checksums_sent.load(Ordering::SeqCst), 6);
    assert_eq!(memory.crcs.load(Ordering::SeqCst), 4);
    assert_eq!(*store.upload_algo.lock().unwrap(), Some(CrcAlgo::Crc64Nvme));
    assert_eq!(*store.whole_checksum.lock().unwrap(), Some(stored(&object)));
}

#[test]
fn a_registered_object_goes_without_a_ring_buffer() {
    let tensor = data(3 * P + 5 + 64);
    let memory = Registrations::of(&[&tensor]);
    let segments = [registered(&tensor, 64, 3 * P + 5)];
    let object = tensor[64..].to_vec();
    // Multipart: every part direct, no ring buffer registered at all.
    let store = Store::default();
    let ring = Memory::default();
    let (report, _) = run_job(settings(MIN_PART_SIZE, 2), |job| {
        upload_from(&store, &segments, &memory, &ring, job)
    });
    assert_eq!(report.unwrap().parts, 4);
    assert_eq!(*store.object.lock().unwrap(), object);
    assert_eq!(ring.slots.load(Ordering::SeqCst), 0);
    assert_eq!(*store.whole_checksum.lock().unwrap(), Some(stored(&object)));
    // One PUT: from the registration itself, with the object's CRC.
    let store = Store::default();
    let (report, moved) = run_job(settings(4 * MIN_PART_SIZE, 2), |job| {
        upload_from(&store, &segments, &memory, &ring, job)
    });
    let report = report.unwrap();
    assert!(!report.multipart);
    assert_eq!((report.parts, moved), (1, object.len() as u64));
    assert_eq!(*store.object.lock().unwrap(), object);
    assert_eq!(
        store.put_slices.lock().unwrap()[&0],
        segments_slice(&segments[0])
    );
    assert_eq!(store.checksums_sent.load(Ordering::SeqCst), 1);
    assert_eq!(ring.slots.load(Ordering::SeqCst), 0);
    assert_eq!(memory.reads.load(Ordering::SeqCst), 0, "nothing copied");
}

fn segments_slice(segment: &Segment<'_>) -> Slice {
    match segment {
        Segment::Registered(s) => *s,
        Segment::Bytes(_) => panic!("not registered"),
    }
}

#[test]
fn a_single_put_across_segments_is_copied_once_into_one_buffer() {
    let c = Checkpoint::new();
    let segments = c.segments();
    let memory = c.memory();
    let object = concatenation(&segments, &memory);
    let store = Store::default();
    let ring = Memory::default();
    let s = Settings {
        upload_checksum: None,
        ..settings(8 * MIN_PART_SIZE, 4)
    };
    let (report, _) = run_job(s, |job| upload_from(&store, &segments, &memory, &ring, job));
    assert!(!report.unwrap().multipart);
    assert_eq!(*store.object.lock().unwrap(), object);
    assert_eq!(ring.slots.load(Ordering::SeqCst), 1);
    // None asked for: none sent, none computed.
    assert_eq!(store.checksums_sent.load(Ordering::SeqCst), 0);
    assert_eq!(memory.crcs.load(Ordering::SeqCst), 0);
}

#[test]
fn a_failed_upload_from_segments_is_aborted() {
    let c = Checkpoint::new();
    let segments = c.segments();
    let memory = c.memory();
    // Request 0 creates the upload; one of the parts' first attempts is refused for good.
    let store = Store::default().failing(&[(2, 403)]);
    let (out, _) = run_job(settings(MIN_PART_SIZE, 1), |job| {
        upload_from(&store, &segments, &memory, &Memory::default(), job)
    });
    assert!(matches!(out, Err(EngineError::Store { .. })), "{out:?}");
    assert_eq!(store.aborted.load(Ordering::SeqCst), 1);
    assert!(store.uploads.lock().unwrap().is_empty(), "no upload left");
    assert!(store.object.lock().unwrap().is_empty(), "nothing stored");
}

#[test]
fn bad_segments_are_refused_before_anything_moves() {
    let tensor = data(1000);
    let memory = Registrations::of(&[&tensor]);
    let header = [1u8; 10];
    let unregistered = data(100);
    let cases: [(&str, Vec<Segment<'_>>); 5] = [
        ("past the end", vec![registered(&tensor, 900, 101)]),
        ("offset past the end", vec![registered(&tensor, 1001, 0)]),
        ("overflow", vec![registered(&tensor, usize::MAX, 2)]),
        (
            "not registered",
            vec![Segment::Bytes(&header), registered(&unregistered, 0, 10)],
        ),
        (
            "empty",
            vec![Segment::Bytes(&[]), registered(&tensor, 5, 0)],
        ),
    ];
    for (what, segments) in cases {
        let store = Store::default();
        let ring = Memory::default();
        let (out, _) = run_job(settings(MIN_PART_SIZE, 2), |job| {
            upload_from(&store, &segments, &memory, &ring, job)
        });
        let Err(EngineError::Library(e)) = out else {
            panic!("{what}: {out:?}");
        };
        assert_eq!(store.requests.load(Ordering::SeqCst), 0, "{what}: {e}");
        assert_eq!(ring.slots.load(Ordering::SeqCst), 0, "{what}");
        if what == "not registered" {
            assert!(e.to_string().contains("segment 1"), "{e}");
        }
    }
}

crate::with_sim_gpu! {
    /// Registrations of the simulated GPU's device memory, read as the runtime reads device
    /// memory: the CRC through the bounce, the ring's copy by the GPU runtime's copy.
    struct DeviceRegistrations {
        gpu: std::sync::Arc<crate::hip::SimGpu>,
        buffer: crate::hip::DeviceBuffer,
        reads: AtomicUsize,
    }

    impl RegisteredMemory for DeviceRegistrations {
        fn registered_len(&self, base: usize) -> Option<usize> {
            (base == self.buffer.addr()).then_some(self.buffer.len())
        }
        fn crc(&self, slice: Slice, algo: CrcAlgo) -> Result<u64, Error> {
            // SAFETY: the slice lies in the live device buffer (the engine checked it).
            unsafe {
                crate::checksum::of_device_memory(
                    &*self.gpu,
                    0,
                    slice.base + slice.offset,
                    slice.len,
                    algo,
                    4096,
                )
            }
            .map_err(|e| Error::internal(e.to_string()))
        }
        fn read(&self, slice: Slice, dst: &mut [u8]) -> Result<(), Error> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            // SAFETY: as above.
            unsafe {
                crate::hip::read_device_memory(&*self.gpu, 0, slice.base + slice.offset, dst)
            }
            .map_err(|e| Error::internal(e.to_string()))
        }
    }

    #[test]
    fn device_memory_goes_direct_or_is_read_back_for_the_ring() {
        let gpu = crate::hip::SimGpu::new(1);
        let tensor = data(2 * P + 1000);
        let buffer = crate::hip::DeviceBuffer::new(gpu.clone(), 0, tensor.len()).unwrap();
        buffer.write(0, &tensor).unwrap();
        let memory = DeviceRegistrations {
            gpu,
            buffer,
            reads: AtomicUsize::new(0),
        };
        let base = memory.buffer.addr();
        let header = data(300);
        let segments = [
            Segment::Bytes(&header),
            Segment::Registered(Slice {
                base,
                offset: 1000,
                len: 2 * P,
            }),
        ];
        let mut object = header.clone();
        object.extend_from_slice(&tensor[1000..]);
        let store = Store::default();
        let (report, _) = run_job(settings(MIN_PART_SIZE, 2), |job| {
            upload_from(&store, &segments, &memory, &Memory::default(), job)
        });
        assert_eq!(report.unwrap().parts, 3);
        assert_eq!(*store.object.lock().unwrap(), object);
        let sent = store.put_slices.lock().unwrap().clone();
        // Part 1 spans the header and the tensor (copied: the tensor's bytes read back), part 2
        // lies inside the tensor (sent from device memory), part 3 too.
        assert_ne!(sent[&1].base, base);
        assert_eq!((sent[&2].base, sent[&2].offset), (base, 1000 + P - 300));
        assert_eq!((sent[&3].base, sent[&3].offset), (base, 1000 + 2 * P - 300));
        assert_eq!(memory.reads.load(Ordering::SeqCst), 1);
        assert_eq!(store.checksums_sent.load(Ordering::SeqCst), 3);
        assert_eq!(*store.whole_checksum.lock().unwrap(), Some(stored(&object)));
    }
}
