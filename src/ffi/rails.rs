//! The export of `include/hipobj_rails.h`: `hipObjRailStats`, the counters of each RDMA device
//! the runtime uses (docs/rails.md). The counters are [`Runtime::rail_stats`]'s, as the command
//! line's closing line and Python's `Session.rails()` show them: this file checks the arguments,
//! reads them once, and copies them out.
//!
//! [`Runtime::rail_stats`]: crate::runtime::Runtime::rail_stats

use super::types::hipObjError_t;
use super::{args, boundary};
use crate::runtime::RailStats;
use std::ffi::{c_char, c_int};

/// The exports of `include/hipobj_rails.h`, in header order.
pub const EXPORTED_FUNCTIONS_RAILS: [&str; 1] = ["hipObjRailStats"];

/// `HIPOBJ_RAIL_DEVICE_LEN`.
pub const HIPOBJ_RAIL_DEVICE_LEN: usize = 64;

/// `hipObjRailStats_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct hipObjRailStats_t {
    pub device: [c_char; HIPOBJ_RAIL_DEVICE_LEN],
    pub transfers: u64,
    pub bytes: u64,
    pub failovers: u64,
    pub portDowns: u64,
    pub portUps: u64,
    pub failbacks: u64,
    pub portUp: c_int,
}

impl From<&RailStats> for hipObjRailStats_t {
    fn from(r: &RailStats) -> hipObjRailStats_t {
        let mut device = [0 as c_char; HIPOBJ_RAIL_DEVICE_LEN];
        let name = r.device.as_bytes();
        let n = name.len().min(HIPOBJ_RAIL_DEVICE_LEN - 1);
        for (d, &b) in device.iter_mut().zip(&name[..n]) {
            *d = b as c_char;
        }
        hipObjRailStats_t {
            device,
            transfers: r.transfers,
            bytes: r.bytes,
            failovers: r.failovers,
            portDowns: r.port_downs,
            portUps: r.port_ups,
            failbacks: r.failbacks,
            portUp: c_int::from(r.port_up),
        }
    }
}

/// `hipObjRailStats`: not initialised; count NULL, or stats NULL with capacity; then the
/// counters of the first `capacity` devices and the number of devices.
///
/// # Safety
/// `stats` is NULL or writable for `capacity` elements; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hipObjRailStats(
    stats: *mut hipObjRailStats_t,
    capacity: usize,
    count: *mut usize,
) -> hipObjError_t {
    boundary::call("hipObjRailStats", || {
        let rt = args::runtime()?;
        let count = args::non_null(count, "count is NULL")?;
        if capacity > 0 {
            args::non_null(stats, "stats is NULL and capacity is not 0")?;
        }
        let rails = rt.rail_stats();
        for (i, r) in rails.iter().take(capacity).enumerate() {
            // SAFETY: non-NULL (checked above when capacity > 0) and writable for `capacity`
            // elements per the caller; i < capacity.
            unsafe { stats.add(i).write(hipObjRailStats_t::from(r)) };
        }
        // SAFETY: non-NULL and writable per the caller.
        unsafe { count.as_ptr().write(rails.len()) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_name_is_cut_to_fit_with_its_nul() {
        let long = RailStats {
            device: "d".repeat(100),
            port_up: true,
            transfers: 3,
            bytes: 7,
            failovers: 1,
            port_downs: 2,
            port_ups: 2,
            failbacks: 1,
        };
        let c = hipObjRailStats_t::from(&long);
        assert_eq!(c.device[HIPOBJ_RAIL_DEVICE_LEN - 1], 0);
        assert!(c.device[..HIPOBJ_RAIL_DEVICE_LEN - 1]
            .iter()
            .all(|&b| b == b'd' as c_char));
        assert_eq!(
            (c.transfers, c.bytes, c.failovers, c.portDowns, c.portUps),
            (3, 7, 1, 2, 2)
        );
        assert_eq!((c.failbacks, c.portUp), (1, 1));
        let short = hipObjRailStats_t::from(&RailStats {
            device: "rxe2".into(),
            ..long
        });
        assert_eq!(
            &short.device[..5],
            &[b'r', b'x', b'e', b'2', 0].map(|b| b as c_char)
        );
        assert_eq!(short.portUp, 1);
    }
}
