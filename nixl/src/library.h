// The hipObject library as the plugin shares it: one initialisation and one table of buffer
// registrations per process, whatever number of NIXL agents and backends the application makes.
//
// SPDX-License-Identifier: MIT
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "hipobj.h"

namespace hipobj_nixl {

// Thrown for a setting or a call that fails; what() is the message the plugin prints.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// "hipObjBusy" etc. with the HIP/CUDA code when there is one.
std::string describe(hipObjError_t err);

// Writes "hipObject: <message>" to stderr in one call.
void report(const std::string &message);

// What the plugin's backends moved, for hipobj_nixl_stats() (include/hipobj_nixl.h).
struct Counters {
    std::atomic<uint64_t> completed{0}, failed{0}, cancelled{0}, bytes{0};
    std::atomic<uint64_t> rdmaV1{0}, rdmaV2{0}, http{0}, pathUnknown{0};
    std::atomic<uint64_t> gets{0}, puts{0}, verified{0}, retries{0};
};
Counters &counters();

// hipObjInit() once for all backends of the process, hipObjShutdown() when the last goes. An
// application that initialised hipObject itself keeps it: the plugin then neither initialises
// nor shuts it down.
class Library {
public:
    // The running instance, or a new one initialised with `nics` (hipObjConfig_t.nicHint; empty:
    // any NIC). Throws Error when hipObjInit() fails, or when the running instance was
    // initialised for other NICs.
    static std::shared_ptr<Library> acquire(const std::string &nics);

    ~Library();
    Library(const Library &) = delete;
    Library &operator=(const Library &) = delete;

    // Registers [base, base + len) (device memory when `device`), or takes one more use of the
    // same registration. Throws Error.
    void registerBuffer(void *base, size_t len, bool device);
    // Drops one use; the last one deregisters. Returns hipObject's answer (hipObjBusy while a
    // transfer uses the buffer: the registration and the use are then kept).
    hipObjError_t deregisterBuffer(void *base);

private:
    Library(std::string nics, bool owner) : nics_(std::move(nics)), owner_(owner) {}

    struct Registration {
        size_t len;
        bool device;
        unsigned uses;
    };

    const std::string nics_;
    const bool owner_; // this plugin called hipObjInit() (and so calls hipObjShutdown())
    std::mutex mutex_;
    std::map<uintptr_t, Registration> registrations_;
};

} // namespace hipobj_nixl
