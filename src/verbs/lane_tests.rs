//! What the library's own lane tests share (unit tests that need an RDMA device, `#[ignore]`d
//! outside the lane, see tests/verbs_rxe.rs): the device, registered memory, a QP in RTS.
//! Compiled only under #[cfg(test)] (verbs/mod.rs); the library never reads its variables.

use std::sync::Arc;

use super::{list_devices, Access, Device, Lib, Mr, RcPeer, RcQp};

/// The device hint when an RDMA device is present: the lane's `HIPOBJ_VM_DEVICES` ("rxe0 rxe1",
/// made a comma-separated hint), or any device in sysfs; `None` when there is none.
pub(crate) fn rdma_device_hint() -> Option<Option<String>> {
    let env = std::env::var("HIPOBJ_VM_DEVICES")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| v.split_whitespace().collect::<Vec<_>>().join(","));
    if env.is_some() {
        return Some(env);
    }
    let present = std::fs::read_dir("/sys/class/infiniband")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    present.then_some(None)
}

/// The first device with an active port; panics without one.
pub(crate) fn open() -> Arc<Device> {
    let hint = rdma_device_hint().expect("no RDMA device: this test needs one (the lane)");
    let lib = Lib::load().expect("libibverbs.so.1 loads");
    let devices = list_devices(&lib, hint.as_deref()).expect("list_devices");
    let name = &devices.first().expect("a device with an active port").name;
    Device::open(&lib, name).expect("Device::open")
}

/// Host memory and its registration with `access` (drops the registration first).
pub(crate) struct TestMemory {
    pub mr: Mr,
    _bytes: Vec<u8>,
}

impl TestMemory {
    pub(crate) fn new(device: &Arc<Device>, len: usize, access: Access) -> TestMemory {
        let bytes = vec![0u8; len];
        // SAFETY: the Vec's heap memory lives in the returned value, which drops `mr` first.
        let mr =
            unsafe { device.register(bytes.as_ptr() as usize, len, access) }.expect("register");
        TestMemory { mr, _bytes: bytes }
    }
}

/// Move `qp` (in INIT) to RTS aimed at a QP of the same device: binds and invalidations are
/// local operations, so the peer need not answer.
pub(crate) fn to_rts(qp: &mut RcQp, device: &Device, peer_qp_num: u32) {
    let peer = RcPeer {
        qp_num: peer_qp_num,
        gid: device.port().gid,
    };
    qp.connect(&peer, 0x10, 0x20, 1).expect("to RTS");
}
