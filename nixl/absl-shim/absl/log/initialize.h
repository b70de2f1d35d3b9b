// hipObject's stand-in for absl/log/initialize.h (not Abseil code): nixl_log.h includes it; the
// plugin initialises no logging. See log.h beside it.
//
// SPDX-License-Identifier: MIT
#pragma once
