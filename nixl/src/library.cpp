// SPDX-License-Identifier: MIT
#include "library.h"

#include <cstdio>

namespace hipobj_nixl {

std::string describe(hipObjError_t err) {
    std::string text = hipObjGetErrorString(err.opError);
    if (err.hipError != 0) text += " (GPU runtime error " + std::to_string(err.hipError) + ")";
    return text;
}

void report(const std::string &message) {
    const std::string line = "hipObject: " + message + "\n";
    std::fwrite(line.data(), 1, line.size(), stderr);
}

Counters &counters() {
    static Counters all;
    return all;
}

namespace {
std::mutex instanceMutex;
std::weak_ptr<Library> instance;
} // namespace

std::shared_ptr<Library> Library::acquire(const std::string &nics) {
    std::lock_guard<std::mutex> lock(instanceMutex);
    if (auto running = instance.lock()) {
        if (running->owner_ && !nics.empty() && nics != running->nics_) {
            throw Error("hipObject is already initialised in this process for the NICs '" +
                        running->nics_ + "' by an earlier backend; nics '" + nics +
                        "' would need a second initialisation (give every backend the same nics)");
        }
        return running;
    }
    hipObjConfig_t config{};
    config.gpuDevice = -1;
    config.nicHint = nics.empty() ? nullptr : nics.c_str();
    const hipObjError_t err = hipObjInit(&config);
    bool owner = true;
    if (err.opError == hipObjAlreadyInitialized) {
        owner = false; // the application's own initialisation; it shuts down, not us
    } else if (err.opError != hipObjSuccess) {
        throw Error("hipObjInit(nics '" + nics + "'): " + describe(err) +
                    (err.opError == hipObjNicNotFound
                         ? " (name the RDMA device with the backend parameter nics)"
                         : ""));
    }
    std::shared_ptr<Library> created(new Library(nics, owner));
    instance = created;
    return created;
}

Library::~Library() {
    // Registrations left by backends that were destroyed without deregistering go with the
    // shutdown; when the application owns the library, they are dropped here.
    for (const auto &entry : registrations_) {
        const hipObjError_t err = hipObjBufDeregister(reinterpret_cast<void *>(entry.first));
        if (err.opError != hipObjSuccess && err.opError != hipObjNotInitialized) {
            char at[32];
            std::snprintf(at, sizeof at, "%#zx", static_cast<size_t>(entry.first));
            report(std::string("deregistering the region at ") + at + " at the end: " + describe(err));
        }
    }
    if (owner_) hipObjShutdown();
}

void Library::registerBuffer(void *base, size_t len, bool device) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto key = reinterpret_cast<uintptr_t>(base);
    auto found = registrations_.find(key);
    if (found != registrations_.end()) {
        if (found->second.len != len || found->second.device != device) {
            throw Error("a region at the same address is already registered with another length (" +
                        std::to_string(found->second.len) + " bytes, asked " + std::to_string(len) + ")");
        }
        found->second.uses++;
        return;
    }
    const hipObjError_t err = device ? hipObjBufRegister(base, len) : hipObjBufRegisterHost(base, len);
    if (err.opError != hipObjSuccess) {
        throw Error(std::string(device ? "hipObjBufRegister" : "hipObjBufRegisterHost") + " of " +
                    std::to_string(len) + " bytes: " + describe(err));
    }
    registrations_.emplace(key, Registration{len, device, 1});
}

hipObjError_t Library::deregisterBuffer(void *base) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = registrations_.find(reinterpret_cast<uintptr_t>(base));
    if (found == registrations_.end()) return hipObjError_t{hipObjBufNotRegistered, 0};
    if (found->second.uses > 1) {
        found->second.uses--;
        return hipObjError_t{hipObjSuccess, 0};
    }
    const hipObjError_t err = hipObjBufDeregister(base);
    if (err.opError == hipObjSuccess || err.opError == hipObjNotInitialized) {
        registrations_.erase(found);
        return hipObjError_t{hipObjSuccess, 0};
    }
    return err;
}

} // namespace hipobj_nixl
