//! A description of every RDMA device, for diagnostics (`hipobj info`): its limits, memory-window
//! support, and each port's state, MTU and GID table with the GID that [`Device::open`] would
//! pick (the same selection code). Read-only: nothing is allocated on the devices.
//!
//! [`Device::open`]: super::Device::open

use std::net::Ipv6Addr;
use std::sync::Arc;

use super::device::{pci_bus_id, Context, DeviceList};
use super::error::VerbsError;
use super::loader::Lib;
use super::select::{self, GidKind, GidType};
use super::sys;

/// `IBV_DEVICE_MEM_WINDOW` in `ibv_device_attr.device_cap_flags`.
const CAP_MEM_WINDOW: u32 = 1 << 17;
/// `IBV_DEVICE_MEM_WINDOW_TYPE_2A`.
const CAP_MEM_WINDOW_TYPE_2A: u32 = 1 << 23;
/// `IBV_DEVICE_MEM_WINDOW_TYPE_2B`.
const CAP_MEM_WINDOW_TYPE_2B: u32 = 1 << 24;

/// Memory-window support as the device reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryWindows {
    /// `IBV_DEVICE_MEM_WINDOW` (type 1).
    pub type1: bool,
    pub type2a: bool,
    pub type2b: bool,
    /// `max_mw`.
    pub max_mw: i32,
}

/// One GID table entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GidReport {
    pub index: u32,
    pub gid: Ipv6Addr,
    /// "RoCE v1", "RoCE v2" or "other".
    pub gid_type: &'static str,
    /// How hipObject ranks it; `None`: never used (not RoCE, or all zero).
    pub kind: Option<GidKind>,
}

/// One port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortReport {
    pub port: u8,
    /// `ibv_port_state` as text ("ACTIVE", "DOWN", ...).
    pub state: &'static str,
    pub active: bool,
    /// Active MTU in bytes (0 when the port reports none).
    pub active_mtu: u32,
    pub max_msg_sz: u32,
    pub gids: Vec<GidReport>,
    /// The index of the GID hipObject would use on this port, if any qualifies.
    pub chosen_gid: Option<u32>,
}

/// One RDMA device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceReport {
    pub name: String,
    pub pci_bus_id: Option<String>,
    pub fw_ver: String,
    pub vendor_id: u32,
    pub max_qp: i32,
    pub max_qp_wr: i32,
    pub max_mr: i32,
    pub max_mr_size: u64,
    pub max_qp_rd_atom: i32,
    pub max_qp_init_rd_atom: i32,
    pub memory_windows: MemoryWindows,
    pub ports: Vec<PortReport>,
    /// Why the device could not be described, if it could not (the other fields are then empty).
    pub error: Option<String>,
}

fn port_state_name(state: u32) -> &'static str {
    match state {
        0 => "NOP",
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        sys::IBV_PORT_ACTIVE => "ACTIVE",
        sys::IBV_PORT_ACTIVE_DEFER => "ACTIVE_DEFER",
        _ => "UNKNOWN",
    }
}

fn gid_type_name(t: GidType) -> &'static str {
    match t {
        GidType::RoceV1 => "RoCE v1",
        GidType::RoceV2 => "RoCE v2",
        GidType::Other => "other",
    }
}

fn c_text(raw: &[libc::c_char]) -> String {
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn describe_port(ctx: &Context, name: &str, port: u8) -> Result<PortReport, VerbsError> {
    let attr = ctx.query_port(port)?;
    let candidates = ctx.gid_candidates(name, port, attr.gid_tbl_len);
    let chosen_gid = select::best_gid(&candidates).map(|(c, _)| c.index);
    let gids = candidates
        .iter()
        .filter(|c| c.gid.iter().any(|&b| b != 0))
        .map(|c| GidReport {
            index: c.index,
            gid: Ipv6Addr::from(c.gid),
            gid_type: gid_type_name(c.gid_type),
            kind: select::classify_gid(&c.gid, c.gid_type),
        })
        .collect();
    Ok(PortReport {
        port,
        state: port_state_name(attr.state),
        active: attr.state == sys::IBV_PORT_ACTIVE || attr.state == sys::IBV_PORT_ACTIVE_DEFER,
        active_mtu: super::Mtu::from_raw(attr.active_mtu).map_or(0, super::Mtu::bytes),
        max_msg_sz: attr.max_msg_sz,
        gids,
        chosen_gid,
    })
}

fn describe(ctx: &Context, name: &str) -> Result<DeviceReport, VerbsError> {
    let attr = ctx.query_device()?;
    let ports = (1..=attr.phys_port_cnt)
        .map(|p| describe_port(ctx, name, p))
        .collect::<Result<Vec<_>, _>>()?;
    let flags = attr.device_cap_flags;
    Ok(DeviceReport {
        name: name.to_owned(),
        pci_bus_id: pci_bus_id(name),
        fw_ver: c_text(&attr.fw_ver),
        vendor_id: attr.vendor_id,
        max_qp: attr.max_qp,
        max_qp_wr: attr.max_qp_wr,
        max_mr: attr.max_mr,
        max_mr_size: attr.max_mr_size,
        max_qp_rd_atom: attr.max_qp_rd_atom,
        max_qp_init_rd_atom: attr.max_qp_init_rd_atom,
        memory_windows: MemoryWindows {
            type1: flags & CAP_MEM_WINDOW != 0,
            type2a: flags & CAP_MEM_WINDOW_TYPE_2A != 0,
            type2b: flags & CAP_MEM_WINDOW_TYPE_2B != 0,
            max_mw: attr.max_mw,
        },
        ports,
        error: None,
    })
}

/// Every RDMA device libibverbs lists, in its order. A device that cannot be opened or queried
/// is listed with its `error`.
pub fn inventory(lib: &Arc<Lib>) -> Result<Vec<DeviceReport>, VerbsError> {
    let list = DeviceList::get(lib)?;
    let mut out = Vec::new();
    for (name, dev) in list.devices() {
        let report = Context::open(lib, &name, dev).and_then(|ctx| describe(&ctx, &name));
        out.push(report.unwrap_or_else(|e| DeviceReport {
            name: name.clone(),
            pci_bus_id: pci_bus_id(&name),
            fw_ver: String::new(),
            vendor_id: 0,
            max_qp: 0,
            max_qp_wr: 0,
            max_mr: 0,
            max_mr_size: 0,
            max_qp_rd_atom: 0,
            max_qp_init_rd_atom: 0,
            memory_windows: MemoryWindows {
                type1: false,
                type2a: false,
                type2b: false,
                max_mw: 0,
            },
            ports: Vec::new(),
            error: Some(e.to_string()),
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_states_have_verbs_names() {
        assert_eq!(port_state_name(1), "DOWN");
        assert_eq!(port_state_name(4), "ACTIVE");
        assert_eq!(port_state_name(5), "ACTIVE_DEFER");
        assert_eq!(port_state_name(99), "UNKNOWN");
    }

    #[test]
    fn c_text_stops_at_nul() {
        let raw: Vec<libc::c_char> = b"1.2.3\0junk".iter().map(|&b| b as libc::c_char).collect();
        assert_eq!(c_text(&raw), "1.2.3");
    }

    #[test]
    fn mem_window_flags_match_verbs_h() {
        // enum ibv_device_cap_flags in infiniband/verbs.h
        assert_eq!(CAP_MEM_WINDOW, 0x0002_0000);
        assert_eq!(CAP_MEM_WINDOW_TYPE_2A, 0x0080_0000);
        assert_eq!(CAP_MEM_WINDOW_TYPE_2B, 0x0100_0000);
    }
}
