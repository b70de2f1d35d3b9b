//! [`RdmaPort`] over `hipobj::verbs` (libibverbs loaded at run time).

use std::sync::Arc;

use hipobj::verbs::{self, Access, Device, Lib, Mr, QpCaps, RcPeer, RcQp};

use super::port::{
    PortError, PortInfo, QpSetup, RdmaOp, RdmaPort, RdmaQp, StagingBuffer, StagingMemory,
    WorkCompletion, WorkRequest,
};

/// Completions taken per poll call.
const POLL_BATCH: usize = 32;

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
}

/// A server QP in RTS.
pub struct VerbsQp {
    qp: RcQp,
    polled: Vec<verbs::Completion>,
}

impl RdmaQp for VerbsQp {
    type Buffer = VerbsBuffer;

    fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }

    fn post(&mut self, wr: &WorkRequest, buf: &VerbsBuffer) -> Result<(), PortError> {
        let op = match wr.op {
            RdmaOp::Write => verbs::RdmaOp::Write,
            RdmaOp::Read => verbs::RdmaOp::Read,
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

    fn poll(&mut self, out: &mut Vec<WorkCompletion>) -> Result<(), PortError> {
        self.polled.clear();
        self.qp
            .poll(POLL_BATCH, &mut self.polled)
            .map_err(port_error)?;
        out.extend(self.polled.iter().map(|c| WorkCompletion {
            wr_id: c.wr_id,
            status: c.status,
            vendor_err: c.vendor_err,
        }));
        Ok(())
    }

    fn to_error(&mut self) -> Result<(), PortError> {
        self.qp.to_error().map_err(port_error)
    }
}

impl RdmaPort for VerbsPort {
    type Buffer = VerbsBuffer;
    type Qp = VerbsQp;

    fn info(&self) -> &PortInfo {
        &self.info
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
        Ok(VerbsQp {
            qp,
            polled: Vec::with_capacity(POLL_BATCH),
        })
    }

    fn alloc_staging(&self, len: usize) -> Result<VerbsBuffer, PortError> {
        let mem = StagingMemory::zeroed(len)?;
        // SAFETY: `mem` is a heap allocation owned by the returned VerbsBuffer, which drops `mr`
        // (deregistration) before `mem` (field order); moving the owner does not move the memory.
        let mr = unsafe {
            self.device
                .register(mem.as_ptr() as usize, mem.len(), Access::LOCAL_WRITE)
        }
        .map_err(port_error)?;
        Ok(VerbsBuffer { mr, mem })
    }
}
