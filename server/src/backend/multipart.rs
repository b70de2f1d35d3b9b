//! Multipart uploads on the filesystem backend.
//!
//! `<bucket>/.uploads/<upload id>/upload.json` records the key, start time and options;
//! `<n>` and `<n>.json` are part `n`'s bytes and sidecar, written through the same
//! [`FsWriter`](super::fs) as objects (temp file + rename). Completion streams the listed parts
//! into one temp file and renames it into place like any other commit, then drops the upload.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};

use super::checksum::{composite, ChecksumAlgo, ChecksumComputer};
use super::fs::{Dest, FsBackend, META_DIR, UPLOADS_DIR};
use super::keys::encode_key;
use super::meta::Sidecar;
use super::{
    Checksums, CompletedPart, ObjectInfo, ObjectWriter, PartInfo, StorageError, StorageResult,
    UploadInfo, UploadOptions, WriteOptions, MAX_PART_NUMBER, MIN_PART_SIZE,
};

const UPLOAD_FILE: &str = "upload.json";
/// Written when the upload completed: a repeated CompleteMultipartUpload answers the same object
/// (S3 does); every other call treats the upload as gone.
const COMPLETED_FILE: &str = "completed.json";

#[derive(Serialize, Deserialize)]
struct CompletedRecord {
    etag: String,
    size: u64,
    checksums: Checksums,
    part_sizes: Vec<u64>,
    #[serde(default)]
    part_checksums: Vec<Checksums>,
}

#[derive(Serialize, Deserialize)]
struct UploadRecord {
    key: String,
    /// Nanoseconds since the Unix epoch.
    initiated_ns: u64,
    options: UploadOptions,
}

fn new_upload_id() -> StorageResult<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| StorageError::Io(io::Error::other(e.to_string())))?;
    Ok(hex::encode(b))
}

fn valid_upload_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The directory of an upload of `key` that exists and has not completed.
fn upload_dir(fs: &FsBackend, bucket: &str, key: &str, id: &str) -> StorageResult<PathBuf> {
    let dir = any_upload_dir(fs, bucket, key, id)?;
    if dir.join(COMPLETED_FILE).exists() {
        return Err(StorageError::NoSuchUpload);
    }
    Ok(dir)
}

/// The directory of an upload of `key`, completed or not.
fn any_upload_dir(fs: &FsBackend, bucket: &str, key: &str, id: &str) -> StorageResult<PathBuf> {
    let bucket_dir = fs.existing_bucket_dir(bucket)?;
    if !valid_upload_id(id) {
        return Err(StorageError::NoSuchUpload);
    }
    let dir = bucket_dir.join(UPLOADS_DIR).join(id);
    let record = load_record(&dir)?;
    if record.key != key {
        return Err(StorageError::NoSuchUpload);
    }
    Ok(dir)
}

fn load_record(dir: &std::path::Path) -> StorageResult<UploadRecord> {
    let text = match fs::read(dir.join(UPLOAD_FILE)) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(StorageError::NoSuchUpload),
        Err(e) => return Err(e.into()),
    };
    serde_json::from_slice(&text).map_err(|e| StorageError::Io(io::Error::other(e)))
}

fn to_info(bucket: &str, id: &str, record: UploadRecord) -> UploadInfo {
    UploadInfo {
        bucket: bucket.to_string(),
        key: record.key,
        upload_id: id.to_string(),
        initiated: SystemTime::UNIX_EPOCH + Duration::from_nanos(record.initiated_ns),
        options: record.options,
    }
}

pub(super) fn create(
    fs: &FsBackend,
    bucket: &str,
    key: &str,
    options: UploadOptions,
) -> StorageResult<String> {
    let bucket_dir = fs.existing_bucket_dir(bucket)?;
    encode_key(key)?;
    let id = new_upload_id()?;
    let dir = bucket_dir.join(UPLOADS_DIR).join(&id);
    fs::create_dir_all(&dir)?;
    let initiated_ns = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let record = UploadRecord {
        key: key.to_string(),
        initiated_ns,
        options,
    };
    let text = serde_json::to_vec(&record).map_err(io::Error::other)?;
    let tmp = fs.tmp_path();
    fs::write(&tmp, text)?;
    fs::rename(&tmp, dir.join(UPLOAD_FILE))?;
    Ok(id)
}

pub(super) fn part_writer(
    fs: &FsBackend,
    bucket: &str,
    key: &str,
    id: &str,
    number: u32,
    options: WriteOptions,
) -> StorageResult<ObjectWriter> {
    if number == 0 || number > MAX_PART_NUMBER {
        return Err(StorageError::InvalidPart);
    }
    let dir = upload_dir(fs, bucket, key, id)?;
    fs.writer(Dest::Part { dir, number }, options)
}

pub(super) fn info(fs: &FsBackend, bucket: &str, key: &str, id: &str) -> StorageResult<UploadInfo> {
    let dir = upload_dir(fs, bucket, key, id)?;
    Ok(to_info(bucket, id, load_record(&dir)?))
}

pub(super) fn parts(
    fs: &FsBackend,
    bucket: &str,
    key: &str,
    id: &str,
) -> StorageResult<Vec<PartInfo>> {
    let dir = upload_dir(fs, bucket, key, id)?;
    let mut out = Vec::new();
    for entry in fs::read_dir(&dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(number) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(part) = load_part(&dir, number)? {
            out.push(part);
        }
    }
    out.sort_by_key(|p| p.part_number);
    Ok(out)
}

fn load_part(dir: &std::path::Path, number: u32) -> StorageResult<Option<PartInfo>> {
    let data = dir.join(number.to_string());
    let stat = match fs::metadata(&data) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Some(side) =
        Sidecar::load_matching(&dir.join(format!("{number}.json")), stat.ino(), stat.len())
    else {
        // Being replaced right now; the caller sees the part once its sidecar matches.
        return Ok(None);
    };
    Ok(Some(PartInfo {
        part_number: number,
        size: stat.len(),
        etag: side.etag,
        last_modified: stat.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        checksums: side.checksums,
    }))
}

/// The stored parts named by `wanted`, checked as S3 checks them. With an upload checksum
/// algorithm every named part must carry its checksum, equal to the stored one.
fn chosen_parts(
    stored: &[PartInfo],
    wanted: &[CompletedPart],
    algo: Option<ChecksumAlgo>,
) -> StorageResult<Vec<PartInfo>> {
    if wanted.is_empty() {
        return Err(StorageError::InvalidPart);
    }
    let mut chosen: Vec<PartInfo> = Vec::with_capacity(wanted.len());
    let mut last = 0;
    for (i, want) in wanted.iter().enumerate() {
        // A part named twice in a row (a resent part): the later entry counts.
        if wanted
            .get(i + 1)
            .is_some_and(|next| next.part_number == want.part_number)
        {
            continue;
        }
        if want.part_number <= last {
            return Err(StorageError::InvalidPartOrder);
        }
        last = want.part_number;
        let part = stored
            .iter()
            .find(|p| p.part_number == want.part_number)
            .ok_or(StorageError::InvalidPart)?;
        if want.etag.trim_matches('"') != part.etag {
            return Err(StorageError::InvalidPart);
        }
        // A part checksum named here must be the stored part's. One left out is accepted (as
        // RGW does): the part's bytes were verified against it at UploadPart.
        if let Some(algo) = algo {
            if let Some(v) = want.checksums.get(algo) {
                if Some(v) != part.checksums.get(algo) {
                    return Err(StorageError::InvalidPart);
                }
            }
        }
        chosen.push(part.clone());
    }
    if chosen[..chosen.len() - 1]
        .iter()
        .any(|p| p.size < MIN_PART_SIZE)
    {
        return Err(StorageError::EntityTooSmall);
    }
    Ok(chosen)
}

/// S3's multipart ETag: MD5 of the concatenated binary part MD5s, `-<parts>`.
fn multipart_etag(parts: &[PartInfo]) -> StorageResult<String> {
    let mut md5 = Md5::new();
    for p in parts {
        md5.update(hex::decode(&p.etag).map_err(|_| StorageError::InvalidPart)?);
    }
    Ok(format!("{}-{}", hex::encode(md5.finalize()), parts.len()))
}

/// The object's checksum: over the whole object (FULL_OBJECT, computed while assembling) or the
/// COMPOSITE of the parts' checksums.
fn object_checksums(
    algo: Option<ChecksumAlgo>,
    parts: &[PartInfo],
    full: Option<Checksums>,
) -> Checksums {
    let mut out = Checksums::default();
    let Some(algo) = algo else {
        return out;
    };
    match full {
        Some(full) => out.set(algo, full.get(algo).cloned()),
        None => {
            let refs: Vec<&Checksums> = parts.iter().map(|p| &p.checksums).collect();
            out.set(algo, composite(algo, &refs));
            out.composite = true;
        }
    }
    out
}

/// Whether the upload's checksum is FULL_OBJECT (CRC64NVME has no COMPOSITE form).
fn is_full_object(options: &UploadOptions) -> bool {
    options.full_object || options.checksum == Some(ChecksumAlgo::Crc64Nvme)
}

pub(super) fn complete(
    fs: &FsBackend,
    bucket: &str,
    key: &str,
    id: &str,
    wanted: &[CompletedPart],
    expected: &Checksums,
) -> StorageResult<ObjectInfo> {
    let dir = any_upload_dir(fs, bucket, key, id)?;
    let record = load_record(&dir)?;
    if let Some(done) = load_completed(&dir)? {
        return Ok(ObjectInfo {
            key: key.to_string(),
            size: done.size,
            etag: done.etag,
            last_modified: SystemTime::now(),
            meta: record.options.meta,
            checksums: done.checksums,
            parts: Some(done.part_sizes.len() as u32),
            part_sizes: done.part_sizes,
            part_checksums: done.part_checksums,
        });
    }
    let stored = parts(fs, bucket, key, id)?;
    let chosen = chosen_parts(&stored, wanted, record.options.checksum)?;
    let etag = multipart_etag(&chosen)?;

    // The object's checksum, and whether it is computed over the assembled bytes: the upload's
    // own, or for an upload that named none the store's default, a full-object CRC64NVME (as S3
    // does for such uploads).
    let (algo, full_object) = match record.options.checksum {
        Some(algo) => (Some(algo), is_full_object(&record.options)),
        None => (fs.default_crc64().then_some(ChecksumAlgo::Crc64Nvme), true),
    };
    let mut full =
        (algo.is_some() && full_object).then(|| ChecksumComputer::new(&Checksums::default(), algo));
    let tmp = fs.tmp_path();
    let assembled = (|| -> io::Result<File> {
        let mut out = File::create(&tmp)?;
        let mut buf = vec![0u8; 1 << 20];
        for p in &chosen {
            let mut part = File::open(dir.join(p.part_number.to_string()))?;
            loop {
                let n = part.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                if let Some(full) = &mut full {
                    full.update(&buf[..n]);
                }
                out.write_all(&buf[..n])?;
            }
        }
        out.flush()?;
        Ok(out)
    })();
    let out = match assembled {
        Ok(f) => f,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(e.into());
        }
    };
    let full = full.map(|c| c.finish(&Checksums::default())).transpose()?;
    let checksums = object_checksums(algo, &chosen, full);
    for a in expected.algos() {
        if Some(a) != algo || expected.get(a) != checksums.get(a) {
            let _ = fs::remove_file(&tmp);
            return Err(StorageError::ChecksumMismatch(a));
        }
    }

    let stat = out.metadata()?;
    let bucket_dir = fs.existing_bucket_dir(bucket)?;
    let name = encode_key(key)?;
    let side = Sidecar {
        ino: stat.ino(),
        size: stat.len(),
        etag: etag.clone(),
        meta: record.options.meta.clone(),
        checksums: checksums.clone(),
        parts: Some(chosen.len() as u32),
        part_sizes: chosen.iter().map(|p| p.size).collect(),
        part_checksums: chosen.iter().map(|p| p.checksums.clone()).collect(),
    };
    let placed = {
        let _placing = fs.placing();
        side.store(&fs.tmp_path(), &bucket_dir.join(META_DIR).join(&name))
            .and_then(|()| fs::rename(&tmp, bucket_dir.join(&name)))
    };
    if let Err(e) = placed {
        let _ = fs::remove_file(&tmp);
        return Err(e.into());
    }
    finish_upload(
        fs,
        &dir,
        &CompletedRecord {
            etag: etag.clone(),
            size: stat.len(),
            checksums: checksums.clone(),
            part_sizes: side.part_sizes.clone(),
            part_checksums: side.part_checksums.clone(),
        },
    );
    Ok(ObjectInfo {
        key: key.to_string(),
        size: stat.len(),
        etag,
        last_modified: stat.modified().unwrap_or_else(|_| SystemTime::now()),
        meta: record.options.meta,
        checksums,
        parts: Some(chosen.len() as u32),
        part_sizes: side.part_sizes,
        part_checksums: side.part_checksums,
    })
}

fn load_completed(dir: &std::path::Path) -> StorageResult<Option<CompletedRecord>> {
    match fs::read(dir.join(COMPLETED_FILE)) {
        Ok(t) => serde_json::from_slice(&t)
            .map(Some)
            .map_err(|e| StorageError::Io(io::Error::other(e))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Record the completion and drop the parts (best effort: the object is already in place).
fn finish_upload(fs: &FsBackend, dir: &std::path::Path, done: &CompletedRecord) {
    let recorded = serde_json::to_vec(done)
        .map_err(io::Error::other)
        .and_then(|text| {
            let tmp = fs.tmp_path();
            fs::write(&tmp, text)?;
            fs::rename(&tmp, dir.join(COMPLETED_FILE))
        });
    if recorded.is_err() {
        let _ = fs::remove_dir_all(dir);
        return;
    }
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name != UPLOAD_FILE && name != COMPLETED_FILE {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

pub(super) fn abort(fs: &FsBackend, bucket: &str, key: &str, id: &str) -> StorageResult<()> {
    let dir = upload_dir(fs, bucket, key, id)?;
    fs::remove_dir_all(dir)?;
    Ok(())
}

pub(super) fn list(fs: &FsBackend, bucket: &str, prefix: &str) -> StorageResult<Vec<UploadInfo>> {
    let uploads = fs.existing_bucket_dir(bucket)?.join(UPLOADS_DIR);
    let entries = match fs::read_dir(&uploads) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let Some(id) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if entry.path().join(COMPLETED_FILE).exists() {
            continue;
        }
        match load_record(&entry.path()) {
            Ok(record) if record.key.starts_with(prefix) => out.push(to_info(bucket, &id, record)),
            Ok(_) | Err(StorageError::NoSuchUpload) => {}
            Err(e) => return Err(e),
        }
    }
    out.sort_by(|a, b| a.key.cmp(&b.key).then(a.initiated.cmp(&b.initiated)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::Backend;
    use super::*;

    fn part(s: &FsBackend, id: &str, n: u32, data: &[u8]) -> ObjectInfo {
        let mut w = s
            .create_part_write("b", "k", id, n, WriteOptions::default())
            .expect("part");
        w.append(data).expect("write");
        w.commit().expect("commit")
    }

    /// A store with bucket `b` and a multipart upload of `b/k` without a checksum: (its directory,
    /// the store, the upload id).
    fn upload_of_b_k() -> (tempfile::TempDir, FsBackend, String) {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = FsBackend::open(dir.path()).expect("open");
        s.create_bucket("b").expect("bucket");
        let id = s
            .create_upload("b", "k", UploadOptions::default())
            .expect("create");
        (dir, s, id)
    }

    /// CompleteMultipartUpload of `b/k` with parts 1 and 2, named by number and ETag only.
    fn complete_both(s: &FsBackend, id: &str, p1: &ObjectInfo, p2: &ObjectInfo) -> ObjectInfo {
        let named = |n: u32, etag: &str| CompletedPart {
            part_number: n,
            etag: format!("\"{etag}\""),
            checksums: Checksums::default(),
        };
        s.complete_upload(
            "b",
            "k",
            id,
            &[named(1, &p1.etag), named(2, &p2.etag)],
            &Checksums::default(),
        )
        .expect("complete")
    }

    #[test]
    fn an_upload_without_a_checksum_gets_the_full_object_crc64nvme() {
        let (_dir, s, id) = upload_of_b_k();
        let big: Vec<u8> = (0..MIN_PART_SIZE as usize)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let p1 = part(&s, &id, 1, &big);
        let p2 = part(&s, &id, 2, b"tail");
        let info = complete_both(&s, &id, &p1, &p2);
        let mut whole = big.clone();
        whole.extend_from_slice(b"tail");
        let mut want = ChecksumComputer::new(&Checksums::default(), Some(ChecksumAlgo::Crc64Nvme));
        want.update(&whole);
        let want = want.finish(&Checksums::default()).expect("crc");
        assert_eq!(info.checksums.crc64nvme, want.crc64nvme);
        assert!(info.checksums.crc64nvme.is_some());
        assert!(!info.checksums.composite, "FULL_OBJECT, as S3 stores it");
        let r = s.open_read("b", "k", None).expect("open");
        assert_eq!(r.info.checksums, info.checksums);
    }

    #[test]
    fn upload_complete_and_checks() {
        let (_dir, s, id) = upload_of_b_k();
        let big = vec![7u8; MIN_PART_SIZE as usize];
        let p1 = part(&s, &id, 1, &big);
        let p2 = part(&s, &id, 2, b"tail");
        // Replacing a part keeps one part of that number.
        let p2 = {
            let _old = p2;
            part(&s, &id, 2, b"tail!")
        };
        assert_eq!(s.list_parts("b", "k", &id).expect("parts").len(), 2);
        assert_eq!(s.list_uploads("b", "").expect("uploads").len(), 1);
        let named = |n: u32, etag: &str| CompletedPart {
            part_number: n,
            etag: format!("\"{etag}\""),
            checksums: Checksums::default(),
        };
        assert!(matches!(
            s.complete_upload(
                "b",
                "k",
                &id,
                &[named(2, &p2.etag), named(1, &p1.etag)],
                &Checksums::default()
            ),
            Err(StorageError::InvalidPartOrder)
        ));
        assert!(matches!(
            s.complete_upload(
                "b",
                "k",
                &id,
                &[named(1, "00"), named(2, &p2.etag)],
                &Checksums::default()
            ),
            Err(StorageError::InvalidPart)
        ));
        assert!(matches!(
            s.complete_upload(
                "b",
                "other",
                &id,
                &[named(1, &p1.etag)],
                &Checksums::default()
            ),
            Err(StorageError::NoSuchUpload)
        ));
        let info = complete_both(&s, &id, &p1, &p2);
        assert!(info.etag.ends_with("-2"), "{}", info.etag);
        assert_eq!(info.size, MIN_PART_SIZE + 5);
        let mut r = s.open_read("b", "k", None).expect("open");
        let mut got = Vec::new();
        r.read_to_end(&mut got).expect("read");
        assert_eq!(&got[got.len() - 5..], b"tail!");
        assert_eq!(r.info.etag, info.etag);
        assert!(s.list_uploads("b", "").expect("uploads").is_empty());
        // Completing again answers the same object; the upload is otherwise gone.
        let again = s
            .complete_upload(
                "b",
                "k",
                &id,
                &[named(1, &p1.etag), named(2, &p2.etag)],
                &Checksums::default(),
            )
            .expect("repeat complete");
        assert_eq!(again.etag, info.etag);
        assert!(matches!(
            s.list_parts("b", "k", &id),
            Err(StorageError::NoSuchUpload)
        ));
    }

    #[test]
    fn complete_checks_named_part_checksums_and_accepts_missing_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = FsBackend::open(dir.path()).expect("open");
        s.create_bucket("b").expect("bucket");
        let options = UploadOptions {
            checksum: Some(ChecksumAlgo::Sha256),
            ..Default::default()
        };
        let id = s.create_upload("b", "k", options).expect("create");
        let mut w = s
            .create_part_write(
                "b",
                "k",
                &id,
                1,
                WriteOptions {
                    compute: Some(ChecksumAlgo::Sha256),
                    ..Default::default()
                },
            )
            .expect("part");
        w.append(b"only part").expect("write");
        let p1 = w.commit().expect("commit");
        assert!(p1.checksums.get(ChecksumAlgo::Sha256).is_some());
        let mut wrong = Checksums::default();
        wrong.set(ChecksumAlgo::Sha256, Some("AAAA".into()));
        let named = |checksums: Checksums| CompletedPart {
            part_number: 1,
            etag: p1.etag.clone(),
            checksums,
        };
        assert!(matches!(
            s.complete_upload("b", "k", &id, &[named(wrong)], &Checksums::default()),
            Err(StorageError::InvalidPart)
        ));
        assert!(s.list_objects("b", "").expect("list").is_empty());
        let info = s
            .complete_upload(
                "b",
                "k",
                &id,
                &[named(Checksums::default())],
                &Checksums::default(),
            )
            .expect("a part named without its checksum");
        assert!(info.checksums.get(ChecksumAlgo::Sha256).is_some());
    }

    #[test]
    fn small_parts_and_abort() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = FsBackend::open(dir.path()).expect("open");
        s.create_bucket("b").expect("bucket");
        let id = s
            .create_upload("b", "k", UploadOptions::default())
            .expect("create");
        let p1 = part(&s, &id, 1, b"small");
        let p2 = part(&s, &id, 2, b"small");
        let named = |p: &ObjectInfo, n| CompletedPart {
            part_number: n,
            etag: p.etag.clone(),
            checksums: Checksums::default(),
        };
        assert!(matches!(
            s.complete_upload(
                "b",
                "k",
                &id,
                &[named(&p1, 1), named(&p2, 2)],
                &Checksums::default()
            ),
            Err(StorageError::EntityTooSmall)
        ));
        // A writer open while the upload is aborted cannot bring it back.
        let mut w = s
            .create_part_write("b", "k", &id, 3, WriteOptions::default())
            .expect("part");
        w.append(b"late").expect("write");
        s.abort_upload("b", "k", &id).expect("abort");
        assert!(matches!(w.commit(), Err(StorageError::NoSuchUpload)));
        assert!(matches!(
            s.list_parts("b", "k", &id),
            Err(StorageError::NoSuchUpload)
        ));
        assert!(matches!(
            s.head_object("b", "k"),
            Err(StorageError::NoSuchKey)
        ));
    }
}
