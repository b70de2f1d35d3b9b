//! Device enumeration and `Device`: an opened `ibv_context`, one `ibv_pd`, and the chosen port
//! and GID.

use std::ffi::CStr;
use std::net::Ipv6Addr;
use std::ptr::NonNull;
use std::sync::Arc;

use super::error::VerbsError;
use super::loader::Lib;
use super::select::{self, GidCandidate, GidKind, GidType};
use super::sys;

/// Where the kernel publishes RDMA devices.
const SYSFS_INFINIBAND: &str = "/sys/class/infiniband";

/// A device with an ACTIVE (or ACTIVE_DEFER) port, as listed by [`list_devices`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub name: String,
    /// PCIe bus id (`0000:43:00.0`), `None` for devices without a PCI parent (rxe, siw).
    pub pci_bus_id: Option<String>,
    /// The first ACTIVE port.
    pub port: u8,
}

/// Path MTU (`enum ibv_mtu` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mtu {
    M256 = 1,
    M512 = 2,
    M1024 = 3,
    M2048 = 4,
    M4096 = 5,
}

impl Mtu {
    pub fn from_raw(raw: u32) -> Option<Mtu> {
        match raw {
            1 => Some(Mtu::M256),
            2 => Some(Mtu::M512),
            3 => Some(Mtu::M1024),
            4 => Some(Mtu::M2048),
            5 => Some(Mtu::M4096),
            _ => None,
        }
    }

    /// The MTU in bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

/// The port and GID a `Device` uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    pub port: u8,
    pub active_mtu: Mtu,
    /// Largest message of one work request (`ibv_port_attr.max_msg_sz`); split transfers by it.
    pub max_msg_sz: u32,
    pub gid: [u8; 16],
    pub gid_index: u8,
    pub gid_kind: GidKind,
}

/// Device limits from `ibv_query_device` (values above a field's range are clamped to its max).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Responder side: the largest `max_dest_rd_atomic`.
    pub max_qp_rd_atom: u8,
    /// Requester side: the largest `max_rd_atomic`.
    pub max_qp_init_rd_atom: u8,
    pub max_qp_wr: u32,
    pub max_mr_size: u64,
    pub vendor_id: u32,
    /// `IBV_DEVICE_MEM_WINDOW_TYPE_2B`: type-2 memory windows bound by the QP that owns them
    /// (docs/protocol.md 9.6-9.8).
    pub mem_window_type_2b: bool,
    /// Memory windows the device can hold.
    pub max_mw: u32,
}

/// The result of `ibv_get_device_list`, freed on drop. `list` is `None` when the kernel has no
/// RDMA support (`ENOSYS`): that is a machine with no devices, not an error.
pub(super) struct DeviceList<'a> {
    lib: &'a Lib,
    list: Option<NonNull<*mut sys::ibv_device>>,
    len: usize,
}

impl<'a> DeviceList<'a> {
    pub(super) fn get(lib: &'a Lib) -> Result<DeviceList<'a>, VerbsError> {
        let mut num: libc::c_int = 0;
        // SAFETY: `num` is a valid out-pointer; the list is freed by `Drop`.
        let list = unsafe { (lib.get_device_list)(&mut num) };
        let Some(list) = NonNull::new(list) else {
            let e = VerbsError::last_os("ibv_get_device_list", "cannot list RDMA devices");
            if e.errno == libc::ENOSYS {
                tracing::debug!("no kernel RDMA support (ibv_get_device_list: ENOSYS): no devices");
                return Ok(DeviceList {
                    lib,
                    list: None,
                    len: 0,
                });
            }
            return Err(e);
        };
        Ok(DeviceList {
            lib,
            list: Some(list),
            len: usize::try_from(num).unwrap_or(0),
        })
    }

    /// (name, device) pairs.
    pub(super) fn devices(&self) -> Vec<(String, NonNull<sys::ibv_device>)> {
        let Some(list) = self.list else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(self.len);
        for i in 0..self.len {
            // SAFETY: the list holds `len` device pointers and lives as long as `self`.
            let dev = unsafe { *list.as_ptr().add(i) };
            let Some(dev) = NonNull::new(dev) else {
                continue;
            };
            // SAFETY: `dev` is a device of the live list; the returned name is NUL-terminated
            // and owned by the device.
            let name = unsafe { (self.lib.get_device_name)(dev.as_ptr()) };
            if name.is_null() {
                continue;
            }
            // SAFETY: non-NULL, NUL-terminated (above); copied before the list is freed.
            let name = unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned();
            out.push((name, dev));
        }
        out
    }
}

impl Drop for DeviceList<'_> {
    fn drop(&mut self) {
        if let Some(list) = self.list {
            // SAFETY: the list came from ibv_get_device_list and is freed exactly once.
            unsafe { (self.lib.free_device_list)(list.as_ptr()) }
        }
    }
}

/// An opened device context; `Drop` closes it.
pub(crate) struct Context {
    pub(crate) lib: Arc<Lib>,
    pub(crate) ctx: NonNull<sys::ibv_context>,
}

impl Context {
    pub(super) fn open(
        lib: &Arc<Lib>,
        name: &str,
        dev: NonNull<sys::ibv_device>,
    ) -> Result<Context, VerbsError> {
        // SAFETY: `dev` is a device of a live device list.
        let ctx = unsafe { (lib.open_device)(dev.as_ptr()) };
        match NonNull::new(ctx) {
            Some(ctx) => Ok(Context {
                lib: Arc::clone(lib),
                ctx,
            }),
            None => Err(VerbsError::last_os(
                "ibv_open_device",
                format!("device {name}"),
            )),
        }
    }

    pub(super) fn query_device(&self) -> Result<sys::ibv_device_attr, VerbsError> {
        // SAFETY: ibv_device_attr is plain old data; all-zero is a valid value.
        let mut attr: sys::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live context, valid out-pointer of the header's type.
        let rc = unsafe { (self.lib.query_device)(self.ctx.as_ptr(), &mut attr) };
        if rc != 0 {
            return Err(VerbsError::from_rc("ibv_query_device", rc, ""));
        }
        Ok(attr)
    }

    pub(super) fn query_port(&self, port: u8) -> Result<sys::ibv_port_attr, VerbsError> {
        // SAFETY: plain old data, zeroed as verbs.h's inline wrapper does before the call.
        let mut attr: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: live context; the buffer is the full current struct, at least as large as the
        // `_compat_ibv_port_attr` the exported symbol is declared with.
        let rc = unsafe { (self.lib.query_port)(self.ctx.as_ptr(), port, &mut attr) };
        if rc != 0 {
            return Err(VerbsError::from_rc(
                "ibv_query_port",
                rc,
                format!("port {port}"),
            ));
        }
        Ok(attr)
    }

    /// The first port 1..=phys_port_cnt whose state is ACTIVE or ACTIVE_DEFER.
    fn first_active_port(
        &self,
        phys_port_cnt: u8,
    ) -> Result<Option<(u8, sys::ibv_port_attr)>, VerbsError> {
        for port in 1..=phys_port_cnt {
            let attr = self.query_port(port)?;
            if attr.state == sys::IBV_PORT_ACTIVE || attr.state == sys::IBV_PORT_ACTIVE_DEFER {
                return Ok(Some((port, attr)));
            }
        }
        Ok(None)
    }

    /// Every readable, non-empty GID entry of `port`, with its RoCE type. Uses
    /// `ibv_query_gid_ex` when libibverbs has it; otherwise `ibv_query_gid` plus the type from
    /// sysfs (`ports/<port>/gid_attrs/types/<i>`).
    pub(super) fn gid_candidates(
        &self,
        name: &str,
        port: u8,
        gid_tbl_len: i32,
    ) -> Vec<GidCandidate> {
        let len = u32::try_from(gid_tbl_len).unwrap_or(0);
        let mut out = Vec::new();
        for index in 0..len {
            let entry = match self.lib.query_gid_ex {
                Some(query_gid_ex) => {
                    let mut entry = sys::ibv_gid_entry::default();
                    // SAFETY: live context, valid out-pointer, entry_size = the struct we pass.
                    let rc = unsafe {
                        query_gid_ex(
                            self.ctx.as_ptr(),
                            u32::from(port),
                            index,
                            &mut entry,
                            0,
                            std::mem::size_of::<sys::ibv_gid_entry>(),
                        )
                    };
                    if rc != 0 {
                        let e = VerbsError::from_rc("ibv_query_gid_ex", rc, "");
                        if e.errno != libc::ENODATA {
                            tracing::debug!(device = name, port, index, error = %e, "GID entry unreadable");
                        }
                        continue;
                    }
                    GidCandidate {
                        index,
                        gid: entry.gid.raw,
                        gid_type: GidType::from_verbs(entry.gid_type),
                    }
                }
                None => {
                    let mut gid = sys::ibv_gid::default();
                    let Ok(c_index) = libc::c_int::try_from(index) else {
                        break;
                    };
                    // SAFETY: live context, valid out-pointer.
                    let rc =
                        unsafe { (self.lib.query_gid)(self.ctx.as_ptr(), port, c_index, &mut gid) };
                    if rc != 0 {
                        continue;
                    }
                    let path =
                        format!("{SYSFS_INFINIBAND}/{name}/ports/{port}/gid_attrs/types/{index}");
                    let gid_type = std::fs::read_to_string(path)
                        .map(|text| GidType::from_sysfs(&text))
                        .unwrap_or(GidType::Other);
                    GidCandidate {
                        index,
                        gid: gid.raw,
                        gid_type,
                    }
                }
            };
            out.push(entry);
        }
        out
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context was opened by `Context::open` and is closed exactly once; every
        // child (PD, CQ, QP, MR) holds an Arc that keeps this `Context` alive until it is gone.
        let rc = unsafe { (self.lib.close_device)(self.ctx.as_ptr()) };
        if rc != 0 {
            let e = VerbsError::from_rc("ibv_close_device", rc, "");
            tracing::warn!(error = %e, "closing the RDMA device failed");
        }
    }
}

/// The PCIe bus id of device `name`: the basename of the resolved `device` link in sysfs.
pub(super) fn pci_bus_id(name: &str) -> Option<String> {
    let path = std::fs::canonicalize(format!("{SYSFS_INFINIBAND}/{name}/device")).ok()?;
    Some(path.file_name()?.to_string_lossy().into_owned())
}

/// RDMA devices that pass `nic_hint` (comma-separated exact names, leading spaces and tabs of
/// each item ignored) and have an ACTIVE or ACTIVE_DEFER port, in libibverbs' order. A device
/// that cannot be opened or queried is skipped (and logged).
pub fn list_devices(lib: &Arc<Lib>, nic_hint: Option<&str>) -> Result<Vec<DeviceInfo>, VerbsError> {
    let list = DeviceList::get(lib)?;
    let mut out = Vec::new();
    for (name, dev) in list.devices() {
        if !select::hint_matches(nic_hint, &name) {
            continue;
        }
        let active = Context::open(lib, &name, dev).and_then(|ctx| {
            let attr = ctx.query_device()?;
            ctx.first_active_port(attr.phys_port_cnt)
        });
        match active {
            Ok(Some((port, _))) => out.push(DeviceInfo {
                pci_bus_id: pci_bus_id(&name),
                name,
                port,
            }),
            Ok(None) => tracing::debug!(device = %name, "RDMA device has no active port; skipped"),
            Err(e) => tracing::warn!(device = %name, error = %e, "RDMA device skipped"),
        }
    }
    Ok(out)
}

/// An opened RDMA device: its context, one protection domain, the first ACTIVE port with its
/// active MTU, and the best GID of that port. Shared as `Arc<Device>` by every QP and MR.
pub struct Device {
    pub(crate) pd: NonNull<sys::ibv_pd>,
    // Dropped after `Device::drop` has deallocated the PD.
    pub(crate) ctx: Context,
    name: String,
    port: PortInfo,
    caps: DeviceCaps,
}

// SAFETY: libibverbs is thread-safe: verbs on one context and PD may be called from any thread,
// concurrently (rdma-core verbs(7), "thread safety"; providers lock their own data-path objects).
// `Device` has no interior mutability of its own and frees its PD and context only in `Drop`.
unsafe impl Send for Device {}
// SAFETY: as above; `&Device` only creates children (CQ, QP, MR) on the shared context and PD,
// which libibverbs allows from several threads at once.
unsafe impl Sync for Device {}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name)
            .field("port", &self.port)
            .finish()
    }
}

fn clamp_u8(v: libc::c_int) -> u8 {
    u8::try_from(v.max(0)).unwrap_or(u8::MAX)
}

impl Device {
    /// Opens the device named exactly `name`: its first ACTIVE port, that port's active MTU and
    /// its best GID (RoCEv2 IPv4-mapped > RoCEv2 global > RoCEv2 link-local > RoCEv1 global >
    /// RoCEv1 link-local; zero GIDs skipped), and allocates a PD. No active port or no usable GID
    /// is an error.
    pub fn open(lib: &Arc<Lib>, name: &str) -> Result<Arc<Device>, VerbsError> {
        let list = DeviceList::get(lib)?;
        let Some((_, dev)) = list.devices().into_iter().find(|(n, _)| n == name) else {
            return Err(VerbsError::new(
                "ibv_open_device",
                libc::ENODEV,
                format!("no RDMA device named {name:?}"),
            ));
        };
        let ctx = Context::open(lib, name, dev)?;
        drop(list);
        let attr = ctx.query_device()?;
        let Some((port, port_attr)) = ctx.first_active_port(attr.phys_port_cnt)? else {
            return Err(VerbsError::new(
                "ibv_query_port",
                libc::ENETDOWN,
                format!(
                    "device {name} has no ACTIVE port among {}",
                    attr.phys_port_cnt
                ),
            ));
        };
        let Some(active_mtu) = Mtu::from_raw(port_attr.active_mtu) else {
            return Err(VerbsError::new(
                "ibv_query_port",
                libc::EPROTO,
                format!(
                    "device {name} port {port}: unknown active_mtu {}",
                    port_attr.active_mtu
                ),
            ));
        };
        let candidates = ctx.gid_candidates(name, port, port_attr.gid_tbl_len);
        let Some((best, gid_kind)) = select::best_gid(&candidates) else {
            return Err(VerbsError::new(
                "gid selection",
                libc::ENODATA,
                format!(
                    "device {name} port {port}: no usable RoCE GID among {} entries ({} readable)",
                    port_attr.gid_tbl_len,
                    candidates.len()
                ),
            ));
        };
        let gid_index = u8::try_from(best.index).unwrap_or(u8::MAX); // best_gid keeps indexes <= 255
                                                                     // SAFETY: live context.
        let pd = unsafe { (lib.alloc_pd)(ctx.ctx.as_ptr()) };
        let Some(pd) = NonNull::new(pd) else {
            return Err(VerbsError::last_os(
                "ibv_alloc_pd",
                format!("device {name}"),
            ));
        };
        let port = PortInfo {
            port,
            active_mtu,
            max_msg_sz: port_attr.max_msg_sz,
            gid: best.gid,
            gid_index,
            gid_kind,
        };
        let caps = DeviceCaps {
            max_qp_rd_atom: clamp_u8(attr.max_qp_rd_atom),
            max_qp_init_rd_atom: clamp_u8(attr.max_qp_init_rd_atom),
            max_qp_wr: u32::try_from(attr.max_qp_wr.max(0)).unwrap_or(0),
            max_mr_size: attr.max_mr_size,
            vendor_id: attr.vendor_id,
            mem_window_type_2b: attr.device_cap_flags & sys::IBV_DEVICE_MEM_WINDOW_TYPE_2B != 0,
            max_mw: u32::try_from(attr.max_mw.max(0)).unwrap_or(0),
        };
        tracing::info!(
            device = name,
            port = port.port,
            mtu = active_mtu.bytes(),
            gid_index,
            gid = %Ipv6Addr::from(port.gid),
            kind = ?gid_kind,
            "RDMA device opened"
        );
        Ok(Arc::new(Device {
            pd,
            ctx,
            name: name.to_owned(),
            port,
            caps,
        }))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn port(&self) -> &PortInfo {
        &self.port
    }

    pub fn caps(&self) -> &DeviceCaps {
        &self.caps
    }

    /// Whether the port chosen at [`Device::open`] is ACTIVE or ACTIVE_DEFER now
    /// (`ibv_query_port`): false once its link went down since.
    pub fn port_is_active(&self) -> Result<bool, VerbsError> {
        let attr = self.ctx.query_port(self.port.port)?;
        Ok(attr.state == sys::IBV_PORT_ACTIVE || attr.state == sys::IBV_PORT_ACTIVE_DEFER)
    }

    pub(crate) fn lib(&self) -> &Lib {
        &self.ctx.lib
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: the PD was allocated in `open` and is freed exactly once; every MR and QP on it
        // holds an `Arc<Device>`, so none is left.
        let rc = unsafe { (self.ctx.lib.dealloc_pd)(self.pd.as_ptr()) };
        if rc != 0 {
            let e = VerbsError::from_rc("ibv_dealloc_pd", rc, "");
            tracing::warn!(device = %self.name, error = %e, "freeing the protection domain failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_values_match_ibv_mtu() {
        let table = [(1, 256), (2, 512), (3, 1024), (4, 2048), (5, 4096)];
        for (raw, bytes) in table {
            let mtu = Mtu::from_raw(raw).expect("valid ibv_mtu");
            assert_eq!(mtu as u32, raw);
            assert_eq!(mtu.bytes(), bytes);
        }
        assert_eq!(Mtu::from_raw(0), None);
        assert_eq!(Mtu::from_raw(6), None);
    }

    #[test]
    #[ignore = "needs an RDMA device: runs in the lane (make e2e), fails there without one"]
    fn sysfs_gid_type_fallback_picks_the_same_gid_as_query_gid_ex() {
        let hint = crate::verbs::lane_tests::rdma_device_hint()
            .expect("no RDMA device: this test needs one (the lane)");
        let with_ex = Arc::new(Lib::load_from(&["libibverbs.so.1"]).expect("libibverbs loads"));
        assert!(with_ex.query_gid_ex.is_some());
        let mut without_ex = Lib::load_from(&["libibverbs.so.1"]).expect("libibverbs loads");
        without_ex.query_gid_ex = None;
        let without_ex = Arc::new(without_ex);
        let devices = list_devices(&with_ex, Some(&hint)).expect("list_devices");
        let name = &devices.first().expect("a device with an active port").name;
        let a = Device::open(&with_ex, name).expect("open with ibv_query_gid_ex");
        let b = Device::open(&without_ex, name).expect("open with the sysfs fallback");
        assert_eq!(a.port(), b.port());
        assert_eq!(a.caps(), b.caps());
    }

    #[test]
    fn clamp_u8_table() {
        assert_eq!(clamp_u8(-1), 0);
        assert_eq!(clamp_u8(16), 16);
        assert_eq!(clamp_u8(255), 255);
        assert_eq!(clamp_u8(4096), 255);
    }
}
