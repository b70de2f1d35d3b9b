//! GPU memory for `--gpu N`: `hipMalloc`/`hipFree`/`hipMemcpy` from the HIP runtime loaded at run
//! time (as the library loads it: libamdhip64.so.7, .6, .5). The library itself registers the
//! memory (dmabuf, or host staging when the NIC cannot reach the GPU).

use crate::failure::Failure;
use libloading::Library;
use std::ffi::c_void;

const HIP_LIBRARIES: [&str; 3] = ["libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"];
const HIP_MEMCPY_HOST_TO_DEVICE: i32 = 1;
const HIP_MEMCPY_DEVICE_TO_HOST: i32 = 2;

type HipGetDeviceCount = unsafe extern "C" fn(*mut i32) -> i32;
type HipSetDevice = unsafe extern "C" fn(i32) -> i32;
type HipMalloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> i32;
type HipFree = unsafe extern "C" fn(*mut c_void) -> i32;
type HipMemcpy = unsafe extern "C" fn(*mut c_void, *const c_void, usize, i32) -> i32;

struct Hip {
    set_device: HipSetDevice,
    malloc: HipMalloc,
    free: HipFree,
    memcpy: HipMemcpy,
    // Keeps the function pointers above valid.
    _lib: Library,
}

fn load() -> Result<Hip, Failure> {
    let mut last = String::new();
    for name in HIP_LIBRARIES {
        // SAFETY: loading the HIP runtime runs its initialisers, which is what it is made for.
        match unsafe { Library::new(name) } {
            Ok(lib) => {
                // SAFETY: the symbol types are the HIP API's (hip_runtime_api.h).
                let hip = unsafe {
                    Hip {
                        set_device: *lib.get::<HipSetDevice>(b"hipSetDevice\0").map_err(gpu)?,
                        malloc: *lib.get::<HipMalloc>(b"hipMalloc\0").map_err(gpu)?,
                        free: *lib.get::<HipFree>(b"hipFree\0").map_err(gpu)?,
                        memcpy: *lib.get::<HipMemcpy>(b"hipMemcpy\0").map_err(gpu)?,
                        _lib: lib,
                    }
                };
                return Ok(hip);
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(Failure::Gpu(format!("no HIP runtime ({last})")))
}

fn gpu(e: libloading::Error) -> Failure {
    Failure::Gpu(format!("HIP runtime incomplete: {e}"))
}

/// The number of HIP devices, or why there are none.
pub fn device_count() -> Result<i32, Failure> {
    let mut last = String::new();
    for name in HIP_LIBRARIES {
        // SAFETY: as in `load`.
        let Ok(lib) = (unsafe { Library::new(name) }) else {
            last = format!("{name} not found");
            continue;
        };
        // SAFETY: hipGetDeviceCount(int*) per hip_runtime_api.h.
        let count = unsafe { lib.get::<HipGetDeviceCount>(b"hipGetDeviceCount\0") }.map_err(gpu)?;
        let mut n = 0;
        // SAFETY: valid out-pointer.
        let rc = unsafe { count(&mut n) };
        return if rc == 0 {
            Ok(n)
        } else {
            Err(Failure::Gpu(format!(
                "hipGetDeviceCount failed (hipError {rc}): no GPU"
            )))
        };
    }
    Err(Failure::Gpu(format!("no HIP runtime ({last})")))
}

/// `len` bytes of device memory on GPU `device`, freed on drop.
pub struct DeviceBuffer {
    hip: Hip,
    ptr: *mut c_void,
    len: usize,
}

// SAFETY: the buffer is plain device memory; HIP calls on it are thread-safe.
unsafe impl Send for DeviceBuffer {}

impl DeviceBuffer {
    pub fn new(device: i32, len: usize) -> Result<DeviceBuffer, Failure> {
        let count = device_count()?;
        if device < 0 || device >= count {
            return Err(Failure::Gpu(format!(
                "--gpu {device}: this host has {count} HIP device(s)"
            )));
        }
        let hip = load()?;
        // SAFETY: plain HIP calls with a valid out-pointer.
        let (rc_set, rc_alloc, ptr) = unsafe {
            let rc_set = (hip.set_device)(device);
            let mut ptr = std::ptr::null_mut();
            let rc_alloc = (hip.malloc)(&mut ptr, len.max(1));
            (rc_set, rc_alloc, ptr)
        };
        if rc_set != 0 || rc_alloc != 0 || ptr.is_null() {
            return Err(Failure::Gpu(format!(
                "hipMalloc of {len} bytes on GPU {device} failed (hipError {rc_set}/{rc_alloc})"
            )));
        }
        Ok(DeviceBuffer { hip, ptr, len })
    }

    pub fn as_ptr(&self) -> usize {
        self.ptr as usize
    }

    fn copy(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        len: usize,
        kind: i32,
    ) -> Result<(), Failure> {
        // SAFETY: the caller passes ranges inside this buffer and a host slice of `len` bytes.
        let rc = unsafe { (self.hip.memcpy)(dst, src, len, kind) };
        if rc != 0 {
            return Err(Failure::Gpu(format!("hipMemcpy failed (hipError {rc})")));
        }
        Ok(())
    }

    /// Copy `data` into the start of the buffer.
    pub fn upload(&self, data: &[u8]) -> Result<(), Failure> {
        if data.len() > self.len {
            return Err(Failure::Gpu("upload larger than the buffer".into()));
        }
        self.copy(
            self.ptr,
            data.as_ptr().cast(),
            data.len(),
            HIP_MEMCPY_HOST_TO_DEVICE,
        )
    }

    /// Copy the first `out.len()` bytes of the buffer into `out`.
    pub fn download(&self, out: &mut [u8]) -> Result<(), Failure> {
        if out.len() > self.len {
            return Err(Failure::Gpu("download larger than the buffer".into()));
        }
        self.copy(
            out.as_mut_ptr().cast(),
            self.ptr,
            out.len(),
            HIP_MEMCPY_DEVICE_TO_HOST,
        )
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by hipMalloc in `new`, freed once.
        unsafe { (self.hip.free)(self.ptr) };
    }
}
