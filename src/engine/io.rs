//! The local side of a copy: positional reads and writes, so parts land in any order and no file
//! is ever read whole.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Bytes an upload reads, by offset.
pub trait Source: Sync {
    /// Fill `buf` with the bytes at `pos` (all of them, or an error).
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()>;
}

/// Where a download's bytes go, by offset.
pub trait Sink: Sync {
    /// Write all of `data` at `pos`.
    fn write_at(&self, data: &[u8], pos: u64) -> io::Result<()>;
}

/// `len` bytes of a file from offset `start` (a `--range` of it, or all of it).
pub struct FileSource {
    file: File,
    start: u64,
}

impl FileSource {
    pub fn open(path: &Path, start: u64) -> io::Result<FileSource> {
        Ok(FileSource {
            file: File::open(path)?,
            start,
        })
    }

    /// The file's size.
    pub fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
}

impl Source for FileSource {
    fn read_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, self.start + pos)
    }
}

/// A download into a temporary file beside `path`, renamed over `path` by [`FileSink::finish`]
/// (as boto3's `download_file` does); removed if the copy does not finish.
pub struct FileSink {
    file: File,
    temp: PathBuf,
    path: PathBuf,
    finished: bool,
}

impl FileSink {
    /// A sparse file of `len` bytes to fill.
    pub fn create(path: &Path, len: u64) -> io::Result<FileSink> {
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        let mut tag = [0u8; 4];
        crate::random::fill(&mut tag);
        name.push(format!(".hipobj-{}", hex::encode(tag)));
        let temp = path.with_file_name(name);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        let sink = FileSink {
            file,
            temp,
            path: path.to_path_buf(),
            finished: false,
        };
        sink.file.set_len(len)?;
        Ok(sink)
    }

    /// Flush and put the file in its place.
    pub fn finish(mut self) -> io::Result<()> {
        self.file.sync_data()?;
        std::fs::rename(&self.temp, &self.path)?;
        self.finished = true;
        Ok(())
    }
}

impl Sink for FileSink {
    fn write_at(&self, data: &[u8], pos: u64) -> io::Result<()> {
        self.file.write_all_at(data, pos)
    }
}

impl Drop for FileSink {
    fn drop(&mut self) {
        if !self.finished {
            if let Err(e) = std::fs::remove_file(&self.temp) {
                tracing::warn!("removing {}: {e}", self.temp.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sink_lands_out_of_order_and_appears_only_when_finished() {
        let dir = std::env::temp_dir().join(format!("hipobj-io-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out");
        let sink = FileSink::create(&path, 10).unwrap();
        sink.write_at(b"56789", 5).unwrap();
        sink.write_at(b"01234", 0).unwrap();
        assert!(!path.exists());
        sink.finish().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"0123456789");

        let src = FileSource::open(&path, 2).unwrap();
        let mut buf = [0u8; 3];
        src.read_at(&mut buf, 4).unwrap();
        assert_eq!(&buf, b"678");
        assert!(src.read_at(&mut buf, 6).is_err(), "past the end");

        let abandoned = FileSink::create(&dir.join("gone"), 4).unwrap();
        drop(abandoned);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
