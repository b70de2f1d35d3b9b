//! The `extern "C"` layer implementing `include/hipobj.h` (to be written).
