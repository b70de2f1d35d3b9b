//! RDMA verbs over a run-time loaded libibverbs (`libibverbs.so.1`, never linked).
//!
//! - [`Lib`]: the function-pointer table (`loader`), loaded once, cached only on success.
//! - [`list_devices`], [`pci_distance`]: NIC candidates and their distance to a GPU.
//! - [`Device`]: an opened context + PD, its first ACTIVE port and best GID (`select`).
//! - [`inventory`]: every device, port and GID as `hipobj info` shows them.
//! - [`rc`]: the one RC setup (attributes, INIT/RTR/RTS, starting PSNs) of client and server.
//! - [`Mr`], [`RcQp`], [`Mw`]: registrations, RC queue pairs and type-2 memory windows, which hold their `Arc<Device>`; each
//!   `Drop` calls one destroy verb, so teardown order follows from reference counts.
//! - [`Window`]: a window bound on one QP (bind, confirm, invalidate) and the one policy for a
//!   bind or invalidation the NIC did not confirm: its QP is fenced ([`QpFence`]).
//!
//! `sys` holds the hand-written `#[repr(C)]` verbs.h types; a unit test checks their layout
//! against the installed header.

mod device;
mod error;
mod inventory;
mod loader;
mod mr;
mod mw;
mod qp;
pub mod rc;
mod select;
mod sys;
mod window;

#[cfg(test)]
pub(crate) mod lane_tests;
#[cfg(test)]
mod layout_tests;

pub use device::{list_devices, Device, DeviceCaps, DeviceInfo, Mtu, PortInfo};
pub use error::VerbsError;
pub use inventory::{inventory, DeviceReport, GidReport, MemoryWindows, PortReport};
pub use loader::Lib;
pub use mr::{page_size, Access, Mr};
pub use mw::{inc_rkey, BindRange, Mw, LIVE_WINDOWS, WC_BIND_MW, WC_LOCAL_INV};
pub use qp::{
    wc_status_name, Completion, QpCaps, QpFence, RcQp, RdmaOp, RtrParams, RtsParams, WaitEffort,
    MAX_PSN, WC_FLAG_WITH_IMM, WC_FLAG_WITH_INV, WC_FLAG_WITH_INV_KERNEL_ABI, WC_RDMA_READ,
    WC_RDMA_WRITE, WC_RECV, WC_RECV_RDMA_WITH_IMM, WC_RETRY_EXC_ERR, WC_SEND, WC_SUCCESS,
    WC_WR_FLUSH_ERR,
};
pub use rc::{random_psn, RcPeer};
pub use select::{pci_distance, GidKind};
pub use window::{Fence, Window, WindowQp};
