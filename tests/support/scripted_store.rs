//! A test double of an S3 store: an HTTP/1.1 server on 127.0.0.1 whose every answer is the
//! test's script, recording each request it got. One connection at a time, each answer ends its
//! connection (`Connection: close`), so a client's retry is a new connection and a new request.
//! For the answers no real store gives on demand (an error document inside a 200, a throttled
//! completion). An answer is the project's S3 client's [`Answer`], as its clients read it.
#![allow(dead_code)]

use hipobj_s3client::http::Answer;
use hipobj_s3client::reqwest::header::{HeaderMap, HeaderValue};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One request the double received.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    /// The request target as sent: path and query, still percent-encoded.
    pub target: String,
    pub body: Vec<u8>,
}

/// `status` with an XML body.
pub fn xml_answer(status: u16, body: &str) -> Answer {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/xml"));
    Answer {
        status,
        headers,
        body: body.as_bytes().to_vec(),
    }
}

/// A HEAD's answer: `content-length` and `etag` of an object, no body.
pub fn head_answer(len: u64, etag: &str) -> Answer {
    let mut headers = HeaderMap::new();
    headers.insert("content-length", HeaderValue::from(len));
    headers.insert(
        "etag",
        HeaderValue::from_str(etag).expect("an ETag header value"),
    );
    Answer {
        status: 200,
        headers,
        body: Vec::new(),
    }
}

type Script = Box<dyn FnMut(&Request) -> Answer + Send>;

/// The running double; stopped when dropped.
pub struct ScriptedStore {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    server: Option<JoinHandle<()>>,
}

impl ScriptedStore {
    /// Serve every request with `script`'s answer to it.
    pub fn start(script: impl FnMut(&Request) -> Answer + Send + 'static) -> ScriptedStore {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the store double");
        let addr = listener.local_addr().expect("its address");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let server = {
            let (requests, stop) = (Arc::clone(&requests), Arc::clone(&stop));
            let script: Script = Box::new(script);
            std::thread::spawn(move || serve(listener, script, &requests, &stop))
        };
        ScriptedStore {
            addr,
            requests,
            stop,
            server: Some(server),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for ScriptedStore {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept.
        let _ = TcpStream::connect(self.addr);
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
    }
}

fn serve(
    listener: TcpListener,
    mut script: Script,
    requests: &Mutex<Vec<Request>>,
    stop: &AtomicBool,
) {
    for conn in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(conn) = conn else { continue };
        let Some(request) = read_request(&conn) else {
            continue;
        };
        let answer = script(&request);
        requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(request);
        let _ = write_answer(&conn, &answer);
    }
}

/// The request line, headers and `content-length` body of one request.
fn read_request(conn: &TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut words = line.split_whitespace();
    let (method, target) = (words.next()?.to_owned(), words.next()?.to_owned());
    let mut len = 0usize;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                len = value.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        target,
        body,
    })
}

fn write_answer(mut conn: &TcpStream, answer: &Answer) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} Scripted\r\nconnection: close\r\n",
        answer.status
    );
    for (name, value) in &answer.headers {
        let value = value.to_str().unwrap_or_default();
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !answer.headers.contains_key("content-length") {
        head.push_str(&format!("content-length: {}\r\n", answer.body.len()));
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes())?;
    conn.write_all(&answer.body)?;
    conn.flush()
}
