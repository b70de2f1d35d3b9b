//! [`RdmaPort`] over `hipobj::verbs` (libibverbs loaded at run time).

use std::sync::Arc;

use hipobj::verbs::{self, Access, BindRange, Device, Lib, Mr, QpCaps, RcPeer, RcQp};

use super::port::{
    Peer, PortError, PortInfo, QpSetup, RdmaOp, RdmaPort, RdmaQp, StagingBuffer, StagingMemory,
    Window, WorkCompletion, WorkRequest,
};

/// Completions taken per poll call.
const POLL_BATCH: usize = 32;
/// Work request ids of a v2 session's window bind and invalidation (its WRITEs count from 0).
const WR_BIND: u64 = u64::MAX - 1;
const WR_INVALIDATE: u64 = u64::MAX - 2;

fn port_error(e: verbs::VerbsError) -> PortError {
    PortError::new(e.to_string())
}

/// One opened device port.
pub struct VerbsPort {
    device: Arc<Device>,
    info: PortInfo,
}

impl VerbsPort {
    /// Load libibverbs and open `name`; an error means "serve without RDMA".
    pub fn open(name: &str) -> Result<VerbsPort, PortError> {
        let lib = Lib::load().map_err(port_error)?;
        let device = Device::open(&lib, name).map_err(port_error)?;
        let port = device.port();
        let info = PortInfo {
            device: device.name().to_string(),
            port: port.port,
            gid: port.gid,
            max_msg_sz: port.max_msg_sz,
            max_rd_atomic: device.caps().max_qp_init_rd_atom.max(1),
        };
        tracing::info!(
            device = %info.device,
            port = info.port,
            gid = %std::net::Ipv6Addr::from(info.gid),
            mtu = port.active_mtu.bytes(),
            max_msg_sz = info.max_msg_sz,
            max_rd_atomic = info.max_rd_atomic,
            "RDMA device opened"
        );
        Ok(VerbsPort { device, info })
    }
}

/// Staging memory and its registration.
pub struct VerbsBuffer {
    // Declared first: deregistered before the memory is freed.
    mr: Mr,
    mem: StagingMemory,
}

impl StagingBuffer for VerbsBuffer {
    fn memory(&self) -> &StagingMemory {
        &self.mem
    }

    fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        self.mem.bytes_mut()
    }
}

/// A server QP (v1: in RTS; v2: from INIT on) and, for a v2 PUT, the window bound on it (a
/// bind or invalidation the NIC did not confirm fences the QP: `hipobj::verbs::Window`'s policy).
pub struct VerbsQp {
    // Declared first: deallocated (so invalid) before the QP is destroyed.
    window: Option<verbs::Window>,
    qp: RcQp,
    polled: Vec<verbs::Completion>,
    max_rd_atomic: u8,
}

impl VerbsQp {
    fn new(qp: RcQp, max_rd_atomic: u8) -> VerbsQp {
        VerbsQp {
            window: None,
            qp,
            polled: Vec::with_capacity(POLL_BATCH),
            max_rd_atomic,
        }
    }

    /// Whether the QP was fenced (a window bind or invalidation on it was not confirmed): it is
    /// in ERR and grants nothing any more.
    pub fn is_fenced(&self) -> bool {
        self.qp.is_fenced()
    }
}

impl RdmaQp for VerbsQp {
    type Buffer = VerbsBuffer;

    fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }

    fn post(&mut self, wr: &WorkRequest, buf: &VerbsBuffer) -> Result<(), PortError> {
        let op = match (wr.op, wr.imm) {
            (RdmaOp::Write, None) => verbs::RdmaOp::Write,
            (RdmaOp::Write, Some(imm)) => verbs::RdmaOp::WriteWithImm(imm),
            (RdmaOp::Read, _) => verbs::RdmaOp::Read,
        };
        self.qp
            .post_rdma(
                op,
                wr.wr_id,
                &buf.mr,
                wr.local_offset,
                wr.len,
                wr.remote_addr,
                wr.rkey,
                true,
            )
            .map_err(port_error)
    }

    fn post_send_inv(&mut self, wr_id: u64, rkey: u32) -> Result<(), PortError> {
        self.qp.post_send_with_inv(wr_id, rkey).map_err(port_error)
    }

    fn poll(&mut self, out: &mut Vec<WorkCompletion>) -> Result<(), PortError> {
        self.polled.clear();
        self.qp
            .poll(POLL_BATCH, &mut self.polled)
            .map_err(port_error)?;
        out.extend(self.polled.iter().map(|c| WorkCompletion {
            wr_id: c.wr_id,
            status: c.status,
            vendor_err: c.vendor_err,
            opcode: c.opcode,
            byte_len: c.byte_len,
            imm: (c.wc_flags & verbs::WC_FLAG_WITH_IMM != 0).then_some(c.imm_data),
        }));
        Ok(())
    }

    fn to_error(&mut self) -> Result<(), PortError> {
        self.qp.to_error().map_err(port_error)
    }

    fn connect(&mut self, peer: &Peer, rq_psn: u32, sq_psn: u32) -> Result<(), PortError> {
        let peer = RcPeer {
            qp_num: peer.qp_num,
            gid: peer.gid,
        };
        self.qp
            .connect(&peer, rq_psn, sq_psn, self.max_rd_atomic)
            .map_err(port_error)
    }

    fn post_recv(&mut self, wr_id: u64) -> Result<(), PortError> {
        self.qp.post_recv(wr_id, None).map_err(port_error)
    }

    fn bind_window(
        &mut self,
        buf: &VerbsBuffer,
        len: u32,
        wait: std::time::Duration,
    ) -> Result<Window, PortError> {
        if self.window.is_some() {
            return Err(PortError::new("this QP has a window already"));
        }
        let range = BindRange {
            mr: &buf.mr,
            addr: buf.mr.addr() as u64,
            len: u64::from(len),
            access: Access::REMOTE_WRITE,
        };
        let window = self
            .window
            .insert(verbs::Window::alloc(&self.qp).map_err(port_error)?);
        let (rkey, _) = window
            .bind(&mut self.qp, WR_BIND, &range, wait)
            .map_err(port_error)?;
        Ok(Window {
            addr: range.addr,
            rkey,
        })
    }

    fn invalidate_window(&mut self, wait: std::time::Duration) -> Result<(), PortError> {
        let Some(window) = self.window.as_mut() else {
            return Ok(());
        };
        window
            .invalidate(&mut self.qp, WR_INVALIDATE, wait)
            .map_err(port_error)?;
        self.window = None;
        Ok(())
    }
}

impl RdmaPort for VerbsPort {
    type Buffer = VerbsBuffer;
    type Qp = VerbsQp;

    fn info(&self) -> &PortInfo {
        &self.info
    }

    fn is_active(&self) -> bool {
        match self.device.port_is_active() {
            Ok(active) => active,
            Err(e) => {
                tracing::warn!(device = %self.info.device, error = %e, "cannot read the port's state; taken as down");
                false
            }
        }
    }

    fn connect_qp(&self, setup: &QpSetup) -> Result<VerbsQp, PortError> {
        let mut qp = self
            .device
            .create_rc_qp(QpCaps {
                max_send_wr: setup.max_send_wr,
                max_recv_wr: 1,
                cq_depth: setup.max_send_wr + 1,
            })
            .map_err(port_error)?;
        // The server QP is never the target of a one-sided operation.
        qp.to_init(Access::empty()).map_err(port_error)?;
        // The same PSN both ways: the client learns one number from the server token.
        qp.connect(
            &RcPeer {
                qp_num: setup.peer.qp_num,
                gid: setup.peer.gid,
            },
            setup.start_psn,
            setup.start_psn,
            self.info.max_rd_atomic,
        )
        .map_err(port_error)?;
        Ok(VerbsQp::new(qp, self.info.max_rd_atomic))
    }

    fn create_qp(&self, max_send_wr: u32) -> Result<VerbsQp, PortError> {
        let mut qp = self
            .device
            .create_rc_qp(QpCaps {
                max_send_wr,
                max_recv_wr: 1,
                cq_depth: max_send_wr + 1,
            })
            .map_err(port_error)?;
        // Remote writes reach only the windows bound on this QP (the staging MR itself grants
        // no remote access).
        qp.to_init(Access::REMOTE_WRITE).map_err(port_error)?;
        Ok(VerbsQp::new(qp, self.info.max_rd_atomic))
    }

    fn alloc_staging(&self, len: usize) -> Result<VerbsBuffer, PortError> {
        let mem = StagingMemory::zeroed(len)?;
        // SAFETY: `mem` is a heap allocation owned by the returned VerbsBuffer, which drops `mr`
        // (deregistration) before `mem` (field order); moving the owner does not move the memory.
        let mr = unsafe {
            self.device.register(
                mem.as_ptr() as usize,
                mem.len(),
                Access::LOCAL_WRITE | Access::MW_BIND,
            )
        }
        .map_err(port_error)?;
        Ok(VerbsBuffer { mr, mem })
    }

    fn register_file(
        &self,
        file: &std::fs::File,
        offset: u64,
        len: usize,
    ) -> Result<VerbsBuffer, PortError> {
        let mem = StagingMemory::map_file(file, offset, len)?;
        // SAFETY: `mem` is a mapping owned by the returned VerbsBuffer, which drops `mr`
        // (deregistration) before `mem` (field order). Local read only: the pages are pinned
        // without write access, so the file's pages are never dirtied by the NIC.
        let mr = unsafe {
            self.device
                .register(mem.as_ptr() as usize, mem.len(), Access::empty())
        }
        .map_err(port_error)?;
        Ok(VerbsBuffer { mr, mem })
    }
}
