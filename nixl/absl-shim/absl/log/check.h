// hipObject's stand-in for Abseil's CHECK macros (not Abseil code); see log.h beside it.
//
// SPDX-License-Identifier: MIT
#pragma once

#include "absl/log/log.h"

#define CHECK(condition) \
    switch (0)           \
    case 0:              \
    default:             \
        if (condition) { \
        } else           \
            ::hipobj_nixl_shim::LogLine("FATAL", true) << "Check failed: " #condition " "
#ifdef NDEBUG
#define DCHECK(condition) \
    while (false) CHECK(condition)
#else
#define DCHECK(condition) CHECK(condition)
#endif
