//! The sidecar stored beside each object and part: its ETag, metadata and checksums, tied to the
//! exact file they describe by inode and size. A reader whose opened file has another inode or
//! size (a write raced it) recomputes the MD5 and reports no metadata rather than wrong metadata.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::Path;

use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};

use super::{Checksums, ObjectMeta};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Sidecar {
    pub ino: u64,
    pub size: u64,
    pub etag: String,
    #[serde(default)]
    pub meta: ObjectMeta,
    #[serde(default)]
    pub checksums: Checksums,
    #[serde(default)]
    pub parts: Option<u32>,
    #[serde(default)]
    pub part_sizes: Vec<u64>,
    #[serde(default)]
    pub part_checksums: Vec<Checksums>,
}

impl Sidecar {
    /// The sidecar at `path` if it describes a file with this inode and size.
    pub fn load_matching(path: &Path, ino: u64, size: u64) -> Option<Sidecar> {
        let text = fs::read(path).ok()?;
        let side: Sidecar = serde_json::from_slice(&text).ok()?;
        (side.ino == ino && side.size == size).then_some(side)
    }

    /// Write to `tmp`, then rename over `path` (readers see the old or the new one).
    pub fn store(&self, tmp: &Path, path: &Path) -> io::Result<()> {
        let text = serde_json::to_vec(self).map_err(io::Error::other)?;
        fs::write(tmp, text)?;
        fs::rename(tmp, path).inspect_err(|_| {
            let _ = fs::remove_file(tmp);
        })
    }
}

/// MD5 hex of a file's bytes from the current position to the end.
pub fn md5_of(file: &mut File) -> io::Result<String> {
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
