//! Reading an object from the store: one ranged GET per forward run of reads, pinned to the ETag
//! the object had when it was opened: `If-Match` asks the store to refuse a replaced object, and
//! the ETag of the answer is compared too (some stores, s3s-fs among them, ignore `If-Match` on
//! GET), so a replaced object is an error, never a mix of two versions.

use std::io::{self, Read};
use std::ops::Range;

use super::super::{ObjectSource, StorageError};
use super::client::StoreSession;
use hipobj_s3client::http::Body;
use hipobj_s3client::ops::etag;

/// An open stream of the store's bytes, positioned at `pos`.
struct Stream {
    pos: u64,
    body: Box<dyn Read + Send>,
}

pub struct ProxySource {
    store: StoreSession,
    /// Encoded `/bucket/key`.
    path: String,
    etag: String,
    /// The selected range: a GET asks for no byte past its end.
    range: Range<u64>,
    stream: Option<Stream>,
}

fn io_error(e: StorageError) -> io::Error {
    match e {
        StorageError::Io(io) => io,
        other => io::Error::other(format!("backend store GET: {other}")),
    }
}

impl ProxySource {
    pub fn new(store: StoreSession, path: String, etag: String, range: Range<u64>) -> Self {
        ProxySource {
            store,
            path,
            etag,
            range,
            stream: None,
        }
    }

    fn open_at(&mut self, pos: u64) -> io::Result<&mut Stream> {
        let headers = [
            (
                "range".to_string(),
                format!("bytes={}-{}", pos, self.range.end - 1),
            ),
            ("if-match".to_string(), etag::quoted(&self.etag)),
        ];
        let resp = self
            .store
            .send("GET", &self.path, &headers, Body::Empty)
            .map_err(io_error)?;
        if resp.status().as_u16() != 206 && pos != 0 {
            return Err(io::Error::other(format!(
                "backend store ignored the range (status {})",
                resp.status()
            )));
        }
        let answered = resp
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(etag::unquoted);
        if answered.is_some_and(|e| e != self.etag) {
            return Err(io::Error::other(
                "the object was replaced at the store while it was being read",
            ));
        }
        Ok(self.stream.insert(Stream {
            pos,
            body: Box::new(resp),
        }))
    }
}

impl ObjectSource for ProxySource {
    fn read_at(&mut self, buf: &mut [u8], pos: u64) -> io::Result<usize> {
        if pos >= self.range.end || buf.is_empty() {
            return Ok(0);
        }
        let stream = match self.stream.take() {
            Some(s) if s.pos == pos => self.stream.insert(s),
            _ => self.open_at(pos)?,
        };
        let n = stream.body.read(buf)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "backend store ended the object early",
            ));
        }
        stream.pos += n as u64;
        Ok(n)
    }

    fn select(&mut self, range: Range<u64>) {
        if range != self.range {
            self.range = range;
            self.stream = None;
        }
    }
}
