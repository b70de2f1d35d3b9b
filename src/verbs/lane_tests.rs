//! What the library's own lane tests share (unit tests that need an RDMA device, `#[ignore]`d
//! outside the lane, see tests/verbs_rxe.rs): the device, registered memory, a QP in RTS.
//! Compiled only under #[cfg(test)] (verbs/mod.rs); the library never reads its variables.

use std::sync::Arc;

use super::{list_devices, Access, Device, Lib, Mr, RcPeer, RcQp};

// The lane's devices, as the end-to-end tests find them (one owner: tests/support/lane.rs).
#[path = "../../tests/support/lane.rs"]
mod lane;
pub(crate) use lane::device_hint as rdma_device_hint;

/// The first device with an active port; panics without one.
pub(crate) fn open() -> Arc<Device> {
    let hint = rdma_device_hint().expect("no RDMA device: this test needs one (the lane)");
    let lib = Lib::load().expect("libibverbs.so.1 loads");
    let devices = list_devices(&lib, Some(&hint)).expect("list_devices");
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
