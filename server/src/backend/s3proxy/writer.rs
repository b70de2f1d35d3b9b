//! Writing an object (or a part) into the store while its bytes arrive: a thread runs one PUT
//! whose body is fed, chunk by chunk, through a small bounded channel (at most
//! [`CHUNKS_IN_FLIGHT`] chunks held). The length must be known up front (`Content-Length`, the
//! token's length). The body's last byte is held back until `commit`: an abort, a drop or a
//! short write cuts the body off before it is complete, so the PUT fails at the store, which
//! then keeps nothing (an older object of the key stays as it was).

use std::io::{self, Read};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;
use std::time::SystemTime;

use super::super::{ObjectInfo, ObjectMeta, ObjectWrite, StorageError, StorageResult};
use super::client::StoreSession;
use hipobj_s3client::http::Body;
use hipobj_s3client::ops::etag;

/// Chunks queued between the data path and the store's socket.
const CHUNKS_IN_FLIGHT: usize = 4;

/// What the PUT thread returns: the store's ETag (without quotes).
type PutResult = StorageResult<String>;

/// What the data path sends to the PUT thread.
enum Feed {
    Bytes(Vec<u8>),
    /// Every byte was written and the caller commits: the body may end.
    Commit,
}

/// The body of the PUT: exactly `len` bytes from the channel, the last one only after
/// [`Feed::Commit`]; else an error (the store must not take a cut-off body for an object).
struct ChannelBody {
    rx: Receiver<Feed>,
    chunk: Vec<u8>,
    at: usize,
    delivered: u64,
    expected: u64,
    committed: bool,
}

fn aborted() -> io::Error {
    // Not `Interrupted`: readers retry on that kind, and this one never recovers.
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "upload aborted before its last byte",
    )
}

impl ChannelBody {
    fn next(&mut self) -> io::Result<Feed> {
        self.rx.recv().map_err(|_| aborted())
    }

    /// Wait for the commit; anything else (more bytes, the writer gone) aborts the body.
    fn await_commit(&mut self) -> io::Result<()> {
        if self.committed {
            return Ok(());
        }
        match self.next()? {
            Feed::Commit => {
                self.committed = true;
                Ok(())
            }
            Feed::Bytes(_) => Err(io::Error::other("more bytes than the announced length")),
        }
    }
}

impl Read for ChannelBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.delivered == self.expected {
            self.await_commit()?;
            return Ok(0);
        }
        while self.at == self.chunk.len() {
            match self.next()? {
                Feed::Bytes(c) => {
                    self.chunk = c;
                    self.at = 0;
                }
                Feed::Commit => return Err(io::Error::other("commit before the last byte")),
            }
        }
        let n = (self.chunk.len() - self.at).min(buf.len());
        if self.delivered + n as u64 == self.expected {
            self.await_commit()?;
        }
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        self.delivered += n as u64;
        Ok(n)
    }
}

/// Where the bytes go: `PUT target` (an object, or `?partNumber=N&uploadId=ID`).
pub struct Target {
    pub key: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub meta: ObjectMeta,
}

/// The PUT request, before it is sent.
struct PendingPut {
    store: StoreSession,
    target: String,
    headers: Vec<(String, String)>,
}

pub struct StreamingPut {
    key: String,
    meta: ObjectMeta,
    expected: u64,
    written: u64,
    /// The request not sent yet: the PUT starts with the first byte (or the commit of an empty
    /// object), so a writer dropped before any byte (a request answered 428) costs the store
    /// nothing.
    pending: Option<PendingPut>,
    tx: Option<SyncSender<Feed>>,
    put: Option<JoinHandle<PutResult>>,
}

impl StreamingPut {
    /// A PUT of `len` bytes to `to`, started by the first write.
    pub fn new(store: StoreSession, to: Target, len: u64) -> StreamingPut {
        let Target {
            key,
            target,
            headers,
            meta,
        } = to;
        StreamingPut {
            key,
            meta,
            expected: len,
            written: 0,
            pending: Some(PendingPut {
                store,
                target,
                headers,
            }),
            tx: None,
            put: None,
        }
    }

    /// The channel into the running PUT, starting it on first use.
    fn feed(&mut self) -> io::Result<&SyncSender<Feed>> {
        if let Some(PendingPut {
            store,
            target,
            headers,
        }) = self.pending.take()
        {
            let (tx, rx) = sync_channel::<Feed>(CHUNKS_IN_FLIGHT);
            let len = self.expected;
            let put = std::thread::Builder::new()
                .name("hipobj-store-put".into())
                .spawn(move || {
                    let body = ChannelBody {
                        rx,
                        chunk: Vec::new(),
                        at: 0,
                        delivered: 0,
                        expected: len,
                        committed: false,
                    };
                    let payload = Body::Stream {
                        len,
                        reader: Box::new(body),
                    };
                    let resp = store.send("PUT", &target, &headers, payload)?;
                    let answered = resp.headers().get("etag").and_then(|v| v.to_str().ok());
                    Ok(etag::unquoted(answered.unwrap_or_default()).to_string())
                })?;
            self.tx = Some(tx);
            self.put = Some(put);
        }
        self.tx
            .as_ref()
            .ok_or_else(|| io::Error::other("store PUT already ended"))
    }

    fn join(&mut self) -> PutResult {
        self.tx = None;
        match self.put.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(StorageError::Io(io::Error::other(
                "store PUT thread panicked",
            ))),
            None => Err(StorageError::Io(io::Error::other(
                "store PUT already ended",
            ))),
        }
    }
}

impl ObjectWrite for StreamingPut {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        if offset != self.written {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the store is written in order only",
            ));
        }
        if self.written + data.len() as u64 > self.expected {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "more bytes than the announced length",
            ));
        }
        if self.feed()?.send(Feed::Bytes(data.to_vec())).is_err() {
            // The PUT thread ended early: its error says why.
            let why = match self.join() {
                Err(e) => e.to_string(),
                Ok(_) => "store answered before the last byte".into(),
            };
            return Err(io::Error::other(why));
        }
        self.written += data.len() as u64;
        Ok(())
    }

    fn len(&self) -> u64 {
        self.written
    }

    fn commit(mut self: Box<Self>) -> StorageResult<ObjectInfo> {
        if self.written != self.expected {
            let short = format!("{} of {} bytes written", self.written, self.expected);
            self.abort_now();
            return Err(StorageError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                short,
            )));
        }
        let sent = self.feed()?.send(Feed::Commit).is_ok();
        let etag = self.join()?;
        if !sent {
            return Err(StorageError::Io(io::Error::other(
                "the store's PUT ended before the commit",
            )));
        }
        Ok(ObjectInfo {
            key: std::mem::take(&mut self.key),
            size: self.expected,
            etag,
            last_modified: SystemTime::now(),
            meta: std::mem::take(&mut self.meta),
            checksums: Default::default(),
            parts: None,
            part_sizes: Vec::new(),
            part_checksums: Vec::new(),
        })
    }

    fn abort(mut self: Box<Self>) {
        self.abort_now();
    }
}

impl StreamingPut {
    /// Cut the body off; the PUT fails at the store (nothing stored) and its thread ends.
    fn abort_now(&mut self) {
        self.pending = None;
        if self.put.is_some() {
            let _ = self.join();
        }
    }
}

impl Drop for StreamingPut {
    fn drop(&mut self) {
        self.abort_now();
    }
}
