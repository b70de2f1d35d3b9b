//! One transfer: the request/reply exchange of PROTOCOL.md section 5, with staging around it.

use super::registration::refusal;
use super::{Runtime, S3Ops, SyncDirection, TransferKind};
use crate::error::{Error, OpError, Result};
use crate::hip::CopyDirection;
use crate::pool::{ConnectionHandle, Lease, PairOutcome, Pool};
use crate::registry::{Buffer, BufferKind};
use crate::reply::{Reply, REPLY_BUFFER_LEN};
use hipobj_actors::callback::CallbackGuard;
use hipobj_actors::registry::{Entry, Registry, UseGuard};
use hipobj_actors::sync::Arc;
use hipobj_actors::transfer::{self, Direction, Refused, TransferParts};
use std::time::Duration;

/// A transfer never sends more than this many requests (PROTOCOL.md rule 5.3).
const MAX_REQUESTS: usize = 3;

impl Runtime {
    fn stage(
        &self,
        guard: UseGuard<Buffer>,
        dir: CopyDirection,
        offset: usize,
        size: usize,
    ) -> Result<UseGuard<Buffer>> {
        if guard.entry().payload().kind() != BufferKind::DeviceStaged {
            return Ok(guard);
        }
        let stager = self
            .stager
            .as_ref()
            .ok_or_else(|| Error::internal("staged buffer without a stager"))?;
        stager.copy(
            guard,
            dir,
            offset,
            size,
            Duration::from_millis(self.env.stage_timeout_ms),
        )
    }

    /// `hipObjGet`/`hipObjPut` after the argument checks of the ffi layer: the composition of
    /// `hipobj_actors::transfer::run` (the one the loom models drive) over this runtime's parts.
    pub fn transfer(
        &self,
        kind: TransferKind,
        ptr: usize,
        size: usize,
        offset: u64,
        ops: &mut dyn S3Ops,
    ) -> Result<()> {
        let direction = match kind {
            TransferKind::Get => Direction::Get,
            TransferKind::Put => Direction::Put,
        };
        transfer::run(self, direction, ptr, size, offset, ops)
    }

    /// `hipObjBufSync` after the argument checks of the ffi layer.
    pub fn sync(&self, ptr: usize, size: usize, offset: u64, dir: SyncDirection) -> Result<()> {
        let guard = self.use_range(ptr, size, offset)?;
        let dir = match dir {
            SyncDirection::ToHost => CopyDirection::DeviceToHost,
            SyncDirection::ToDevice => CopyDirection::HostToDevice,
        };
        self.stage(guard, dir, offset as usize, size).map(drop)
    }

    /// `hipObjGetRdmaToken`: the 88-hex token for `[ptr, ptr + size)` on the dedicated connection.
    pub fn mint_token(&self, ptr: usize, size: usize) -> Result<String> {
        let guard = self.use_range(ptr, size, 0)?;
        let buffer = guard.entry().payload();
        let token = self
            .app_connection
            .mint(buffer.rkey(), buffer.remote_addr(0), size as u64)?;
        Ok(token.encode_hex())
    }

    /// `hipObjParseRdmaReply` with a `428:<token>` reply: pair the dedicated connection (rule 5.3).
    pub fn apply_reply(&self, reply: &Reply) -> Result<()> {
        match reply {
            Reply::PairingNeeded(server) => self.app_connection.pair(*server).map(drop),
            _ => Ok(()),
        }
    }
}

/// The parts of a transfer that `hipobj_actors::transfer::run` composes.
impl<'a> TransferParts<dyn S3Ops + 'a> for Runtime {
    type Payload = Buffer;
    type Error = Error;

    fn registry(&self) -> &Registry<Buffer> {
        &self.registry
    }

    fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    fn refused(&self, why: Refused, base: usize, size: usize, offset: u64) -> Error {
        refusal(why, base, size, offset)
    }

    fn stage_out(
        &self,
        guard: UseGuard<Buffer>,
        offset: usize,
        size: usize,
    ) -> Result<UseGuard<Buffer>> {
        self.stage(guard, CopyDirection::DeviceToHost, offset, size)
    }

    fn exchange(
        &self,
        lease: &Lease,
        buffer: &Entry<Buffer>,
        offset: usize,
        size: usize,
        ops: &mut (dyn S3Ops + 'a),
    ) -> Result<()> {
        let conn = self
            .connections
            .get(lease.slot())
            .ok_or_else(|| Error::internal("lease out of range"))?;
        let buffer = buffer.payload();
        exchange(
            conn,
            buffer.rkey(),
            buffer.remote_addr(offset),
            size as u64,
            ops,
        )
    }

    /// A failed connection's QP is replaced before the lease returns it to the pool.
    fn release(&self, lease: Lease, outcome: &Result<()>) {
        if let Err(error) = outcome {
            let slot = lease.slot();
            tracing::debug!(slot, "transfer failed ({error}); replacing its QP");
            if let Some(conn) = self.connections.get(slot) {
                if let Err(re) = conn.replace() {
                    tracing::warn!("could not replace a failed connection's QP: {re}");
                }
            }
        }
        drop(lease);
    }

    fn stage_in(&self, guard: UseGuard<Buffer>, offset: usize, size: usize) -> Result<()> {
        match guard.entry().payload().kind() {
            BufferKind::DeviceStaged => self
                .stage(guard, CopyDirection::HostToDevice, offset, size)
                .map(drop),
            BufferKind::DeviceDirect => match &self.gpu {
                Some(gpu) => gpu
                    .runtime
                    .make_visible_after_rdma_write(gpu.device)
                    .map_err(|e| e.to_error(OpError::RdmaError)),
                None => Ok(()),
            },
            BufferKind::Host => Ok(()),
        }
    }
}

/// One transfer's request/reply exchange on a leased connection (PROTOCOL.md section 5).
fn exchange(
    conn: &ConnectionHandle,
    rkey: u32,
    addr: u64,
    len: u64,
    ops: &mut dyn S3Ops,
) -> Result<()> {
    let mut paired_here = false;
    let mut reply_buf = [0u8; REPLY_BUFFER_LEN];
    for _request in 0..MAX_REQUESTS {
        let token = conn.mint(rkey, addr, len)?.encode_hex();
        let status = {
            let _cb = CallbackGuard::enter();
            ops.send_request(&token)
        };
        if status != 0 {
            return Err(Error::s3(format!("sendRequest failed ({status})")));
        }
        let n = {
            let _cb = CallbackGuard::enter();
            ops.recv_reply(&mut reply_buf)
        }
        .map_err(|status| Error::s3(format!("recvReply failed ({status})")))?;
        let raw = reply_buf
            .get(..n)
            .ok_or_else(|| Error::s3("recvReply reported more bytes than the buffer holds"))?;
        let reply = Reply::parse(raw).map_err(|_| {
            Error::s3(format!(
                "malformed x-amz-rdma-reply {:?}",
                String::from_utf8_lossy(raw)
            ))
        })?;
        match reply {
            Reply::PairingNeeded(server) => {
                if paired_here {
                    return Err(Error::rdma(
                        "the server asked to pair again a QP it paired in this transfer",
                    ));
                }
                if conn.pair(server)? == PairOutcome::Paired {
                    paired_here = true;
                }
            }
            Reply::Done(server) => {
                return if conn.matches(server)? {
                    Ok(())
                } else {
                    Err(Error::s3("the 200 reply names another QP or pairing"))
                };
            }
            Reply::Code(200 | 204 | 206) => return Ok(()),
            Reply::Code(code) => return Err(Error::s3(format!("the server answered {code}"))),
        }
    }
    Err(Error::rdma("no transfer after three requests"))
}
