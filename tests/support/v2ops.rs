//! The tests' own hipobj-rc-v2 HTTP side: an `S3OpsV2` over the tests' S3 client (SigV4 as the
//! test identity, every `x-amz-rdma-*` header signed), each control request on a fresh
//! connection from the NIC address of the transfer's token. READY is written and its answer read
//! later, as the split READY exchange requires.
#![allow(dead_code)]

use crate::s3::{read_response, token_nic, Response, S3};
use hipobj::rcv2::client::{FinalReplyV2, PrepareReplyV2, S3OpsV2};
use hipobj::rcv2::{
    CancelRequest, PrepareRequest, ReadyRequest, CANCEL_PATH, PREPARE_PATH, READY_PATH,
};
use std::io::BufReader;
use std::net::{IpAddr, TcpStream};

/// Status a callback reports for an I/O failure.
pub const IO_FAILED: i32 = -1;

/// One transfer's control exchanges with `s3`.
pub struct V2Http {
    pub s3: S3,
    /// The NIC address the requests leave from (from the PREPARE token).
    local: Option<IpAddr>,
    /// READY written, its answer not yet read.
    pending: Option<TcpStream>,
    /// What each step saw, for assertions: ("PREPARE", status) ...
    pub seen: Vec<(&'static str, u16)>,
    pub cancels: usize,
}

impl V2Http {
    pub fn new(s3: S3) -> V2Http {
        V2Http {
            s3,
            local: None,
            pending: None,
            seen: Vec::new(),
            cancels: 0,
        }
    }

    fn post(&self, path: &str, headers: &[(&'static str, String)]) -> std::io::Result<Response> {
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.s3.request_from(self.local, "POST", path, &h, &[])
    }
}

impl S3OpsV2 for V2Http {
    fn send_prepare(&mut self, req: &PrepareRequest) -> Result<PrepareReplyV2, i32> {
        self.local = token_nic(&req.token.encode_hex());
        let r = self.post(PREPARE_PATH, &req.headers()).map_err(|e| {
            eprintln!("PREPARE: {e}");
            IO_FAILED
        })?;
        self.seen.push(("PREPARE", r.status));
        Ok(PrepareReplyV2::from_headers(r.status, |n| r.header(n)))
    }

    fn send_ready(&mut self, req: &ReadyRequest) -> i32 {
        let headers = req.headers();
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        match self.s3.send_from(self.local, "POST", READY_PATH, &h, &[]) {
            Ok(stream) => {
                self.pending = Some(stream);
                0
            }
            Err(e) => {
                eprintln!("READY: {e}");
                IO_FAILED
            }
        }
    }

    fn finish_ready(&mut self) -> Result<FinalReplyV2, i32> {
        let stream = self.pending.take().ok_or(IO_FAILED)?;
        let r = read_response(&mut BufReader::new(stream), false).map_err(|e| {
            eprintln!("FINAL: {e}");
            IO_FAILED
        })?;
        self.seen.push(("FINAL", r.status));
        Ok(FinalReplyV2::from_headers(r.status, |n| r.header(n)))
    }

    fn send_cancel(&mut self, req: &CancelRequest) {
        self.cancels += 1;
        self.pending = None;
        if let Ok(r) = self.post(CANCEL_PATH, &req.headers()) {
            self.seen.push(("CANCEL", r.status));
        }
    }
}
