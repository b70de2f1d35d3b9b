//! TEST DOUBLE (compiled only under `cfg(test)`): an in-memory [`RdmaPort`] standing in for a
//! NIC, so the pairing table, chunking, watchdog and reply logic run without RDMA hardware.
//!
//! "Client memory" is a set of regions keyed by rkey. Work requests complete lazily, one per
//! `poll`, and move their bytes only then (as a NIC may read or write the staging buffer at any
//! time before the completion). Behaviours script failures: an error completion on the n-th
//! work request, or a QP that never completes until it is moved to ERR (then everything flushes).
//!
//! hipobj-rc-v2 sessions: a QP made by `create_qp` sits in INIT until `connect`; a window bound on
//! it exposes the first bytes of its staging buffer, and [`DoublePort::client_write_with_imm`]
//! plays the client's WRITE_WITH_IMM into it (refused unless the window is bound on that QP,
//! the QP is connected, a receive is posted and the bytes fit the window's range).

use hipobj_actors::sync::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::port::{
    Peer, PortError, PortInfo, QpSetup, RdmaOp, RdmaPort, RdmaQp, StagingBuffer, StagingMemory,
    Window, WorkCompletion, WorkRequest,
};

/// ibv_wc_status values the double reports.
pub const WC_REM_ACCESS_ERR: u32 = 10;
pub const WC_RETRY_EXC_ERR: u32 = 12;
pub const WC_WR_FLUSH_ERR: u32 = 5;

/// What the double did, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QpLog {
    Created(u32),
    Setup(QpSetup),
    Posted(u32, WorkRequest),
    ToError(u32),
    Destroyed(u32),
    /// A v2 QP created in INIT.
    CreatedInit(u32),
    /// A v2 QP moved to RTS: (qpn, peer, rq_psn, sq_psn).
    Connected(u32, super::port::Peer, u32, u32),
    RecvPosted(u32),
    /// A window bound on a QP: (qpn, rkey, len).
    Bound(u32, u32, u32),
    /// (qpn, rkey)
    Invalidated(u32, u32),
    /// A SEND_WITH_INV of the client's rkey posted: (qpn, rkey).
    SendInv(u32, u32),
}

/// A window the double knows: its QP and the staging bytes it exposes.
struct BoundWindow {
    qpn: u32,
    ptr: *mut u8,
    len: usize,
}

/// One client WRITE_WITH_IMM the double refused (the verbs error a real NIC would give).
#[derive(Debug, PartialEq, Eq)]
pub struct Refused(pub &'static str);

/// How QPs created from now on behave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    Normal,
    /// The n-th work request posted on the QP (0-based) completes with RETRY_EXC_ERR.
    FailWr(u64),
    /// No completion ever arrives until the QP is moved to ERR.
    Hang,
    /// At most one completion per this many milliseconds (a trickling peer).
    TrickleMs(u64),
    /// Posting a work request panics (a bug inside a transfer).
    PanicOnPost,
}

struct Shared {
    log: Vec<QpLog>,
    /// rkey -> (base address, bytes)
    memory: HashMap<u32, (u64, Vec<u8>)>,
    behaviour: Behaviour,
    fail_connect: bool,
    max_outstanding: usize,
    /// Completions one `poll` may return (1 unless set).
    poll_batch: usize,
    /// rkey -> window (v2 staging windows).
    windows: HashMap<u32, BoundWindow>,
    /// qpn -> receive completions waiting for the QP's poll.
    inbound: HashMap<u32, VecDeque<WorkCompletion>>,
    /// qpn -> work request ids of receives posted and not consumed.
    recvs: HashMap<u32, VecDeque<u64>>,
    /// QPs in RTS.
    connected: std::collections::HashSet<u32>,
    next_rkey: u32,
    /// Files registered so far ([`RdmaPort::register_file`]).
    file_registrations: usize,
    /// Refuse file registrations (as a kernel over its pinning limit does).
    refuse_file_registration: bool,
    /// The port's link is down ([`RdmaPort::is_active`] answers false).
    down: bool,
}

// SAFETY: the raw pointers in `windows` point into staging buffers that their session keeps
// alive until the window is invalidated or its QP dropped (both remove the entry first); all
// access is under the mutex.
unsafe impl Send for Shared {}

#[derive(Clone)]
pub struct DoublePort {
    info: PortInfo,
    shared: Arc<Mutex<Shared>>,
    next_qpn: Arc<AtomicU32>,
}

impl Default for DoublePort {
    fn default() -> Self {
        Self::new()
    }
}

impl DoublePort {
    pub fn new() -> Self {
        Self::with_info(PortInfo {
            device: "double0".into(),
            port: 1,
            gid: [0xd0; 16],
            max_msg_sz: 1 << 23,
            max_rd_atomic: 16,
        })
    }

    pub fn with_info(info: PortInfo) -> Self {
        DoublePort {
            info,
            shared: Arc::new(Mutex::new(Shared {
                log: Vec::new(),
                memory: HashMap::new(),
                behaviour: Behaviour::Normal,
                fail_connect: false,
                max_outstanding: 0,
                poll_batch: 1,
                windows: HashMap::new(),
                inbound: HashMap::new(),
                recvs: HashMap::new(),
                connected: std::collections::HashSet::new(),
                next_rkey: 0x5100,
                file_registrations: 0,
                refuse_file_registration: false,
                down: false,
            })),
            next_qpn: Arc::new(AtomicU32::new(0x100)),
        }
    }

    pub fn log(&self) -> Vec<QpLog> {
        self.shared.lock().log.clone()
    }

    pub fn set_behaviour(&self, b: Behaviour) {
        self.shared.lock().behaviour = b;
    }

    /// QPs created from now on return up to `n` completions per `poll` (as a real CQ does).
    pub fn set_poll_batch(&self, n: usize) {
        self.shared.lock().poll_batch = n.max(1);
    }

    /// Refuse [`RdmaPort::register_file`] from now on (or accept it again).
    pub fn set_refuse_file_registration(&self, refuse: bool) {
        self.shared.lock().refuse_file_registration = refuse;
    }

    /// Files registered so far.
    pub fn file_registrations(&self) -> usize {
        self.shared.lock().file_registrations
    }

    /// Take the port's link down (or bring it back up).
    pub fn set_down(&self, down: bool) {
        self.shared.lock().down = down;
    }

    pub fn set_fail_connect(&self, fail: bool) {
        self.shared.lock().fail_connect = fail;
    }

    /// Register a client memory region.
    pub fn add_region(&self, rkey: u32, base: u64, bytes: Vec<u8>) {
        self.shared.lock().memory.insert(rkey, (base, bytes));
    }

    pub fn region(&self, rkey: u32) -> Vec<u8> {
        self.shared
            .lock()
            .memory
            .get(&rkey)
            .map(|(_, b)| b.clone())
            .unwrap_or_default()
    }

    /// Most work requests any QP had outstanding at once.
    pub fn max_outstanding(&self) -> usize {
        self.shared.lock().max_outstanding
    }

    /// The client side of a v2 PUT: WRITE_WITH_IMM `data` at `offset` of window `rkey` through
    /// the client QP paired with server QP `qpn`.
    pub fn client_write_with_imm(
        &self,
        qpn: u32,
        rkey: u32,
        offset: usize,
        data: &[u8],
        imm: u32,
    ) -> Result<(), Refused> {
        let mut shared = self.shared.lock();
        let Some(w) = shared.windows.get(&rkey) else {
            return Err(Refused("no such window (remote access error)"));
        };
        if w.qpn != qpn {
            return Err(Refused("window bound on another QP (remote access error)"));
        }
        if offset.checked_add(data.len()).is_none_or(|end| end > w.len) {
            return Err(Refused("outside the window (remote access error)"));
        }
        if !shared.connected.contains(&qpn) {
            return Err(Refused("server QP not connected"));
        }
        let ptr = w.ptr.wrapping_add(offset);
        let Some(wr_id) = shared.recvs.entry(qpn).or_default().pop_front() else {
            return Err(Refused("no receive posted (RNR)"));
        };
        // SAFETY: `ptr..ptr + data.len()` lies inside the window's staging bytes (checked above),
        // alive while the window is registered here (see `Shared`); a NIC's DMA would write them
        // the same way.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, data.len()) };
        shared
            .inbound
            .entry(qpn)
            .or_default()
            .push_back(WorkCompletion {
                wr_id,
                status: 0,
                vendor_err: 0,
                opcode: super::port::WC_RECV_RDMA_WITH_IMM,
                byte_len: data.len() as u32,
                imm: Some(imm),
            });
        Ok(())
    }

    /// Windows bound now.
    pub fn windows(&self) -> usize {
        self.shared.lock().windows.len()
    }

    pub fn posted(&self) -> Vec<WorkRequest> {
        self.log()
            .into_iter()
            .filter_map(|e| match e {
                QpLog::Posted(_, wr) => Some(wr),
                _ => None,
            })
            .collect()
    }
}

/// A staging buffer of plain memory.
pub struct DoubleBuffer {
    mem: StagingMemory,
}

impl StagingBuffer for DoubleBuffer {
    fn memory(&self) -> &StagingMemory {
        &self.mem
    }

    fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        self.mem.bytes_mut()
    }
}

struct InFlight {
    wr: WorkRequest,
    /// Address of the staging bytes this request uses, like a NIC's DMA address.
    local: *mut u8,
    /// A zero-length SEND_WITH_INV of `wr.rkey` (moves nothing; fails for an unknown rkey).
    send_inv: bool,
}

pub struct DoubleQp {
    qpn: u32,
    shared: Arc<Mutex<Shared>>,
    behaviour: Behaviour,
    outstanding: VecDeque<InFlight>,
    completed: u64,
    errored: bool,
    poll_batch: usize,
    last_completion: std::time::Instant,
}

// SAFETY: the raw pointers in `outstanding` point into a staging buffer that the transfer engine
// keeps alive until every request completed or flushed; the QP is used by one thread at a time.
unsafe impl Send for DoubleQp {}

impl RdmaPort for DoublePort {
    type Buffer = DoubleBuffer;
    type Qp = DoubleQp;

    fn info(&self) -> &PortInfo {
        &self.info
    }

    fn is_active(&self) -> bool {
        !self.shared.lock().down
    }

    fn connect_qp(&self, setup: &QpSetup) -> Result<DoubleQp, PortError> {
        let mut shared = self.shared.lock();
        if shared.fail_connect {
            return Err(PortError::new("double: connect refused"));
        }
        let qpn = self.next_qpn.fetch_add(1, Ordering::Relaxed);
        shared.log.push(QpLog::Created(qpn));
        shared.log.push(QpLog::Setup(*setup));
        shared.connected.insert(qpn);
        Ok(DoubleQp {
            qpn,
            shared: Arc::clone(&self.shared),
            behaviour: shared.behaviour,
            outstanding: VecDeque::new(),
            completed: 0,
            errored: false,
            poll_batch: shared.poll_batch,
            last_completion: std::time::Instant::now(),
        })
    }

    fn create_qp(&self, _max_send_wr: u32) -> Result<DoubleQp, PortError> {
        let mut shared = self.shared.lock();
        if shared.fail_connect {
            return Err(PortError::new("double: QP creation refused"));
        }
        let qpn = self.next_qpn.fetch_add(1, Ordering::Relaxed);
        shared.log.push(QpLog::CreatedInit(qpn));
        Ok(DoubleQp {
            qpn,
            shared: Arc::clone(&self.shared),
            behaviour: shared.behaviour,
            outstanding: VecDeque::new(),
            completed: 0,
            errored: false,
            poll_batch: shared.poll_batch,
            last_completion: std::time::Instant::now(),
        })
    }

    fn alloc_staging(&self, len: usize) -> Result<DoubleBuffer, PortError> {
        Ok(DoubleBuffer {
            mem: StagingMemory::zeroed(len)?,
        })
    }

    fn register_file(
        &self,
        file: &std::fs::File,
        offset: u64,
        len: usize,
    ) -> Result<DoubleBuffer, PortError> {
        let mut shared = self.shared.lock();
        if shared.refuse_file_registration {
            return Err(PortError::new(
                "ibv_reg_mr: Cannot allocate memory (refused)",
            ));
        }
        shared.file_registrations += 1;
        Ok(DoubleBuffer {
            mem: StagingMemory::map_file(file, offset, len)?,
        })
    }
}

impl DoubleQp {
    /// Move the bytes of a finished request; false when the remote region does not cover it.
    fn execute(shared: &mut Shared, f: &InFlight) -> bool {
        if f.send_inv {
            // The client's window must exist for its invalidation to succeed.
            return shared.memory.contains_key(&f.wr.rkey);
        }
        let Some((base, mem)) = shared.memory.get_mut(&f.wr.rkey) else {
            return false;
        };
        let len = f.wr.len as usize;
        let Some(start) = f.wr.remote_addr.checked_sub(*base) else {
            return false;
        };
        let start = start as usize;
        if start + len > mem.len() {
            return false;
        }
        let remote = mem[start..start + len].as_mut_ptr();
        // SAFETY: `local` points at `len` bytes inside a live staging buffer (see `Send` above)
        // that no Rust reference covers while the request is outstanding (the transfer's rule),
        // and `remote` at `len` bytes of this region; the two never overlap. Raw copies, as a
        // NIC's DMA would do.
        unsafe {
            match f.wr.op {
                RdmaOp::Write => std::ptr::copy_nonoverlapping(f.local, remote, len),
                RdmaOp::Read => std::ptr::copy_nonoverlapping(remote, f.local, len),
            }
        }
        true
    }
}

impl RdmaQp for DoubleQp {
    type Buffer = DoubleBuffer;

    fn qp_num(&self) -> u32 {
        self.qpn
    }

    fn post(&mut self, wr: &WorkRequest, buf: &DoubleBuffer) -> Result<(), PortError> {
        assert!(
            self.behaviour != Behaviour::PanicOnPost,
            "double: scripted panic in post"
        );
        if wr.local_offset + wr.len as usize > buf.mem.len() {
            return Err(PortError::new("double: request outside the staging buffer"));
        }
        let mut shared = self.shared.lock();
        if !shared.connected.contains(&self.qpn) {
            return Err(PortError::new("double: post on a QP not in RTS"));
        }
        shared.log.push(QpLog::Posted(self.qpn, *wr));
        let local = buf.mem.as_ptr().wrapping_add(wr.local_offset);
        self.outstanding.push_back(InFlight {
            wr: *wr,
            local,
            send_inv: false,
        });
        shared.max_outstanding = shared.max_outstanding.max(self.outstanding.len());
        Ok(())
    }

    fn post_send_inv(&mut self, wr_id: u64, rkey: u32) -> Result<(), PortError> {
        let mut shared = self.shared.lock();
        if !shared.connected.contains(&self.qpn) {
            return Err(PortError::new("double: post on a QP not in RTS"));
        }
        shared.log.push(QpLog::SendInv(self.qpn, rkey));
        let wr = WorkRequest {
            op: RdmaOp::Write,
            wr_id,
            local_offset: 0,
            len: 0,
            remote_addr: 0,
            rkey,
            imm: None,
        };
        self.outstanding.push_back(InFlight {
            wr,
            local: std::ptr::null_mut(),
            send_inv: true,
        });
        Ok(())
    }

    fn poll(&mut self, out: &mut Vec<WorkCompletion>) -> Result<(), PortError> {
        if !self.errored {
            if let Some(q) = self.shared.lock().inbound.get_mut(&self.qpn) {
                out.extend(q.drain(..));
            }
        }
        for _ in 0..self.poll_batch {
            if !self.complete_one(out) {
                break;
            }
        }
        Ok(())
    }

    fn to_error(&mut self) -> Result<(), PortError> {
        self.errored = true;
        let mut shared = self.shared.lock();
        shared.log.push(QpLog::ToError(self.qpn));
        shared.connected.remove(&self.qpn);
        Ok(())
    }

    fn connect(&mut self, peer: &Peer, rq_psn: u32, sq_psn: u32) -> Result<(), PortError> {
        let mut shared = self.shared.lock();
        if shared.fail_connect {
            return Err(PortError::new("double: connect refused"));
        }
        if self.errored || !shared.connected.insert(self.qpn) {
            return Err(PortError::new("double: QP not in INIT"));
        }
        shared
            .log
            .push(QpLog::Connected(self.qpn, *peer, rq_psn, sq_psn));
        Ok(())
    }

    fn post_recv(&mut self, wr_id: u64) -> Result<(), PortError> {
        let mut shared = self.shared.lock();
        shared.recvs.entry(self.qpn).or_default().push_back(wr_id);
        shared.log.push(QpLog::RecvPosted(self.qpn));
        Ok(())
    }

    fn bind_window(
        &mut self,
        buf: &DoubleBuffer,
        len: u32,
        _wait: std::time::Duration,
    ) -> Result<Window, PortError> {
        let mut shared = self.shared.lock();
        if !shared.connected.contains(&self.qpn) || self.errored {
            return Err(PortError::new("double: bind on a QP not in RTS"));
        }
        if len as usize > buf.mem.len() {
            return Err(PortError::new("double: window leaves the staging buffer"));
        }
        if shared.windows.values().any(|w| w.qpn == self.qpn) {
            return Err(PortError::new("double: this QP has a window already"));
        }
        shared.next_rkey += 1;
        let rkey = shared.next_rkey;
        shared.windows.insert(
            rkey,
            BoundWindow {
                qpn: self.qpn,
                ptr: buf.mem.as_ptr(),
                len: len as usize,
            },
        );
        shared.log.push(QpLog::Bound(self.qpn, rkey, len));
        Ok(Window {
            addr: buf.mem.as_ptr() as u64,
            rkey,
        })
    }

    fn invalidate_window(&mut self, _wait: std::time::Duration) -> Result<(), PortError> {
        let mut shared = self.shared.lock();
        let rkey = shared
            .windows
            .iter()
            .find(|(_, w)| w.qpn == self.qpn)
            .map(|(rkey, _)| *rkey);
        let Some(rkey) = rkey else {
            return Ok(());
        };
        if self.errored {
            return Err(PortError::new("double: invalidation on a QP in ERR"));
        }
        shared.windows.remove(&rkey);
        shared.log.push(QpLog::Invalidated(self.qpn, rkey));
        Ok(())
    }
}

impl DoubleQp {
    /// Complete the oldest outstanding request into `out`; false when none may complete now.
    fn complete_one(&mut self, out: &mut Vec<WorkCompletion>) -> bool {
        if self.behaviour == Behaviour::Hang && !self.errored {
            return false;
        }
        if let Behaviour::TrickleMs(ms) = self.behaviour {
            if !self.errored
                && self.last_completion.elapsed() < std::time::Duration::from_millis(ms)
            {
                return false;
            }
        }
        let Some(f) = self.outstanding.pop_front() else {
            return false;
        };
        self.last_completion = std::time::Instant::now();
        let index = self.completed;
        self.completed += 1;
        let status = if self.errored {
            WC_WR_FLUSH_ERR
        } else if self.behaviour == Behaviour::FailWr(index) {
            WC_RETRY_EXC_ERR
        } else if !Self::execute(&mut self.shared.lock(), &f) {
            WC_REM_ACCESS_ERR
        } else {
            0
        };
        if status != 0 {
            self.errored = true;
        }
        out.push(WorkCompletion {
            wr_id: f.wr.wr_id,
            status,
            vendor_err: 0,
            // IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ
            opcode: match (f.send_inv, f.wr.op) {
                (true, _) => 0,
                (false, RdmaOp::Write) => 1,
                (false, RdmaOp::Read) => 2,
            },
            byte_len: f.wr.len,
            imm: None,
        });
        true
    }
}

impl Drop for DoubleQp {
    fn drop(&mut self) {
        let mut shared = self.shared.lock();
        // Destroying the QP (and deallocating its window) leaves nothing reachable.
        shared.windows.retain(|_, w| w.qpn != self.qpn);
        shared.connected.remove(&self.qpn);
        shared.inbound.remove(&self.qpn);
        shared.log.push(QpLog::Destroyed(self.qpn));
    }
}
