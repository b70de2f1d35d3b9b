//! Which GPU runtime `hipObjInit` works with: HIP when it has a device, else CUDA when it has one.
//! `gpuDevice` then indexes that runtime's devices (see `select`).

use super::error::HipLoadError;
use super::GpuRuntime;
use std::fmt;
use std::sync::Arc;

/// The kind of GPU runtime behind a [`GpuRuntime`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuPlatform {
    /// HIP (`libamdhip64`): AMD GPUs.
    Hip,
    /// The CUDA driver API (`libcuda.so.1`): NVIDIA GPUs.
    Cuda,
    /// The simulated device of test builds (feature `sim-gpu`).
    Simulated,
}

impl fmt::Display for GpuPlatform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GpuPlatform::Hip => "HIP",
            GpuPlatform::Cuda => "CUDA",
            GpuPlatform::Simulated => "simulated",
        })
    }
}

/// A way to load one runtime.
pub type RuntimeLoader<'a> = &'a dyn Fn() -> Result<Arc<dyn GpuRuntime>, HipLoadError>;

/// No GPU runtime loaded: why each one that was tried did not, in the order tried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoGpuRuntime {
    pub errors: Vec<HipLoadError>,
}

impl fmt::Display for NoGpuRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no GPU runtime (HIP or CUDA) could be loaded")?;
        for (i, err) in self.errors.iter().enumerate() {
            f.write_str(if i == 0 { ": " } else { "; " })?;
            write!(f, "{err}")?;
        }
        Ok(())
    }
}

impl std::error::Error for NoGpuRuntime {}

/// The first runtime of `loaders` that loads and has a device; loaders after it are not called.
/// When none has a device, the first one that loaded (so `hipObjInit` reports that runtime's "no
/// GPU" error, e.g. HIP's on an AMD-less host), or why none loaded.
pub fn choose_runtime(loaders: &[RuntimeLoader<'_>]) -> Result<Arc<dyn GpuRuntime>, NoGpuRuntime> {
    let mut first_loaded: Option<Arc<dyn GpuRuntime>> = None;
    let mut errors = Vec::new();
    for load in loaders {
        match load() {
            Ok(runtime) => match runtime.device_count() {
                Ok(count) if count > 0 => {
                    tracing::info!(platform = %runtime.platform(), count, "GPU runtime chosen");
                    return Ok(runtime);
                }
                answer => {
                    tracing::debug!(platform = %runtime.platform(), ?answer, "GPU runtime has no device");
                    first_loaded.get_or_insert(runtime);
                }
            },
            Err(err) => {
                tracing::debug!(%err, "GPU runtime did not load");
                errors.push(err);
            }
        }
    }
    first_loaded.ok_or(NoGpuRuntime { errors })
}

/// The runtime `hipObjInit` uses: HIP ([`super::load`]) when it has a device, else CUDA
/// ([`super::load_cuda`]) when it has one, else whichever loaded (HIP first). Both loads are
/// cached, so every caller (the library, `hipobj cp --gpu`) gets the same runtime.
pub fn load_gpu_runtime() -> Result<Arc<dyn GpuRuntime>, NoGpuRuntime> {
    let hip = || super::load();
    let cuda = || super::load_cuda().map(|runtime| runtime as Arc<dyn GpuRuntime>);
    choose_runtime(&[&hip, &cuda])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hip::{ScriptedGpu, HIP_ERROR_NOT_SUPPORTED, HIP_ERROR_NO_DEVICE};
    use std::cell::Cell;

    fn runtime(platform: GpuPlatform, count: Result<i32, i32>) -> Arc<dyn GpuRuntime> {
        Arc::new(ScriptedGpu {
            platform,
            current: Err(HIP_ERROR_NOT_SUPPORTED),
            count,
            bus_id: Err(HIP_ERROR_NOT_SUPPORTED),
        })
    }

    fn not_found() -> HipLoadError {
        HipLoadError::LibraryNotFound {
            tried: vec!["x".into()],
            reason: "absent".into(),
        }
    }

    fn chosen(loaders: &[RuntimeLoader<'_>]) -> Option<GpuPlatform> {
        choose_runtime(loaders).ok().map(|r| r.platform())
    }

    #[test]
    fn hip_with_a_device_wins_and_cuda_is_not_loaded() {
        let cuda_loads = Cell::new(0);
        let hip = || Ok(runtime(GpuPlatform::Hip, Ok(1)));
        let cuda = || {
            cuda_loads.set(cuda_loads.get() + 1);
            Ok(runtime(GpuPlatform::Cuda, Ok(1)))
        };
        assert_eq!(chosen(&[&hip, &cuda]), Some(GpuPlatform::Hip));
        assert_eq!(cuda_loads.get(), 0);
    }

    #[test]
    fn cuda_with_a_device_wins_over_hip_without_one() {
        let hip = || Ok(runtime(GpuPlatform::Hip, Err(HIP_ERROR_NO_DEVICE)));
        let cuda = || Ok(runtime(GpuPlatform::Cuda, Ok(2)));
        assert_eq!(chosen(&[&hip, &cuda]), Some(GpuPlatform::Cuda));
        let hip_absent = || Err(not_found());
        assert_eq!(chosen(&[&hip_absent, &cuda]), Some(GpuPlatform::Cuda));
    }

    #[test]
    fn without_any_device_the_first_loaded_runtime_answers() {
        let hip = || Ok(runtime(GpuPlatform::Hip, Err(HIP_ERROR_NO_DEVICE)));
        let cuda = || Ok(runtime(GpuPlatform::Cuda, Ok(0)));
        assert_eq!(chosen(&[&hip, &cuda]), Some(GpuPlatform::Hip));
        let absent = || Err(not_found());
        assert_eq!(chosen(&[&absent, &cuda]), Some(GpuPlatform::Cuda));
        assert_eq!(chosen(&[&absent, &absent]), None);
        assert_eq!(chosen(&[]), None);
    }

    #[test]
    fn when_none_loads_each_reason_is_kept_in_order() {
        let absent = || Err(not_found());
        let missing = || {
            Err(HipLoadError::MissingSymbol {
                library: "libcuda.so.1".into(),
                symbol: "cuInit",
            })
        };
        let Err(none) = choose_runtime(&[&absent, &missing]) else {
            panic!("a runtime was chosen");
        };
        assert_eq!(
            none.errors,
            vec![
                not_found(),
                HipLoadError::MissingSymbol {
                    library: "libcuda.so.1".into(),
                    symbol: "cuInit",
                }
            ]
        );
        let text = none.to_string();
        assert!(text.starts_with("no GPU runtime (HIP or CUDA) could be loaded: "));
        assert!(
            text.contains("none of x could be loaded: absent; libcuda.so.1 has no cuInit"),
            "{text}"
        );
    }

    #[test]
    fn platform_names() {
        assert_eq!(GpuPlatform::Hip.to_string(), "HIP");
        assert_eq!(GpuPlatform::Cuda.to_string(), "CUDA");
        assert_eq!(GpuPlatform::Simulated.to_string(), "simulated");
    }
}
