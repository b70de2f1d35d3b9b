// hipObject's stand-in for Abseil's logging macros (not Abseil code).
//
// SPDX-License-Identifier: MIT
//
// NIXL's headers (nixl/thirdparty/nixl-1.4.0/src/utils/common/nixl_log.h) include
// absl/log/log.h, absl/log/check.h and absl/log/initialize.h and define NIXL_ERROR, NIXL_ASSERT,
// ... on LOG, VLOG, DVLOG, CHECK and DCHECK. The plugin calls none of them; they appear only in
// inline code of those headers that the plugin does not use. This file gives the macros a
// definition that writes to stderr and needs no Abseil library, so the plugin binds to no Abseil
// symbol (the wheel's Abseil has its own inline namespace; `make nixl` checks the symbols).
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

namespace hipobj_nixl_shim {

// One log line: collected by operator<<, written to stderr in one call when it goes.
class LogLine {
public:
    LogLine(const char *severity, bool fatal) : fatal_(fatal), errno_(errno) {
        out_ << "nixl " << severity << ": ";
    }
    LogLine(const LogLine &) = delete;
    LogLine &operator=(const LogLine &) = delete;
    ~LogLine() {
        if (perror_) out_ << ": " << std::strerror(errno_);
        out_ << '\n';
        const std::string text = out_.str();
        std::fwrite(text.data(), 1, text.size(), stderr);
        if (fatal_) std::abort();
    }
    template<class T> LogLine &operator<<(const T &value) {
        out_ << value;
        return *this;
    }
    LogLine &WithPerror() {
        perror_ = true;
        return *this;
    }

private:
    std::ostringstream out_;
    bool fatal_;
    bool perror_ = false;
    int errno_;
};

constexpr bool isFatal(const char *severity) {
    return severity[0] == 'F';
}

} // namespace hipobj_nixl_shim

#define LOG(severity) ::hipobj_nixl_shim::LogLine(#severity, ::hipobj_nixl_shim::isFatal(#severity))
// Verbose levels are off: the statement is compiled, never run.
#define VLOG(level) \
    while (false) ::hipobj_nixl_shim::LogLine("VERBOSE", false)
#define DVLOG(level) VLOG(level)
