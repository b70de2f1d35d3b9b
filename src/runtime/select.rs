//! Which NIC and which GPU a runtime uses (include/hipobj.h's `gpuDevice` and
//! `nicHint`).

use super::{Gpu, GpuSource, InitConfig};
use crate::error::{Error, OpError, Result};
use crate::hip::{self, GpuSelection};
use crate::verbs;
use std::sync::Arc;

/// `nicHint`, if it names anything (NULL, "" and blanks allow every device).
fn nic_hint(cfg: &InitConfig) -> Option<&str> {
    filled(cfg.nic_hint.as_deref())
}

fn filled(hint: Option<&str>) -> Option<&str> {
    hint.filter(|h| !h.trim().is_empty())
}

/// The device names a non-empty `nicHint` lists.
fn hinted_names(hint: &str) -> Vec<&str> {
    hint.split(',')
        .map(|s| s.trim_start_matches([' ', '\t']))
        .collect()
}

/// Whether `nicHint` names exactly one RDMA device: then the NIC needs no GPU to be chosen by, so
/// a start for host memory only can use [`super::init_without_gpu`].
pub fn names_one_nic(hint: Option<&str>) -> bool {
    filled(hint).is_some_and(|h| hinted_names(h).len() == 1)
}

/// `gpuDevice` handling (include/hipobj.h) (the rules live in `hip::select_gpu`), against
/// the runtime `hip::load_gpu_runtime` picks: HIP when it has a device, else CUDA when it has one.
pub(super) fn resolve_gpu(cfg: &InitConfig, source: GpuSource) -> Result<Option<Gpu>> {
    let runtime = match source {
        GpuSource::Given(r) => Some(r),
        GpuSource::System => hip::load_gpu_runtime().ok(),
        GpuSource::Without => None,
    };
    match hip::select_gpu(runtime.as_deref(), cfg.gpu_device).map_err(|e| e.into_error())? {
        GpuSelection::Gpu { device, pci_bus_id } => match runtime {
            Some(runtime) => Ok(Some(Gpu {
                runtime,
                device,
                pci_bus_id,
            })),
            None => Err(Error::internal("a GPU was selected without a GPU runtime")),
        },
        GpuSelection::NoGpu { .. } if nic_hint(cfg).is_some() => Ok(None),
        GpuSelection::NoGpu { hip_error: 0 } => Err(Error::new(
            OpError::NicNotFound,
            "no GPU to choose a NIC by: set nicHint to the RDMA device to use",
        )),
        GpuSelection::NoGpu { hip_error } => Err(Error::with_hip(
            OpError::RdmaError,
            hip_error,
            "no usable GPU (hipGetDevice failed) and no nicHint",
        )),
    }
}

/// A device a runtime opens, and its PCIe distance to the GPU (0 for all without a GPU).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct NicChoice {
    pub name: String,
    pub distance: u32,
}

/// Every device a runtime opens, the preferred first: with a GPU, each hinted device with an
/// active port in PCIe-distance order (devices without a topology last); without one, the one
/// `nicHint` names. Then the devices of `HIPOBJ_NICS` not chosen yet (they need an active port
/// too; one without is skipped, and logged, when the runtime opens them).
pub(super) fn choose_nics(
    lib: &Arc<verbs::Lib>,
    cfg: &InitConfig,
    gpu_bus: Option<&str>,
) -> Result<Vec<NicChoice>> {
    let hint = nic_hint(cfg);
    let candidates = verbs::list_devices(lib, hint).map_err(Error::from)?;
    let mut chosen = match gpu_bus {
        Some(bus) => {
            let mut near = by_distance(&candidates, bus);
            let far = candidates
                .iter()
                .filter(|d| d.pci_bus_id.is_none())
                .map(|d| NicChoice {
                    name: d.name.clone(),
                    distance: u32::MAX,
                });
            near.extend(far);
            near
        }
        None => Vec::new(),
    };
    if chosen.is_empty() {
        let name = match the_named_nic(hint, &candidates) {
            Ok(name) => name,
            // With more devices to use, a named device whose port is down now is kept in the
            // list (left out when it cannot be opened) rather than failing the start: the others
            // carry the transfers. A name no device has stays an error.
            Err(e) => match hint.filter(|h| !cfg.env.nics.is_empty() && device_exists(h.trim())) {
                Some(h) => h.trim().to_owned(),
                None => return Err(e),
            },
        };
        chosen.push(NicChoice { name, distance: 0 });
    }
    let extra_distance = if gpu_bus.is_some() { u32::MAX } else { 0 };
    for name in &cfg.env.nics {
        if !chosen.iter().any(|c| &c.name == name) {
            chosen.push(NicChoice {
                name: name.clone(),
                distance: extra_distance,
            });
        }
    }
    Ok(chosen)
}

/// Whether the kernel has an RDMA device called `name`, whatever its ports' state.
fn device_exists(name: &str) -> bool {
    !name.is_empty()
        && !name.contains('/')
        && std::path::Path::new("/sys/class/infiniband")
            .join(name)
            .exists()
}

/// The candidates with a PCIe bus id, nearest `gpu_bus` first.
fn by_distance(candidates: &[verbs::DeviceInfo], gpu_bus: &str) -> Vec<NicChoice> {
    let mut near: Vec<NicChoice> = candidates
        .iter()
        .filter_map(|d| {
            d.pci_bus_id.as_deref().map(|b| NicChoice {
                name: d.name.clone(),
                distance: verbs::pci_distance(gpu_bus, b),
            })
        })
        .collect();
    near.sort_by_key(|c| c.distance);
    near
}

/// Without a GPU to choose by: the single device `nicHint` names, which must have an active port.
fn the_named_nic(hint: Option<&str>, candidates: &[verbs::DeviceInfo]) -> Result<String> {
    let Some(hint) = hint else {
        return Err(Error::new(
            OpError::NicNotFound,
            "no GPU to choose a NIC by: set nicHint to the RDMA device to use",
        ));
    };
    let names = hinted_names(hint);
    if names.len() != 1 {
        return Err(Error::new(
            OpError::NicNotFound,
            "without a GPU, nicHint must name a single RDMA device",
        ));
    }
    match candidates.iter().find(|d| d.name == names[0]) {
        Some(d) => Ok(d.name.clone()),
        None => Err(Error::new(
            OpError::NicNotFound,
            format!("RDMA device {:?} not found or has no active port", names[0]),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::names_one_nic;

    #[test]
    fn one_nic_is_one_name() {
        for hint in [
            None,
            Some(""),
            Some("  "),
            Some("rxe0,rxe1"),
            Some("rxe0, rxe1"),
        ] {
            assert!(!names_one_nic(hint), "{hint:?}");
        }
        for hint in ["rxe0", " rxe0", "mlx5_0"] {
            assert!(names_one_nic(Some(hint)), "{hint:?}");
        }
    }
}
