//! The adapter that presents the C callbacks of `hipObjOpsV2_t` to the core as [`S3OpsV2`]: it
//! fills `hipObjTransferReqV2_t` from the core's requests, and turns what the callbacks copied
//! into the reply structs back into header values that the one v2 codec parses (so C replies
//! are checked by the same code as the headers on the wire: protocol echo, token, session, PSN,
//! cookie, byte count, checksum).

use super::args::CallbacksV2;
use super::types::{
    hipObjControlEndpointV2_t, hipObjFinalReplyV2_t, hipObjPrepareReplyV2_t, hipObjTransferReqV2_t,
};
use crate::rcv2::client::{FinalReplyV2, PrepareReplyV2, S3OpsV2};
use crate::rcv2::{header, CancelRequest, PrepareRequest, ReadyRequest, PROTOCOL};
use crate::runtime::Runtime;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::time::Duration;

/// What the request struct carries besides the core's requests: the call's own arguments and
/// the runtime's interface.
pub struct CallContext {
    pub method: &'static CStr,
    /// The caller's own strings (valid for the whole call).
    pub bucket: *const c_char,
    pub key: *const c_char,
    pub query: *const c_char,
    pub size: u64,
    pub offset: u64,
    /// `hipObjInitV2`'s control endpoint, if the library was started by it.
    pub endpoint: Option<CString>,
    pub nic: CString,
    pub nic_port: c_int,
    pub nic_gid_index: c_int,
}

impl CallContext {
    /// The interface part from the runtime in use.
    pub fn interface(rt: &Runtime) -> (CString, c_int, c_int) {
        let device = rt.device();
        let port = device.port();
        (
            CString::new(device.name()).unwrap_or_default(),
            c_int::from(port.port),
            c_int::from(port.gid_index),
        )
    }
}

/// The application's C callbacks, their context pointer, and the request struct's storage.
pub struct CallbackOpsV2 {
    fns: CallbacksV2,
    ctx: *mut c_void,
    call: CallContext,
    endpoint: hipObjControlEndpointV2_t,
    token: CString,
    target: CString,
    session: Option<CString>,
    cookie: u32,
    client_psn: u32,
    /// READY's QP number, address and rkey (zero before READY).
    ready: (u32, u64, u32),
    deadline_ms: u32,
    remaining_ms: u32,
}

/// Status the adapter reports for a request it cannot hand to C (a NUL inside a string).
pub const CALLBACK_CONTRACT_VIOLATION: i32 = -1;

impl CallbackOpsV2 {
    /// # Safety
    /// The callbacks may be called with `ctx` on this thread while the value lives, and the
    /// strings of `call` stay valid that long, as `hipObjGetV2`/`hipObjPutV2` promise.
    pub unsafe fn new(fns: CallbacksV2, ctx: *mut c_void, call: CallContext) -> CallbackOpsV2 {
        CallbackOpsV2 {
            fns,
            ctx,
            endpoint: hipObjControlEndpointV2_t {
                controlEndpoint: std::ptr::null(),
            },
            call,
            token: CString::default(),
            target: CString::default(),
            session: None,
            cookie: 0,
            client_psn: 0,
            ready: (0, 0, 0),
            deadline_ms: 0,
            remaining_ms: 0,
        }
    }

    /// The request struct, pointing into `self` (valid while `self` is neither moved nor
    /// changed: for one callback).
    fn req(&mut self) -> hipObjTransferReqV2_t {
        let endpoint = match &self.call.endpoint {
            Some(text) => {
                self.endpoint.controlEndpoint = text.as_ptr();
                &self.endpoint as *const hipObjControlEndpointV2_t
            }
            None => std::ptr::null(),
        };
        hipObjTransferReqV2_t {
            method: self.call.method.as_ptr(),
            bucket: self.call.bucket,
            key: self.call.key,
            query: self.call.query,
            token: self.token.as_ptr(),
            session: self
                .session
                .as_ref()
                .map_or(std::ptr::null(), |s| s.as_ptr()),
            target: self.target.as_ptr(),
            size: self.call.size,
            offset: self.call.offset,
            cookie: self.cookie,
            clientPsn: self.client_psn,
            deadlineMs: self.deadline_ms,
            remainingMs: self.remaining_ms,
            endpoint,
            nic: self.call.nic.as_ptr(),
            nicPort: self.call.nic_port,
            nicGidIndex: self.call.nic_gid_index,
            clientQpn: self.ready.0,
            clientMrAddr: self.ready.1,
            clientMrRkey: self.ready.2,
        }
    }

    fn set_session(&mut self, session: String) -> Result<(), i32> {
        self.session = Some(CString::new(session).map_err(|_| CALLBACK_CONTRACT_VIOLATION)?);
        Ok(())
    }
}

impl S3OpsV2 for CallbackOpsV2 {
    fn send_prepare(&mut self, req: &PrepareRequest) -> Result<PrepareReplyV2, i32> {
        self.token =
            CString::new(req.token.encode_hex()).map_err(|_| CALLBACK_CONTRACT_VIOLATION)?;
        self.target = CString::new(req.target.encode()).map_err(|_| CALLBACK_CONTRACT_VIOLATION)?;
        self.cookie = req.cookie.get();
        self.client_psn = req.psn.get();
        self.session = None;
        let c_req = self.req();
        let mut out = hipObjPrepareReplyV2_t::zeroed();
        // SAFETY: `c_req` points into `self`, alive and unchanged for the call; `out` is a live
        // struct of the header's layout; the callback and ctx are the application's (`new`).
        let status = unsafe { (self.fns.prepare)(self.ctx, &c_req, &mut out) };
        if status != 0 {
            return Err(status);
        }
        Ok(prepare_reply(&out))
    }

    fn send_ready(&mut self, req: &ReadyRequest) -> i32 {
        if self.set_session(req.session.to_string()).is_err() {
            return CALLBACK_CONTRACT_VIOLATION;
        }
        self.ready = (req.qpn, req.mr_addr, req.mr_rkey);
        let c_req = self.req();
        // SAFETY: as in `send_prepare`.
        unsafe { (self.fns.ready)(self.ctx, &c_req) }
    }

    fn finish_ready(&mut self) -> Result<FinalReplyV2, i32> {
        let c_req = self.req();
        let mut out = hipObjFinalReplyV2_t::zeroed();
        // SAFETY: as in `send_prepare`.
        let status = unsafe { (self.fns.finish)(self.ctx, &c_req, &mut out) };
        if status != 0 {
            return Err(status);
        }
        Ok(final_reply(&out))
    }

    fn send_cancel(&mut self, req: &CancelRequest) {
        if self.set_session(req.session.to_string()).is_err() {
            return;
        }
        let c_req = self.req();
        // SAFETY: as in `send_prepare`. Its status does not matter (best effort).
        let _ = unsafe { (self.fns.cancel)(self.ctx, &c_req) };
    }

    fn budget(&mut self, transfer_left: Duration, this_call: Duration) {
        let ms = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
        self.deadline_ms = ms(transfer_left);
        self.remaining_ms = ms(this_call);
    }
}

/// A NUL-terminated string inside a fixed C array; `None` without a NUL.
fn array_str(a: &[c_char]) -> Option<&str> {
    // SAFETY: c_char and u8 have the same size and alignment; the slice is the same memory.
    let bytes = unsafe { std::slice::from_raw_parts(a.as_ptr().cast::<u8>(), a.len()) };
    CStr::from_bytes_until_nul(bytes).ok()?.to_str().ok()
}

/// An HTTP status as C wrote it (0 for a value no status has).
fn status_of(raw: c_int) -> u16 {
    u16::try_from(raw).ok().filter(|s| *s <= 999).unwrap_or(0)
}

/// Look `name` up in header pairs.
fn lookup<'a>(headers: &'a [(&'static str, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.as_str())
}

/// `sendPrepare`'s struct as the header values it was copied from, parsed by the codec.
fn prepare_reply(out: &hipObjPrepareReplyV2_t) -> PrepareReplyV2 {
    let status = status_of(out.httpStatus);
    let mut h: Vec<(&'static str, String)> = Vec::new();
    if out.protocolEcho != 0 {
        h.push((header::PROTOCOL, PROTOCOL.to_string()));
    }
    if out.unsupportedMarker != 0 {
        h.push((
            header::PROTOCOL_STATUS,
            crate::rcv2::UNSUPPORTED.to_string(),
        ));
    }
    if let Some(token) = array_str(&out.serverToken) {
        h.push((header::REPLY, format!("200:{token}")));
        if let Ok(t) = crate::token::Token::decode_hex(token.as_bytes()) {
            h.push((header::QPN, format!("{:x}", t.qp_num)));
        }
    }
    if let Some(session) = array_str(&out.session) {
        h.push((header::SESSION, session.to_string()));
    }
    h.push((header::PSN, format!("{:06x}", out.serverPsn)));
    if out.stagingPresent != 0 {
        h.push((header::MR_ADDR, format!("{:x}", out.stagingAddr)));
        h.push((header::MR_RKEY, format!("{:x}", out.stagingRkey)));
    }
    PrepareReplyV2::from_headers(status, |n| lookup(&h, n))
}

/// `finishReady`'s struct as the header values it was copied from, parsed by the codec.
fn final_reply(out: &hipObjFinalReplyV2_t) -> FinalReplyV2 {
    let status = status_of(out.httpStatus);
    let mut h: Vec<(&'static str, String)> = Vec::new();
    if out.protocolEcho != 0 {
        h.push((header::PROTOCOL, PROTOCOL.to_string()));
    }
    if out.cookiePresent != 0 {
        h.push((header::COOKIE, format!("{:08x}", out.cookieEcho)));
    }
    h.push((header::BYTES_TRANSFERRED, out.bytes.to_string()));
    for (name, field) in [
        (header::ETAG, &out.etag[..]),
        (header::VERSION_ID, &out.versionId[..]),
    ] {
        if let Some(v) = array_str(field).filter(|v| !v.is_empty()) {
            h.push((name, v.to_string()));
        }
    }
    if let Some(b64) = array_str(&out.checksumB64).filter(|v| !v.is_empty()) {
        h.push((header::CHECKSUM, format!("CRC64NVME {b64}")));
    }
    FinalReplyV2::from_headers(status, |n| lookup(&h, n))
}
