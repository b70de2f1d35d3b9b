//! `hipMemoryType` values, which changed meaning in ROCm 6.
//!
//! `hipPointerGetAttributes` fills `hipPointerAttribute_t`, whose first field (`memoryType` up to
//! ROCm 5.x, `type` from ROCm 6.0, same offset and size) is a `hipMemoryType`. ROCm 6.0 renumbered
//! that enum to follow CUDA's `cudaMemoryType`:
//!
//! | name         | ROCm ≤ 5.x | ROCm ≥ 6.0 |
//! |--------------|-----------:|-----------:|
//! | Unregistered |          — |          0 |
//! | Host         |          0 |          1 |
//! | Device       |          1 |          2 |
//! | Array        |          2 |         10 |
//! | Unified      |          3 |         11 |
//! | Managed      |          4 |          3 |
//!
//! So a raw `1` means "device" on ROCm 5 and "host" on ROCm 6: read with the wrong table, every
//! device buffer looks like host memory and vice versa. Which table applies is decided from
//! `hipRuntimeGetVersion` (`HIP_VERSION = major * 10_000_000 + minor * 100_000 + patch`, e.g.
//! 50221153 for ROCm 5.2.3 as measured on Debian 12's libamdhip64-5): major 6 and above use the new
//! values. If the version can't be read, the soname decides (`libamdhip64.so.5` → old table).
//!
//! ROCm 6 also made `hipPointerGetAttributes` succeed with `hipMemoryTypeUnregistered` for plain
//! `malloc` memory, where ROCm 5 fails with `hipErrorInvalidValue`; both end up as host memory or
//! "unknown", which the library treats alike (no allocation-range check, plain `ibv_reg_mr`).

use super::PointerKind;

/// The first `HIP_VERSION` that uses the ROCm 6 numbering.
pub const HIP_VERSION_6_0: i32 = 60_000_000;

/// Which numbering of `hipMemoryType` a runtime uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryTypeTable {
    /// ROCm 5.x and earlier: Host 0, Device 1, Array 2, Unified 3, Managed 4.
    Rocm5,
    /// ROCm 6.0 and later: Unregistered 0, Host 1, Device 2, Managed 3, Array 10, Unified 11.
    Rocm6,
}

impl MemoryTypeTable {
    /// The table for a `hipRuntimeGetVersion` value.
    pub fn for_runtime_version(hip_version: i32) -> MemoryTypeTable {
        if hip_version >= HIP_VERSION_6_0 {
            MemoryTypeTable::Rocm6
        } else {
            MemoryTypeTable::Rocm5
        }
    }

    /// The table implied by a library soname's major version, when the runtime can't say.
    pub fn for_soname_major(major: u32) -> MemoryTypeTable {
        if major >= 6 {
            MemoryTypeTable::Rocm6
        } else {
            MemoryTypeTable::Rocm5
        }
    }

    /// What a raw `hipMemoryType` of a pointer on `device` means for hipObject.
    ///
    /// Only device memory gets a dmabuf export and an allocation-range check; host and
    /// unregistered memory is host memory; array, unified and managed memory are `Unknown`, which
    /// callers treat as host memory, as the reference does for anything that isn't device memory.
    pub fn classify(self, raw: i32, device: i32) -> PointerKind {
        match (self, raw) {
            (MemoryTypeTable::Rocm5, 0) => PointerKind::Host,
            (MemoryTypeTable::Rocm5, 1) => PointerKind::Device { device },
            (MemoryTypeTable::Rocm6, 0 | 1) => PointerKind::Host,
            (MemoryTypeTable::Rocm6, 2) => PointerKind::Device { device },
            _ => PointerKind::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_picks_table() {
        assert_eq!(
            MemoryTypeTable::for_runtime_version(50_221_153),
            MemoryTypeTable::Rocm5
        );
        assert_eq!(
            MemoryTypeTable::for_runtime_version(59_999_999),
            MemoryTypeTable::Rocm5
        );
        assert_eq!(
            MemoryTypeTable::for_runtime_version(60_032_830),
            MemoryTypeTable::Rocm6
        );
        assert_eq!(
            MemoryTypeTable::for_runtime_version(70_051_831),
            MemoryTypeTable::Rocm6
        );
        assert_eq!(MemoryTypeTable::for_soname_major(5), MemoryTypeTable::Rocm5);
        assert_eq!(MemoryTypeTable::for_soname_major(6), MemoryTypeTable::Rocm6);
        assert_eq!(MemoryTypeTable::for_soname_major(7), MemoryTypeTable::Rocm6);
    }

    #[test]
    fn rocm5_values() {
        let t = MemoryTypeTable::Rocm5;
        assert_eq!(t.classify(0, 3), PointerKind::Host);
        assert_eq!(t.classify(1, 3), PointerKind::Device { device: 3 });
        for raw in [2, 3, 4, 10, 11, -1] {
            assert_eq!(t.classify(raw, 0), PointerKind::Unknown, "raw {raw}");
        }
    }

    #[test]
    fn rocm6_values() {
        let t = MemoryTypeTable::Rocm6;
        assert_eq!(t.classify(0, 0), PointerKind::Host);
        assert_eq!(t.classify(1, 0), PointerKind::Host);
        assert_eq!(t.classify(2, 1), PointerKind::Device { device: 1 });
        for raw in [3, 4, 10, 11, -1] {
            assert_eq!(t.classify(raw, 0), PointerKind::Unknown, "raw {raw}");
        }
    }

    #[test]
    fn the_same_raw_value_flips_meaning() {
        assert_eq!(
            MemoryTypeTable::Rocm5.classify(1, 0),
            PointerKind::Device { device: 0 }
        );
        assert_eq!(MemoryTypeTable::Rocm6.classify(1, 0), PointerKind::Host);
    }
}
