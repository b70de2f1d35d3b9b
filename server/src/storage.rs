//! The filesystem backend: one directory per bucket, one file per object.
//!
//! Layout under the data directory:
//! - `<bucket>/<encoded key>`: the object's bytes. Keys are percent-encoded into one file name
//!   (bytes outside `[A-Za-z0-9_.~-]`, and a leading `.`, become `%XX`), so keys like `a` and
//!   `a/b` can both exist and no stored name starts with a dot.
//! - `<bucket>/.meta/<encoded key>`: `<inode> <size> <md5 hex>`, the ETag of that exact file.
//!   A reader whose opened file has another inode or size recomputes the MD5 (a write raced it).
//! - `.tmp/`: objects being written; a commit renames the file into place (atomic replace).
//!
//! All calls are blocking; the async layer runs them on tokio's blocking pool, RDMA workers call
//! them directly on their own threads.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use md5::{Digest, Md5};

const META_DIR: &str = ".meta";
const TMP_DIR: &str = ".tmp";
/// Longest file name most filesystems take.
const MAX_NAME: usize = 255;

/// Why a storage call failed.
#[derive(Debug)]
pub enum StorageError {
    NoSuchBucket,
    NoSuchKey,
    BucketAlreadyExists,
    BucketNotEmpty,
    /// The key is empty or its encoded form is longer than a file name may be.
    InvalidKey,
    Io(io::Error),
}

impl std::fmt::Display for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StorageError::NoSuchBucket => f.write_str("no such bucket"),
            StorageError::NoSuchKey => f.write_str("no such key"),
            StorageError::BucketAlreadyExists => f.write_str("bucket already exists"),
            StorageError::BucketNotEmpty => f.write_str("bucket not empty"),
            StorageError::InvalidKey => f.write_str("invalid or too long key"),
            StorageError::Io(e) => write!(f, "i/o error: {e}"),
        }
    }
}

impl std::error::Error for StorageError {}

impl From<io::Error> for StorageError {
    fn from(e: io::Error) -> Self {
        StorageError::Io(e)
    }
}

pub type StorageResult<T> = Result<T, StorageError>;

/// What HEAD and listings report about an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    pub key: String,
    pub size: u64,
    /// MD5 of the content, lowercase hex, without quotes.
    pub etag: String,
    pub last_modified: SystemTime,
}

/// An object opened for reading: the file stays valid even if the key is replaced meanwhile.
pub struct OpenObject {
    pub file: File,
    pub info: ObjectInfo,
}

/// The filesystem store.
#[derive(Debug)]
pub struct Storage {
    root: PathBuf,
    tmp_seq: AtomicU64,
}

impl Storage {
    /// Use `root` (created if missing) as the data directory.
    pub fn open(root: &Path) -> io::Result<Storage> {
        fs::create_dir_all(root.join(TMP_DIR))?;
        Ok(Storage {
            root: root.to_path_buf(),
            tmp_seq: AtomicU64::new(0),
        })
    }

    fn bucket_dir(&self, bucket: &str) -> StorageResult<PathBuf> {
        // s3s validates bucket names (lowercase, digits, '-', '.', no leading '.'); check again so
        // no name can escape the data directory.
        if bucket.is_empty() || bucket.starts_with('.') || bucket.contains('/') {
            return Err(StorageError::NoSuchBucket);
        }
        Ok(self.root.join(bucket))
    }

    pub(crate) fn existing_bucket_dir(&self, bucket: &str) -> StorageResult<PathBuf> {
        let dir = self.bucket_dir(bucket)?;
        if dir.is_dir() {
            Ok(dir)
        } else {
            Err(StorageError::NoSuchBucket)
        }
    }

    pub fn create_bucket(&self, bucket: &str) -> StorageResult<()> {
        let dir = self.bucket_dir(bucket)?;
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(StorageError::BucketAlreadyExists)
            }
            Err(e) => return Err(e.into()),
        }
        fs::create_dir_all(dir.join(META_DIR))?;
        Ok(())
    }

    pub fn head_bucket(&self, bucket: &str) -> StorageResult<()> {
        self.existing_bucket_dir(bucket).map(|_| ())
    }

    pub fn delete_bucket(&self, bucket: &str) -> StorageResult<()> {
        let dir = self.existing_bucket_dir(bucket)?;
        if !self.list_keys(&dir)?.is_empty() {
            return Err(StorageError::BucketNotEmpty);
        }
        fs::remove_dir_all(dir)?;
        Ok(())
    }

    /// Bucket names with their creation (directory) time, sorted by name.
    pub fn list_buckets(&self) -> StorageResult<Vec<(String, SystemTime)>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.root)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let meta = entry.metadata()?;
            if name.starts_with('.') || !meta.is_dir() {
                continue;
            }
            out.push((name, meta.modified().unwrap_or(SystemTime::UNIX_EPOCH)));
        }
        out.sort();
        Ok(out)
    }

    /// Open an object for reading.
    pub fn open_object(&self, bucket: &str, key: &str) -> StorageResult<OpenObject> {
        let dir = self.existing_bucket_dir(bucket)?;
        let name = encode_key(key)?;
        let mut file = match File::open(dir.join(&name)) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(StorageError::NoSuchKey),
            Err(e) => return Err(e.into()),
        };
        let meta = file.metadata()?;
        let etag = match read_meta(&dir.join(META_DIR).join(&name)) {
            Some((ino, size, etag)) if ino == meta.ino() && size == meta.len() => etag,
            _ => {
                let etag = md5_of(&mut file)?;
                // Back to the start for the caller.
                file.seek(SeekFrom::Start(0))?;
                etag
            }
        };
        let info = ObjectInfo {
            key: key.to_string(),
            size: meta.len(),
            etag,
            last_modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        };
        Ok(OpenObject { file, info })
    }

    pub fn object_info(&self, bucket: &str, key: &str) -> StorageResult<ObjectInfo> {
        self.open_object(bucket, key).map(|o| o.info)
    }

    /// Start writing an object; nothing is visible until [`ObjectWriter::commit`].
    pub fn begin_put(&self, bucket: &str, key: &str) -> StorageResult<ObjectWriter> {
        let dir = self.existing_bucket_dir(bucket)?;
        let name = encode_key(key)?;
        let seq = self.tmp_seq.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .root
            .join(TMP_DIR)
            .join(format!("{}-{seq}", std::process::id()));
        let file = File::create(&tmp)?;
        Ok(ObjectWriter {
            file,
            tmp: Some(tmp),
            dest: dir.join(&name),
            meta: dir.join(META_DIR).join(&name),
            key: key.to_string(),
            md5: Md5::new(),
            len: 0,
        })
    }

    /// Delete an object. A missing key is not an error (S3 semantics); a missing bucket is.
    pub fn delete_object(&self, bucket: &str, key: &str) -> StorageResult<()> {
        let dir = self.existing_bucket_dir(bucket)?;
        let name = encode_key(key)?;
        for path in [dir.join(&name), dir.join(META_DIR).join(&name)] {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// All objects of a bucket whose key starts with `prefix`, sorted by key.
    pub fn list_objects(&self, bucket: &str, prefix: &str) -> StorageResult<Vec<ObjectInfo>> {
        let dir = self.existing_bucket_dir(bucket)?;
        let mut out = Vec::new();
        for key in self.list_keys(&dir)? {
            if !key.starts_with(prefix) {
                continue;
            }
            match self.object_info(bucket, &key) {
                Ok(info) => out.push(info),
                // Deleted since the directory was read.
                Err(StorageError::NoSuchKey) => {}
                Err(e) => return Err(e),
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    fn list_keys(&self, dir: &Path) -> StorageResult<Vec<String>> {
        let mut keys = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') || !entry.file_type()?.is_file() {
                continue;
            }
            if let Some(key) = decode_key(name) {
                keys.push(key);
            }
        }
        Ok(keys)
    }
}

/// An object being written; dropped without commit, it leaves nothing behind.
pub struct ObjectWriter {
    file: File,
    tmp: Option<PathBuf>,
    dest: PathBuf,
    meta: PathBuf,
    key: String,
    md5: Md5,
    len: u64,
}

impl ObjectWriter {
    /// Append bytes.
    pub fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.file.write_all(data)?;
        self.md5.update(data);
        self.len += data.len() as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Make the object visible under its key (replacing any older one).
    pub fn commit(mut self) -> StorageResult<ObjectInfo> {
        self.file.flush()?;
        let meta = self.file.metadata()?;
        let etag = hex::encode(self.md5.clone().finalize());
        let tmp = self
            .tmp
            .take()
            .ok_or(StorageError::Io(io::Error::other("already committed")))?;
        // Meta first: a reader that sees the new meta with the old file notices the inode differs.
        let meta_tmp = tmp.with_extension("meta");
        fs::write(&meta_tmp, format!("{} {} {}", meta.ino(), meta.len(), etag))?;
        let result = fs::rename(&meta_tmp, &self.meta).and_then(|()| fs::rename(&tmp, &self.dest));
        if let Err(e) = result {
            let _ = fs::remove_file(&meta_tmp);
            let _ = fs::remove_file(&tmp);
            return Err(e.into());
        }
        Ok(ObjectInfo {
            key: self.key.clone(),
            size: meta.len(),
            etag,
            last_modified: meta.modified().unwrap_or_else(|_| SystemTime::now()),
        })
    }
}

impl Drop for ObjectWriter {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = fs::remove_file(tmp);
        }
    }
}

fn read_meta(path: &Path) -> Option<(u64, u64, String)> {
    let text = fs::read_to_string(path).ok()?;
    let mut parts = text.split_whitespace();
    let ino = parts.next()?.parse().ok()?;
    let size = parts.next()?.parse().ok()?;
    let etag = parts.next()?.to_string();
    Some((ino, size, etag))
}

fn md5_of(file: &mut File) -> io::Result<String> {
    let mut md5 = Md5::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        md5.update(&buf[..n]);
    }
    Ok(hex::encode(md5.finalize()))
}

fn keeps(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~')
}

/// A key as one file name (see the module doc).
pub fn encode_key(key: &str) -> StorageResult<String> {
    if key.is_empty() {
        return Err(StorageError::InvalidKey);
    }
    let mut out = String::with_capacity(key.len());
    for (i, &b) in key.as_bytes().iter().enumerate() {
        if keeps(b) && !(i == 0 && b == b'.') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.len() > MAX_NAME {
        return Err(StorageError::InvalidKey);
    }
    Ok(out)
}

/// The key a file name stands for; `None` for names this store did not write.
pub fn decode_key(name: &str) -> Option<String> {
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let s = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(s, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// One page of a ListObjectsV2 answer.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ListPage {
    pub objects: Vec<ObjectInfo>,
    pub common_prefixes: Vec<String>,
    pub is_truncated: bool,
    /// The last key or prefix of this page, to continue after (when truncated).
    pub next_after: Option<String>,
}

/// ListObjectsV2 paging over keys sorted ascending, all already starting with `prefix`:
/// skip keys `<= after`, group keys by `delimiter` after the prefix, stop at `max_keys` entries.
pub fn paginate(
    sorted: Vec<ObjectInfo>,
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<&str>,
    max_keys: usize,
) -> ListPage {
    let mut page = ListPage::default();
    let mut count = 0usize;
    for obj in sorted {
        if let Some(after) = after {
            if obj.key.as_str() <= after {
                continue;
            }
        }
        let group = delimiter.filter(|d| !d.is_empty()).and_then(|d| {
            let rest = obj.key.get(prefix.len()..)?;
            rest.find(d)
                .map(|pos| obj.key[..prefix.len() + pos + d.len()].to_string())
        });
        if let Some(group) = group {
            if page.common_prefixes.last() == Some(&group) {
                continue;
            }
            // A continuation that ended inside this group has already listed it.
            if after == Some(group.as_str()) {
                continue;
            }
            if count == max_keys {
                page.is_truncated = true;
                break;
            }
            page.next_after = Some(group.clone());
            page.common_prefixes.push(group);
        } else {
            if count == max_keys {
                page.is_truncated = true;
                break;
            }
            page.next_after = Some(obj.key.clone());
            page.objects.push(obj);
        }
        count += 1;
    }
    if !page.is_truncated {
        page.next_after = None;
    }
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(key: &str) -> ObjectInfo {
        ObjectInfo {
            key: key.into(),
            size: 0,
            etag: String::new(),
            last_modified: SystemTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn key_encoding_round_trips_and_hides_dots() {
        for key in ["a", "a/b", ".meta", "x y%z", "ünï", "..", "a.b"] {
            let name = encode_key(key).expect("encodable");
            assert!(!name.starts_with('.'), "{name}");
            assert!(!name.contains('/'));
            assert_eq!(decode_key(&name).as_deref(), Some(key));
        }
        assert!(matches!(encode_key(""), Err(StorageError::InvalidKey)));
        assert!(matches!(
            encode_key(&"/".repeat(100)),
            Err(StorageError::InvalidKey)
        ));
    }

    #[test]
    fn put_get_delete_round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Storage::open(dir.path()).expect("open");
        assert!(matches!(
            s.begin_put("b", "k"),
            Err(StorageError::NoSuchBucket)
        ));
        s.create_bucket("b").expect("create");
        assert!(matches!(
            s.create_bucket("b"),
            Err(StorageError::BucketAlreadyExists)
        ));
        let mut w = s.begin_put("b", "dir/k").expect("put");
        w.write_all(b"hello ").expect("write");
        w.write_all(b"world").expect("write");
        let info = w.commit().expect("commit");
        assert_eq!(info.size, 11);
        assert_eq!(info.etag, "5eb63bbbe01eeed093cb22bb8f5acdc3");
        let mut o = s.open_object("b", "dir/k").expect("get");
        let mut body = String::new();
        o.file.read_to_string(&mut body).expect("read");
        assert_eq!(body, "hello world");
        assert_eq!(o.info.etag, info.etag);
        // Dropped writer leaves nothing.
        let mut w = s.begin_put("b", "gone").expect("put");
        w.write_all(b"x").expect("write");
        drop(w);
        assert!(matches!(
            s.open_object("b", "gone"),
            Err(StorageError::NoSuchKey)
        ));
        assert_eq!(
            fs::read_dir(dir.path().join(TMP_DIR)).expect("tmp").count(),
            0
        );
        assert!(matches!(
            s.delete_bucket("b"),
            Err(StorageError::BucketNotEmpty)
        ));
        s.delete_object("b", "dir/k").expect("delete");
        s.delete_object("b", "dir/k").expect("delete twice is fine");
        assert!(matches!(
            s.open_object("b", "dir/k"),
            Err(StorageError::NoSuchKey)
        ));
        s.delete_bucket("b").expect("empty bucket deletes");
    }

    #[test]
    fn stale_meta_is_recomputed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Storage::open(dir.path()).expect("open");
        s.create_bucket("b").expect("create");
        let mut w = s.begin_put("b", "k").expect("put");
        w.write_all(b"hello world").expect("write");
        w.commit().expect("commit");
        // Replace the file behind the store's back: the meta no longer matches its inode.
        let path = dir.path().join("b").join("k");
        fs::remove_file(&path).expect("rm");
        fs::write(&path, b"abc").expect("write");
        let info = s.object_info("b", "k").expect("info");
        assert_eq!(info.etag, "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(info.size, 3);
    }

    #[test]
    fn paginate_groups_and_pages() {
        let keys = ["a/1", "a/2", "b", "c/x/1", "d"];
        let all: Vec<ObjectInfo> = keys.iter().map(|k| info(k)).collect();
        let p = paginate(all.clone(), "", Some("/"), None, 1000);
        assert_eq!(p.common_prefixes, vec!["a/", "c/"]);
        assert_eq!(
            p.objects.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(),
            ["b", "d"]
        );
        assert!(!p.is_truncated);

        let p1 = paginate(all.clone(), "", Some("/"), None, 2);
        assert_eq!(p1.common_prefixes, vec!["a/"]);
        assert_eq!(p1.objects.len(), 1);
        assert!(p1.is_truncated);
        assert_eq!(p1.next_after.as_deref(), Some("b"));
        let p2 = paginate(all.clone(), "", Some("/"), p1.next_after.as_deref(), 2);
        assert_eq!(p2.common_prefixes, vec!["c/"]);
        assert_eq!(
            p2.objects
                .iter()
                .map(|o| o.key.as_str())
                .collect::<Vec<_>>(),
            ["d"]
        );
        assert!(!p2.is_truncated);

        // Continuing right after a common prefix skips the rest of its group.
        let p3 = paginate(all.clone(), "", Some("/"), Some("a/"), 10);
        assert_eq!(p3.common_prefixes, vec!["c/"]);

        let under_c: Vec<ObjectInfo> = all
            .into_iter()
            .filter(|o| o.key.starts_with("c/"))
            .collect();
        let p4 = paginate(under_c, "c/", Some("/"), None, 10);
        assert_eq!(p4.common_prefixes, vec!["c/x/"]);
    }
}
