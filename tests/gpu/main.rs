//! The GPU runtime trait and the stager, against a real GPU or the simulated one.
//!
//! The same test bodies run on either backend, chosen by `HIPOBJ_TEST_GPU`:
//! * unset or `sim`: the simulated device (`hipobj::hip::SimGpu`, a TEST DOUBLE whose "device
//!   memory" is host memory and whose dmabuf export always fails), as in `make test`;
//! * `cuda`: the real CUDA driver (`libcuda.so.1`) and GPU 0, as `tests/gpu/run-on-device` runs
//!   them on the GPU machine, with --include-ignored. Without a CUDA GPU every test FAILS there,
//!   never skips. The tests that need a real GPU (dmabuf export) are #[ignore]d under the sim and
//!   FAIL on a GPU that does not offer what they need.
//!
//! No RDMA device is needed: the tests call the `GpuRuntime` trait and drive the stager
//! (`hipobj::stager::StagerHandle`) directly with registrations of their own, never
//! `hipObjBufRegister`.

mod device;
mod runtime_calls;
mod staging;
