//! A small blocking S3 client of our own (plain HTTP/1.1, SigV4-signed as the test identity, the
//! token header included in the signature) and the `S3Ops` adapter that hipObject transfers call
//! back into. Shared by the end-to-end tests, the demo and the benchmarks (`#[path]`-included).
#![allow(dead_code)]

#[path = "sigv4.rs"]
pub mod sigv4;

use hipobj::runtime::S3Ops;
use hipobj::token::Token;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

/// The address an HTTP request carrying `token` is sent from: the NIC address of the token's
/// IPv4-mapped GID (what `hipObjTokenClientNic` returns), so that the server's GID == peer check
/// holds (docs/protocol.md 9.4). `None` for a token without one.
pub fn token_nic(token: &str) -> Option<IpAddr> {
    Token::decode_hex(token.as_bytes())
        .ok()?
        .client_nic_ipv4()
        .map(IpAddr::V4)
}

/// A TCP connection to `addr`, from `local` (port chosen by the kernel) when given.
pub fn connect_from(
    local: Option<IpAddr>,
    addr: SocketAddr,
    timeout: Duration,
) -> std::io::Result<TcpStream> {
    let Some(local) = local else {
        return TcpStream::connect_timeout(&addr, timeout);
    };
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.bind(&SocketAddr::new(local, 0).into())?;
    socket.connect_timeout(&addr.into(), timeout)?;
    Ok(socket.into())
}

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

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
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
        self.request_from(None, method, path, headers, body)
    }

    /// One request on a fresh connection from `local` (the NIC address of a token).
    pub fn request_from(
        &self,
        local: Option<IpAddr>,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Response> {
        let mut stream = self.send_from(local, method, path, headers, body)?;
        read_response(&mut BufReader::new(&mut stream), method == "HEAD")
    }

    /// Send one request on a fresh connection from `local`; the response is left unread on the
    /// returned stream (tests that act while the server works on it).
    pub fn send_from(
        &self,
        local: Option<IpAddr>,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<TcpStream> {
        let mut stream = connect_from(local, self.addr, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(self.timeout))?;
        stream.set_write_timeout(Some(self.timeout))?;
        stream.set_nodelay(true)?;
        let head = self.request_head(method, path, headers, body, false);
        stream.write_all(head.as_bytes())?;
        stream.write_all(body)?;
        Ok(stream)
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

    /// A keep-alive connection to this endpoint, opened on first use; from the NIC address of
    /// the first request's token when it carries one (as our callbacks bind their sockets).
    pub fn keep_alive(&self) -> KeepAlive {
        KeepAlive {
            s3: *self,
            conn: None,
        }
    }

    /// The request line and headers, signed when the endpoint has a signer.
    fn request_head(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        keep_alive: bool,
    ) -> String {
        let connection = if keep_alive { "keep-alive" } else { "close" };
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
            "{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: {connection}\r\nContent-Length: {}\r\n",
            body.len()
        );
        let signature = signature.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        for (k, v) in headers.iter().copied().chain(signature) {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        head
    }
}

/// One persistent HTTP/1.1 connection, as an application's own keep-alive client keeps it.
pub struct KeepAlive {
    s3: S3,
    conn: Option<BufReader<TcpStream>>,
}

impl KeepAlive {
    /// One request on this connection (reconnecting once if the server closed it).
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Response> {
        let reused = self.conn.is_some();
        match self.try_request(method, path, headers, body) {
            Err(_) if reused => {
                self.conn = None;
                self.try_request(method, path, headers, body)
            }
            other => other,
        }
    }

    fn try_request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Response> {
        if self.conn.is_none() {
            let local = headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("x-amz-rdma-token"))
                .and_then(|(_, token)| token_nic(token));
            let stream = connect_from(local, self.s3.addr, Duration::from_secs(5))?;
            stream.set_read_timeout(Some(self.s3.timeout))?;
            stream.set_write_timeout(Some(self.s3.timeout))?;
            stream.set_nodelay(true)?;
            self.conn = Some(BufReader::new(stream));
        }
        let Some(conn) = self.conn.as_mut() else {
            return Err(std::io::Error::other("no connection"));
        };
        let head = self.s3.request_head(method, path, headers, body, true);
        // One write for head and body: the request leaves in one segment when it fits.
        let mut out = Vec::with_capacity(head.len() + body.len());
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(body);
        let result = conn
            .get_mut()
            .write_all(&out)
            .and_then(|()| read_response(conn, method == "HEAD"));
        let close = result
            .as_ref()
            .map(|r| {
                r.header("connection")
                    .is_some_and(|v| v.eq_ignore_ascii_case("close"))
            })
            .unwrap_or(true);
        if close {
            self.conn = None;
        }
        result
    }
}

/// Read one HTTP/1.1 response.
pub fn read_response(r: &mut impl BufRead, head_only: bool) -> std::io::Result<Response> {
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

/// Rewrites a token before it is sent.
pub type TokenFilter<'a> = Box<dyn FnMut(&str) -> String + 'a>;

/// The application side of one hipObject transfer: the S3 request that carries the token.
pub struct RdmaRequest<'a> {
    s3: &'a S3,
    /// Send over this keep-alive connection instead of a fresh one per request.
    conn: Option<&'a mut KeepAlive>,
    method: &'static str,
    path: String,
    range: Option<String>,
    /// More request headers (name, value), sent with every request of the transfer.
    headers: Vec<(String, String)>,
    reply: Option<String>,
    /// Requests sent so far (a first transfer on a connection takes two: 428, then 200).
    pub requests: usize,
    /// Every reply header seen, in order.
    pub replies: Vec<String>,
    /// HTTP status of the last response.
    pub last_status: u16,
    /// `ETag` of the last response (an UploadPart's part ETag), if it had one.
    pub etag: Option<String>,
    /// Tokens sent, in order.
    pub tokens: Vec<String>,
    /// Make the next `send_request` fail (tests of callback failures).
    pub fail_send: bool,
    /// Why the last `send_request` failed (HTTP status and body, or the I/O error).
    pub failure: Option<String>,
    /// Run this inside `send_request` before the HTTP request (tests of re-entry).
    pub on_send: Option<Box<dyn FnMut() + 'a>>,
    /// Replace the token before it is sent (attack tests: another rkey, another address).
    pub token_filter: Option<TokenFilter<'a>>,
    /// Time spent in the HTTP exchanges (request written to response read), all requests.
    pub http: std::time::Duration,
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
            conn: None,
            method,
            path: format!("/{bucket}/{key}"),
            range: None,
            headers: Vec::new(),
            reply: None,
            requests: 0,
            replies: Vec::new(),
            last_status: 0,
            etag: None,
            tokens: Vec::new(),
            fail_send: false,
            failure: None,
            on_send: None,
            token_filter: None,
            http: std::time::Duration::ZERO,
        }
    }

    /// Send every request of this transfer over `conn` (keep-alive).
    pub fn over(mut self, conn: &'a mut KeepAlive) -> Self {
        self.conn = Some(conn);
        self
    }

    /// Send `name: value` with every request of the transfer.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
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
        let token = match self.token_filter.as_mut() {
            Some(f) => f(token),
            None => token.to_string(),
        };
        let token = token.as_str();
        self.tokens.push(token.to_string());
        let mut headers = vec![("x-amz-rdma-token", token)];
        if let Some(r) = &self.range {
            headers.push(("Range", r.as_str()));
        }
        headers.extend(self.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        let started = std::time::Instant::now();
        let sent = match self.conn.as_mut() {
            Some(conn) => conn.request(self.method, &self.path, &headers, &[]),
            None => self
                .s3
                .request_from(token_nic(token), self.method, &self.path, &headers, &[]),
        };
        self.http += started.elapsed();
        match sent {
            Ok(resp) => {
                self.last_status = resp.status;
                self.etag = resp.header("etag").map(str::to_string);
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
