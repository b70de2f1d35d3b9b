// The HIPOBJ backend engine: NIXL's backend interface over hipObject's batch queue
// (include/hipobj_batch.h). One queue per backend; a NIXL request is a list of queue operations.
//
// SPDX-License-Identifier: MIT
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend_engine.h"
#include "hipobj_batch.h"
#include "library.h"

namespace hipobj_nixl {

class Request;

// The parameters a backend is created with (NIXL's OBJ plugin's names, plus hipObject's own).
struct Settings {
    std::string endpoint; // http(s)://host:port
    std::string bucket;
    std::string accessKey, secretKey, region, caBundle;
    std::string nics;
    hipObjTransportMode_t transport = HIPOBJ_TRANSPORT_FROM_ENV;
    unsigned depth = 256;

    // Reads the parameters (and the OBJ plugin's environment fallbacks); throws Error naming a
    // parameter that is missing, unknown or out of range.
    static Settings parse(const nixl_b_params_t &params);
    // The parameters and their defaults, as get_plugin_params shows them.
    static nixl_b_params_t defaults();
};

class Engine : public nixlBackendEngine {
public:
    explicit Engine(const nixlBackendInitParams *init);
    ~Engine() override;

    bool supportsRemote() const override { return false; }
    bool supportsLocal() const override { return true; }
    bool supportsNotif() const override { return false; }
    nixl_mem_list_t getSupportedMems() const override;

    nixl_status_t registerMem(const nixlBlobDesc &mem, const nixl_mem_t &nixl_mem,
                              nixlBackendMD *&out) override;
    nixl_status_t deregisterMem(nixlBackendMD *meta) override;

    nixl_status_t connect(const std::string &) override { return NIXL_SUCCESS; }
    nixl_status_t disconnect(const std::string &) override { return NIXL_SUCCESS; }
    nixl_status_t unloadMD(nixlBackendMD *) override { return NIXL_SUCCESS; }
    // Local transfers: the "remote" side is this backend's own OBJ registration.
    nixl_status_t loadLocalMD(nixlBackendMD *input, nixlBackendMD *&output) override {
        output = input;
        return NIXL_SUCCESS;
    }

    nixl_status_t prepXfer(const nixl_xfer_op_t &operation, const nixl_meta_dlist_t &local,
                           const nixl_meta_dlist_t &remote, const std::string &remote_agent,
                           nixlBackendReqH *&handle, const nixl_opt_b_args_t *opt_args) const override;
    nixl_status_t postXfer(const nixl_xfer_op_t &operation, const nixl_meta_dlist_t &local,
                           const nixl_meta_dlist_t &remote, const std::string &remote_agent,
                           nixlBackendReqH *&handle, const nixl_opt_b_args_t *opt_args) const override;
    nixl_status_t checkXfer(nixlBackendReqH *handle) const override;
    nixl_status_t releaseReqH(nixlBackendReqH *handle) const override;

    nixl_status_t queryMem(const nixl_reg_dlist_t &descs,
                           std::vector<nixl_query_resp_t> &resp) const override;

private:
    struct BatchDeleter {
        void operator()(hipObjBatch_t *batch) const { hipObjBatchDestroy(batch); }
    };
    // Where an operation's event goes: its request and its index there.
    struct Route {
        Request *request;
        size_t index;
    };

    // Under mutex_: takes every event ready (waiting up to timeoutMs for the first one) and hands
    // each to its request; then submits what the queue has room for.
    void pump(int timeoutMs) const;
    void submitWaiting() const;
    void forget(Request &request) const;
    std::string where(const std::string &key) const;

    Settings settings_;
    std::shared_ptr<Library> library_;
    std::unique_ptr<hipObjBatch_t, BatchDeleter> batch_;

    // NIXL's engine interface is const where the queue's state changes: mutable, under mutex_.
    mutable std::mutex mutex_;
    mutable std::unordered_map<uintptr_t, Route> routes_; // cookie -> operation
    mutable std::vector<Request *> waiting_;               // requests with operations not submitted
    mutable uint64_t nextCookie_ = 1;                      // never reused
    mutable size_t inFlight_ = 0;                          // submitted, event not yet polled
};

} // namespace hipobj_nixl
