//! Which GPU `hipObjInit` works with: its `gpuDevice` rules (include/hipobj.h,
//! `hipObjConfig_t`) and the GPU's PCI bus id for choosing the closest NIC ([`crate::verbs`]'s
//! `select`).

use super::error::{HipError, HIP_ERROR_NO_DEVICE};
use super::GpuRuntime;
use crate::error::{Error, OpError};

/// The GPU that was chosen, or that there is none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuSelection {
    /// GPU `device`, with its PCI bus id if HIP reported one. Without a bus id there is no
    /// topology, and the NIC is chosen from `nicHint` alone.
    Gpu {
        device: i32,
        pci_bus_id: Option<String>,
    },
    /// This host has no GPU HIP can use. `hip_error` is the error that said so (0 when no HIP
    /// runtime is loaded at all). `hipObjInit` carries on without a GPU if `nicHint` names a NIC,
    /// and otherwise fails with `hipObjRdmaError` and this `hipError`.
    NoGpu { hip_error: i32 },
}

/// Why `gpuDevice` can't be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuSelectError {
    /// `gpuDevice` is below -1 or names a GPU that doesn't exist: `hipObjInvalidValue`.
    NoSuchDevice { requested: i32, count: i32 },
    /// A HIP call failed for another reason: `hipObjRdmaError` with this `hipError`.
    Hip(HipError),
}

impl GpuSelectError {
    /// The core error `hipObjInit` returns for it.
    pub fn into_error(self) -> Error {
        match self {
            GpuSelectError::NoSuchDevice { requested, count } => Error::invalid(format!(
                "gpuDevice {requested} doesn't name one of the {count} GPUs"
            )),
            GpuSelectError::Hip(err) => err.to_error(OpError::RdmaError),
        }
    }
}

/// Resolve `hipObjConfig_t.gpuDevice` (`requested`) against `gpu` (`None`: no HIP runtime loaded).
///
/// * `-1`: the calling thread's current device (`hipGetDevice`). If that fails because the host
///   has no GPU, the result is `NoGpu`. ROCm 5.2 answers `hipGetDevice` on a GPU-less host with
///   `hipErrorInvalidDevice` (101), not `hipErrorNoDevice` (100), so any `hipGetDevice` failure is
///   taken as "no GPU" when `hipGetDeviceCount` then reports none (`hipErrorNoDevice` or 0);
///   `hip_error` keeps `hipGetDevice`'s code. Other failures are `Hip` errors.
/// * `0..`: must be below `hipGetDeviceCount` (`hipErrorNoDevice` counts as 0 GPUs; any other
///   error is a `Hip` error).
/// * below -1: `NoSuchDevice`.
pub fn select_gpu(
    gpu: Option<&dyn GpuRuntime>,
    requested: i32,
) -> Result<GpuSelection, GpuSelectError> {
    if requested < -1 {
        return Err(GpuSelectError::NoSuchDevice {
            requested,
            count: 0,
        });
    }
    let Some(gpu) = gpu else {
        return match requested {
            -1 => Ok(GpuSelection::NoGpu { hip_error: 0 }),
            _ => Err(GpuSelectError::NoSuchDevice {
                requested,
                count: 0,
            }),
        };
    };
    let device = if requested == -1 {
        match gpu.current_device() {
            Ok(device) => device,
            Err(err) if err.code == HIP_ERROR_NO_DEVICE || host_has_no_gpu(gpu) => {
                tracing::info!(%err, "no GPU: hipGetDevice failed and HIP reports no device");
                return Ok(GpuSelection::NoGpu {
                    hip_error: err.code,
                });
            }
            Err(err) => return Err(GpuSelectError::Hip(err)),
        }
    } else {
        let count = match gpu.device_count() {
            Ok(count) => count,
            Err(err) if err.code == HIP_ERROR_NO_DEVICE => 0,
            Err(err) => return Err(GpuSelectError::Hip(err)),
        };
        if requested >= count {
            return Err(GpuSelectError::NoSuchDevice { requested, count });
        }
        requested
    };
    let pci_bus_id = match gpu.pci_bus_id(device) {
        Ok(id) => Some(id),
        Err(err) => {
            tracing::warn!(%err, device, "no PCI bus id for the GPU; choosing the NIC without topology");
            None
        }
    };
    Ok(GpuSelection::Gpu { device, pci_bus_id })
}

fn host_has_no_gpu(gpu: &dyn GpuRuntime) -> bool {
    match gpu.device_count() {
        Ok(count) => count == 0,
        Err(err) => err.code == HIP_ERROR_NO_DEVICE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hip::{GpuPlatform, ScriptedGpu, HIP_ERROR_INVALID_DEVICE};

    /// What Debian's ROCm 5.2 answered on this GPU-less machine.
    const ROCM52_NO_GPU: ScriptedGpu = ScriptedGpu {
        platform: GpuPlatform::Hip,
        current: Err(HIP_ERROR_INVALID_DEVICE),
        count: Err(HIP_ERROR_NO_DEVICE),
        bus_id: Err(101),
    };

    fn two_gpus() -> ScriptedGpu {
        ScriptedGpu {
            platform: GpuPlatform::Hip,
            current: Ok(1),
            count: Ok(2),
            bus_id: Ok("0000:42:00.0"),
        }
    }

    #[test]
    fn current_device_on_a_gpu_less_rocm52_host_is_no_gpu() {
        assert_eq!(
            select_gpu(Some(&ROCM52_NO_GPU), -1),
            Ok(GpuSelection::NoGpu {
                hip_error: HIP_ERROR_INVALID_DEVICE
            })
        );
    }

    #[test]
    fn no_device_from_hip_get_device_is_no_gpu() {
        let gpu = ScriptedGpu {
            platform: GpuPlatform::Hip,
            current: Err(HIP_ERROR_NO_DEVICE),
            count: Err(999),
            bus_id: Err(1),
        };
        assert_eq!(
            select_gpu(Some(&gpu), -1),
            Ok(GpuSelection::NoGpu {
                hip_error: HIP_ERROR_NO_DEVICE
            })
        );
    }

    #[test]
    fn other_hip_get_device_failures_are_hip_errors() {
        let gpu = ScriptedGpu {
            platform: GpuPlatform::Hip,
            current: Err(999),
            count: Ok(2),
            bus_id: Ok("x"),
        };
        assert_eq!(
            select_gpu(Some(&gpu), -1),
            Err(GpuSelectError::Hip(HipError::new("hipGetDevice", 999)))
        );
        let err = GpuSelectError::Hip(HipError::new("hipGetDevice", 999)).into_error();
        assert_eq!((err.code, err.hip_error), (OpError::RdmaError, 999));
    }

    #[test]
    fn current_device_with_its_bus_id() {
        let selected = select_gpu(Some(&two_gpus()), -1);
        assert_eq!(
            selected,
            Ok(GpuSelection::Gpu {
                device: 1,
                pci_bus_id: Some("0000:42:00.0".into())
            })
        );
    }

    #[test]
    fn explicit_devices_are_checked_against_the_count() {
        assert!(matches!(
            select_gpu(Some(&two_gpus()), 0),
            Ok(GpuSelection::Gpu { device: 0, .. })
        ));
        assert_eq!(
            select_gpu(Some(&two_gpus()), 2),
            Err(GpuSelectError::NoSuchDevice {
                requested: 2,
                count: 2
            })
        );
        assert_eq!(
            select_gpu(Some(&ROCM52_NO_GPU), 0),
            Err(GpuSelectError::NoSuchDevice {
                requested: 0,
                count: 0
            })
        );
        let broken = ScriptedGpu {
            platform: GpuPlatform::Hip,
            current: Ok(0),
            count: Err(3),
            bus_id: Ok("x"),
        };
        assert_eq!(
            select_gpu(Some(&broken), 0),
            Err(GpuSelectError::Hip(HipError::new("hipGetDeviceCount", 3)))
        );
        let err = GpuSelectError::NoSuchDevice {
            requested: 2,
            count: 2,
        }
        .into_error();
        assert_eq!((err.code, err.hip_error), (OpError::InvalidValue, 0));
    }

    #[test]
    fn below_minus_one_is_invalid() {
        assert!(matches!(
            select_gpu(Some(&two_gpus()), -2),
            Err(GpuSelectError::NoSuchDevice { .. })
        ));
        assert!(matches!(
            select_gpu(None, -7),
            Err(GpuSelectError::NoSuchDevice { .. })
        ));
    }

    #[test]
    fn without_a_hip_runtime_there_is_no_gpu() {
        assert_eq!(
            select_gpu(None, -1),
            Ok(GpuSelection::NoGpu { hip_error: 0 })
        );
        assert_eq!(
            select_gpu(None, 0),
            Err(GpuSelectError::NoSuchDevice {
                requested: 0,
                count: 0
            })
        );
    }

    #[test]
    fn a_missing_bus_id_means_no_topology() {
        let gpu = ScriptedGpu {
            platform: GpuPlatform::Hip,
            current: Ok(0),
            count: Ok(1),
            bus_id: Err(1),
        };
        assert_eq!(
            select_gpu(Some(&gpu), 0),
            Ok(GpuSelection::Gpu {
                device: 0,
                pci_bus_id: None
            })
        );
    }
}
