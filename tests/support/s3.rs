//! A small blocking S3 client of our own (plain HTTP/1.1, SigV4-signed as the test identity, the
//! token header included in the signature) and the `S3Ops` adapter that hipObject transfers call
//! back into. Shared by the end-to-end tests, the demo and the benchmarks (`#[path]`-included).
#![allow(dead_code)]

#[path = "sigv4.rs"]
pub mod sigv4;

use hipobj::runtime::S3Ops;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One HTTP response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// An S3 endpoint.
#[derive(Clone, Copy, Debug)]
pub struct S3 {
    pub addr: SocketAddr,
    /// Limit on waiting for a response.
    pub timeout: Duration,
    /// Requests are signed with this identity (`None`: unsigned).
    pub signer: Option<sigv4::Signer>,
}

impl S3 {
    /// An endpoint whose requests are signed as the test identity (the servers of the tests
    /// are started with `sigv4::TEST_CREDENTIALS`).
    pub fn new(addr: SocketAddr) -> S3 {
        S3 {
            addr,
            timeout: Duration::from_secs(120),
            signer: Some(sigv4::TEST_SIGNER),
        }
    }

    /// One request on a fresh connection.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Response> {
        let mut stream = TcpStream::connect_timeout(&self.addr, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(self.timeout))?;
        stream.set_write_timeout(Some(self.timeout))?;
        stream.set_nodelay(true)?;
        let host = self.addr.to_string();
        let (target, signature) = match &self.signer {
            Some(signer) => {
                let signed =
                    signer.sign(sigv4::Placement::Header, method, &host, path, headers, body);
                (signed.target, signed.headers)
            }
            None => (path.to_string(), Vec::new()),
        };
        let mut head = format!(
            "{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        for (k, v) in &signature {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes())?;
        stream.write_all(body)?;
        read_response(&mut BufReader::new(stream), method == "HEAD")
    }

    pub fn create_bucket(&self, bucket: &str) -> std::io::Result<Response> {
        self.request("PUT", &format!("/{bucket}"), &[], &[])
    }

    pub fn put(&self, bucket: &str, key: &str, body: &[u8]) -> std::io::Result<Response> {
        self.request("PUT", &format!("/{bucket}/{key}"), &[], body)
    }

    pub fn get(&self, bucket: &str, key: &str) -> std::io::Result<Response> {
        self.request("GET", &format!("/{bucket}/{key}"), &[], &[])
    }
}

fn read_response(r: &mut impl BufRead, head_only: bool) -> std::io::Result<Response> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad status line"))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let find = |n: &str| {
        headers
            .iter()
            .find(|(k, _): &&(String, String)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if !head_only {
        if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            loop {
                line.clear();
                r.read_line(&mut line)?;
                let n = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|_| bad("bad chunk"))?;
                if n == 0 {
                    line.clear();
                    r.read_line(&mut line)?;
                    break;
                }
                let start = body.len();
                body.resize(start + n, 0);
                r.read_exact(&mut body[start..])?;
                line.clear();
                r.read_line(&mut line)?;
            }
        } else if let Some(n) = find("content-length").and_then(|v| v.parse::<usize>().ok()) {
            body.resize(n, 0);
            r.read_exact(&mut body)?;
        } else {
            r.read_to_end(&mut body)?;
        }
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// The application side of one hipObject transfer: the S3 request that carries the token.
pub struct RdmaRequest<'a> {
    s3: &'a S3,
    method: &'static str,
    path: String,
    range: Option<String>,
    reply: Option<String>,
    /// Requests sent so far (a first transfer on a connection takes two: 428, then 200).
    pub requests: usize,
    /// Every reply header seen, in order.
    pub replies: Vec<String>,
    /// HTTP status of the last response.
    pub last_status: u16,
    /// Tokens sent, in order.
    pub tokens: Vec<String>,
    /// Make the next `send_request` fail (tests of callback failures).
    pub fail_send: bool,
    /// Why the last `send_request` failed (HTTP status and body, or the I/O error).
    pub failure: Option<String>,
    /// Run this inside `send_request` before the HTTP request (tests of re-entry).
    pub on_send: Option<Box<dyn FnMut() + 'a>>,
}

impl<'a> RdmaRequest<'a> {
    pub fn get(s3: &'a S3, bucket: &str, key: &str) -> RdmaRequest<'a> {
        Self::new(s3, "GET", bucket, key)
    }

    pub fn put(s3: &'a S3, bucket: &str, key: &str) -> RdmaRequest<'a> {
        Self::new(s3, "PUT", bucket, key)
    }

    fn new(s3: &'a S3, method: &'static str, bucket: &str, key: &str) -> RdmaRequest<'a> {
        RdmaRequest {
            s3,
            method,
            path: format!("/{bucket}/{key}"),
            range: None,
            reply: None,
            requests: 0,
            replies: Vec::new(),
            last_status: 0,
            tokens: Vec::new(),
            fail_send: false,
            failure: None,
            on_send: None,
        }
    }

    /// `Range: bytes=first-last` (inclusive).
    pub fn with_range(mut self, first: u64, last: u64) -> Self {
        self.range = Some(format!("bytes={first}-{last}"));
        self
    }
}

impl S3Ops for RdmaRequest<'_> {
    fn send_request(&mut self, token: &str) -> i32 {
        if let Some(f) = self.on_send.as_mut() {
            f();
        }
        if self.fail_send {
            return -1;
        }
        self.requests += 1;
        self.tokens.push(token.to_string());
        let mut headers = vec![("x-amz-rdma-token", token)];
        if let Some(r) = &self.range {
            headers.push(("Range", r.as_str()));
        }
        match self.s3.request(self.method, &self.path, &headers, &[]) {
            Ok(resp) => {
                self.last_status = resp.status;
                self.reply = resp.header("x-amz-rdma-reply").map(str::to_string);
                if let Some(r) = &self.reply {
                    self.replies.push(r.clone());
                }
                if self.reply.is_some() {
                    0
                } else {
                    let body = String::from_utf8_lossy(&resp.body[..resp.body.len().min(160)])
                        .into_owned();
                    self.failure = Some(format!(
                        "HTTP {} without x-amz-rdma-reply: {body}",
                        resp.status
                    ));
                    -1
                }
            }
            Err(e) => {
                self.failure = Some(format!("I/O: {e}"));
                -1
            }
        }
    }

    fn recv_reply(&mut self, buf: &mut [u8]) -> Result<usize, i32> {
        let r = self.reply.take().ok_or(-1)?;
        let b = r.as_bytes();
        if b.len() > buf.len() {
            return Err(-2);
        }
        buf[..b.len()].copy_from_slice(b);
        Ok(b.len())
    }
}
