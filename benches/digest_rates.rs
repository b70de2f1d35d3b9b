//! How fast the PUT path's digests run on this machine: MD5 (the default ETag), CRC32C (a client's
//! `x-amz-checksum-crc32c`, as the server's checksum computer does it), CRC64NVME (the
//! `--etag crc64nvme` ETag) as s3s's hasher computes it (the client's checksums, in order) and as
//! the file writer does for the ETag ([`hipobj::checksum::CrcPieces`]), with the
//! pieces in order and reversed (each then combined), and the implementation crc-fast picked for
//! this CPU. In the lane the CPU is emulated (TCG): its cost
//! per instruction is not a real CPU's, so these figures say what bounds a PUT there, not on
//! hardware. `benches/digest-rates` runs it in the lane with each CPU model. Beside them, one
//! thread's memcpy rate (bytes copied per second, into a buffer already faulted in): the unit
//! benches/cpu-per-gib expresses the CPU time of a transfer in.
//!
//! `digest_rates [MiB] [rounds]` (defaults 64 and 3). Prints one line per digest and a JSON line.

use std::time::Instant;

use hipobj::checksum::{CrcAlgo, CrcPieces};
use hipobj_server::backend::checksum::{ChecksumAlgo, ChecksumComputer, Checksums};
use md5::{Digest as _, Md5};

/// The chunk the RDMA PUT path hands the file thread (`MAX_READ_CHUNK`).
const CHUNK: usize = 256 << 10;

fn best_mb_s(bytes: usize, rounds: usize, mut run: impl FnMut() -> u64) -> (f64, u64) {
    let mut best = f64::MAX;
    let mut out = 0;
    for _ in 0..rounds {
        let started = Instant::now();
        out = std::hint::black_box(run());
        best = best.min(started.elapsed().as_secs_f64());
    }
    (bytes as f64 / best / 1e6, out)
}

/// `algo` over `data` in CHUNK pieces, in order, as the server's checksum computer runs it; the
/// digest's length (nonzero when it was computed).
fn ordered_crc(data: &[u8], algo: ChecksumAlgo) -> u64 {
    let none = Checksums::default();
    let mut c = ChecksumComputer::new(&none, Some(algo));
    for chunk in data.chunks(CHUNK) {
        c.update(chunk);
    }
    let sums = c.finish(&none).unwrap_or_default();
    let digest = match algo {
        ChecksumAlgo::Crc32c => sums.crc32c,
        _ => sums.crc64nvme,
    };
    digest.map_or(0, |v| v.len() as u64)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let data: Vec<u8> = (0..mib << 20).map(|i| (i * 7 + i / 251) as u8).collect();

    let (md5, _) = best_mb_s(data.len(), rounds, || {
        let mut h = Md5::new();
        for c in data.chunks(CHUNK) {
            h.update(c);
        }
        u64::from_le_bytes(h.finalize()[..8].try_into().unwrap_or_default())
    });
    let mut copy = vec![0u8; data.len()];
    copy.fill(1); // its pages faulted in before the clock starts
    let (memcpy, _) = best_mb_s(data.len(), rounds, || {
        copy.copy_from_slice(std::hint::black_box(&data));
        u64::from(std::hint::black_box(&copy)[copy.len() / 2])
    });
    let (crc32c, _) = best_mb_s(data.len(), rounds, || {
        ordered_crc(&data, ChecksumAlgo::Crc32c)
    });
    let (ordered, whole) = best_mb_s(data.len(), rounds, || {
        ordered_crc(&data, ChecksumAlgo::Crc64Nvme)
    });
    let len = data.len();
    let pieces = |reversed: bool| {
        let mut chunks: Vec<(usize, &[u8])> = data.chunks(CHUNK).enumerate().collect();
        if reversed {
            chunks.reverse();
        }
        best_mb_s(len, rounds, || {
            let mut crc = CrcPieces::new(CrcAlgo::Crc64Nvme);
            for (i, c) in &chunks {
                crc.add((i * CHUNK) as u64, c);
            }
            crc.value(len as u64).unwrap_or(0)
        })
    };
    let (in_order, a) = pieces(false);
    let (reversed, b) = pieces(true);
    assert_eq!(a, b, "the pieces' value depends on their order");
    let target = crc_fast::get_calculator_target(crc_fast::CrcAlgorithm::Crc64Nvme);
    println!("memcpy                  {memcpy:8.1} MB/s");
    println!("md5                     {md5:8.1} MB/s");
    println!("crc32c ordered (server) {crc32c:8.1} MB/s");
    println!("crc64nvme ordered (s3s) {ordered:8.1} MB/s");
    println!("crc64nvme pieces        {in_order:8.1} MB/s");
    println!("crc64nvme pieces, rev.  {reversed:8.1} MB/s");
    println!("crc-fast implementation {target}");
    println!(
        "{{\"mib\": {mib}, \"chunk\": {CHUNK}, \"memcpy_mb_s\": {memcpy:.1}, \"md5_mb_s\": {md5:.1}, \"crc32c_ordered_mb_s\": {crc32c:.1}, \"crc64nvme_ordered_mb_s\": {ordered:.1}, \"crc64nvme_pieces_mb_s\": {in_order:.1}, \"crc64nvme_pieces_reversed_mb_s\": {reversed:.1}, \"crc_fast_target\": \"{target}\", \"checked\": {}}}",
        whole > 0
    );
}
