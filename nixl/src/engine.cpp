// SPDX-License-Identifier: MIT
#include "engine.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <set>

namespace hipobj_nixl {

// ---- Registrations --------------------------------------------------------------------------

namespace {

// A DRAM or VRAM region NIXL registered: the base of one hipObject registration.
class MemoryMD : public nixlBackendMD {
public:
    MemoryMD(uintptr_t base, size_t len, bool device)
        : nixlBackendMD(true), base(base), len(len), device(device) {}
    const uintptr_t base;
    const size_t len;
    const bool device;
};

// An OBJ segment: one object of the backend's bucket.
class ObjectMD : public nixlBackendMD {
public:
    ObjectMD(uint64_t devId, std::string key) : nixlBackendMD(true), devId(devId), key(std::move(key)) {}
    const uint64_t devId;
    const std::string key;
};

// NIXL's OBJ plugin's rule: the descriptor's metaInfo is the key; without one, its devId.
std::string objectKey(const nixlBlobDesc &desc) {
    return desc.metaInfo.empty() ? std::to_string(desc.devId) : desc.metaInfo;
}

// A GPU the runtime hipObject would use (HIP first, else the CUDA driver), so that VRAM is
// offered only where there is some. Looked up once; the libraries stay loaded.
bool gpuPresent() {
    static const bool present = [] {
        for (const char *name : {"libamdhip64.so.6", "libamdhip64.so"}) {
            if (void *hip = dlopen(name, RTLD_NOW | RTLD_LOCAL)) {
                using Count = int (*)(int *);
                auto count = reinterpret_cast<Count>(dlsym(hip, "hipGetDeviceCount"));
                int n = 0;
                if (count && count(&n) == 0 && n > 0) return true;
            }
        }
        if (void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
            using Init = int (*)(unsigned);
            using Count = int (*)(int *);
            auto init = reinterpret_cast<Init>(dlsym(cuda, "cuInit"));
            auto count = reinterpret_cast<Count>(dlsym(cuda, "cuDeviceGetCount"));
            int n = 0;
            if (init && count && init(0) == 0 && count(&n) == 0 && n > 0) return true;
        }
        return false;
    }();
    return present;
}

const char *opName(int opcode) {
    return opcode == HIPOBJ_BATCH_PUT ? "PUT" : "GET";
}

} // namespace

// ---- Settings -------------------------------------------------------------------------------

namespace {

// NIXL's OBJ plugin's parameters that mean nothing here (hipObject always sends a CRC64NVME and
// checks whole-object GETs; it has no CRT client): accepted so the same map works for both.
const std::set<std::string> kObjOnly = {"req_checksum", "resp_checksum", "crtMinLimit",
                                        "throughput_target_gbps", "type"};

std::string param(const nixl_b_params_t &params, const std::string &name) {
    auto found = params.find(name);
    return found == params.end() ? std::string() : found->second;
}

std::string env(const char *name) {
    const char *value = std::getenv(name);
    return value ? value : "";
}

} // namespace

nixl_b_params_t Settings::defaults() {
    return {{"endpoint_override", ""}, {"scheme", "https"}, {"bucket", ""},
            {"access_key", ""},        {"secret_key", ""},   {"region", ""},
            {"ca_bundle", ""},         {"nics", ""},         {"transport", "env"},
            {"depth", "256"}};
}

Settings Settings::parse(const nixl_b_params_t &params) {
    const nixl_b_params_t known = defaults();
    for (const auto &entry : params) {
        const std::string &name = entry.first;
        if (known.count(name) || kObjOnly.count(name)) continue;
        if (name == "use_virtual_addressing") {
            if (entry.second.empty() || entry.second == "false") continue;
            throw Error("use_virtual_addressing '" + entry.second +
                        "': hipObject addresses buckets by path only");
        }
        if (name == "accelerated") {
            if (entry.second.empty() || entry.second == "false") continue;
            throw Error("accelerated '" + entry.second +
                        "': that is the OBJ plugin's cuObject engine; HIPOBJ is itself the RDMA path");
        }
        if (name == "session_token") {
            if (entry.second.empty()) continue;
            throw Error("session_token: give no keys and set AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY "
                        "and AWS_SESSION_TOKEN in the environment instead");
        }
        throw Error("unknown parameter '" + name + "'");
    }

    Settings s;
    std::string endpoint = param(params, "endpoint_override");
    if (endpoint.empty()) endpoint = env("AWS_ENDPOINT_OVERRIDE");
    if (endpoint.empty()) {
        throw Error("no endpoint: set the backend parameter endpoint_override (or AWS_ENDPOINT_OVERRIDE)");
    }
    if (endpoint.find("://") == std::string::npos) {
        std::string scheme = param(params, "scheme");
        s.endpoint = (scheme.empty() ? "https" : scheme) + "://" + endpoint;
    } else {
        s.endpoint = endpoint;
    }
    s.bucket = param(params, "bucket");
    if (s.bucket.empty()) s.bucket = env("AWS_DEFAULT_BUCKET");
    if (s.bucket.empty()) throw Error("no bucket: set the backend parameter bucket (or AWS_DEFAULT_BUCKET)");
    s.accessKey = param(params, "access_key");
    s.secretKey = param(params, "secret_key");
    if (s.accessKey.empty() != s.secretKey.empty()) {
        throw Error(std::string(s.accessKey.empty() ? "secret_key" : "access_key") +
                    " given without " + (s.accessKey.empty() ? "access_key" : "secret_key"));
    }
    s.region = param(params, "region");
    s.caBundle = param(params, "ca_bundle");
    s.nics = param(params, "nics");

    const std::string transport = param(params, "transport");
    if (transport.empty() || transport == "env") {
        s.transport = HIPOBJ_TRANSPORT_FROM_ENV;
    } else if (transport == "auto") {
        s.transport = HIPOBJ_TRANSPORT_AUTO;
    } else if (transport == "rdma") {
        s.transport = HIPOBJ_TRANSPORT_RDMA;
    } else if (transport == "http") {
        s.transport = HIPOBJ_TRANSPORT_HTTP;
    } else {
        throw Error("transport '" + transport + "': one of auto, rdma, http, env");
    }

    const std::string depth = param(params, "depth");
    if (!depth.empty()) {
        char *end = nullptr;
        const unsigned long value = std::strtoul(depth.c_str(), &end, 10);
        if (*end != '\0' || value == 0 || value > HIPOBJ_BATCH_MAX_DEPTH) {
            throw Error("depth '" + depth + "': 1 to " + std::to_string(HIPOBJ_BATCH_MAX_DEPTH));
        }
        s.depth = static_cast<unsigned>(value);
    }
    return s;
}

// ---- Requests -------------------------------------------------------------------------------

// A prepared NIXL transfer: its queue operations, and how far each got in the current post.
class Request : public nixlBackendReqH {
public:
    enum class State : unsigned char { Waiting, Submitted, Ended };

    std::vector<std::string> keys; // the operations' keys (ops[i].key points here)
    std::vector<hipObjBatchOp_t> ops;
    std::vector<State> states;
    size_t nextToSubmit = 0; // ops before this were submitted in the current post
    size_t ended = 0;        // events received in the current post
    bool posted = false;
    bool failed = false;
    bool releasing = false;

    size_t inQueue() const { return nextToSubmit - ended; } // submitted, event not yet here
};

// ---- Engine ---------------------------------------------------------------------------------

Engine::Engine(const nixlBackendInitParams *init)
    : nixlBackendEngine(init),
      settings_(Settings::parse(*init->customParams)),
      library_(Library::acquire(settings_.nics)) {
    hipObjBatchConfig_t config{};
    config.endpoint = settings_.endpoint.c_str();
    config.region = settings_.region.empty() ? nullptr : settings_.region.c_str();
    config.accessKey = settings_.accessKey.empty() ? nullptr : settings_.accessKey.c_str();
    config.secretKey = settings_.secretKey.empty() ? nullptr : settings_.secretKey.c_str();
    config.caBundle = settings_.caBundle.empty() ? nullptr : settings_.caBundle.c_str();
    config.depth = settings_.depth;
    config.verify = 1;
    config.transport = settings_.transport;
    hipObjBatch_t *batch = nullptr;
    const hipObjError_t created = hipObjBatchCreate(&config, &batch);
    if (created.opError != hipObjSuccess) {
        throw Error("hipObjBatchCreate(" + settings_.endpoint + "): " + describe(created) +
                    " (check endpoint_override, scheme and ca_bundle)");
    }
    batch_.reset(batch);

    // The bucket, reached with these keys: wrong keys, endpoint or bucket fail here, not at the
    // first transfer.
    uint64_t size = 0;
    int httpStatus = 0;
    const hipObjError_t head = hipObjBatchHead(batch, settings_.bucket.c_str(), nullptr, &size, &httpStatus);
    if (head.opError != hipObjSuccess) {
        std::string cause;
        if (httpStatus == 0) {
            cause = "no reply, " + describe(head) + " (check the endpoint)";
        } else if (httpStatus == 403) {
            cause = "HTTP 403 (check the access and secret key)";
        } else if (httpStatus == 404) {
            cause = "HTTP 404 (no such bucket)";
        } else {
            cause = "HTTP " + std::to_string(httpStatus) + ", " + describe(head);
        }
        throw Error(where("") + ": " + cause);
    }
}

Engine::~Engine() {
    // NIXL releases its requests before its backends; a request it did not release is cancelled
    // by the queue's destroy, which waits until no worker touches a buffer.
    batch_.reset();
}

std::string Engine::where(const std::string &key) const {
    if (key.empty()) return "bucket '" + settings_.bucket + "' at " + settings_.endpoint;
    return "'" + settings_.bucket + "/" + key + "' at " + settings_.endpoint;
}

nixl_mem_list_t Engine::getSupportedMems() const {
    if (gpuPresent()) return {DRAM_SEG, VRAM_SEG, OBJ_SEG};
    return {DRAM_SEG, OBJ_SEG};
}

nixl_status_t Engine::registerMem(const nixlBlobDesc &mem, const nixl_mem_t &nixl_mem, nixlBackendMD *&out) {
    try {
        switch (nixl_mem) {
        case OBJ_SEG:
            out = new ObjectMD(mem.devId, objectKey(mem));
            return NIXL_SUCCESS;
        case DRAM_SEG:
        case VRAM_SEG: {
            const bool device = nixl_mem == VRAM_SEG;
            if (device && !gpuPresent()) {
                report("VRAM registration: no GPU runtime with a device in this process");
                return NIXL_ERR_NOT_SUPPORTED;
            }
            library_->registerBuffer(reinterpret_cast<void *>(mem.addr), mem.len, device);
            out = new MemoryMD(mem.addr, mem.len, device);
            return NIXL_SUCCESS;
        }
        default:
            report("registerMem: memory type " + std::to_string(nixl_mem) +
                   " (DRAM, VRAM and OBJ only)");
            return NIXL_ERR_NOT_SUPPORTED;
        }
    } catch (const Error &e) {
        report(e.what());
        return NIXL_ERR_BACKEND;
    }
}

nixl_status_t Engine::deregisterMem(nixlBackendMD *meta) {
    if (auto *object = dynamic_cast<ObjectMD *>(meta)) {
        delete object;
        return NIXL_SUCCESS;
    }
    auto *memory = dynamic_cast<MemoryMD *>(meta);
    if (!memory) return NIXL_ERR_INVALID_PARAM;
    const hipObjError_t err = library_->deregisterBuffer(reinterpret_cast<void *>(memory->base));
    if (err.opError != hipObjSuccess) {
        report("deregistering " + std::to_string(memory->len) + " bytes: " + describe(err) +
               (err.opError == hipObjBusy ? " (a transfer still uses it: release its request first)" : ""));
        return NIXL_ERR_NOT_ALLOWED;
    }
    delete memory;
    return NIXL_SUCCESS;
}

nixl_status_t Engine::prepXfer(const nixl_xfer_op_t &operation, const nixl_meta_dlist_t &local,
                               const nixl_meta_dlist_t &remote, const std::string &remote_agent,
                               nixlBackendReqH *&handle, const nixl_opt_b_args_t *) const {
    auto refuse = [](const std::string &why) {
        report("prepXfer: " + why);
        return NIXL_ERR_INVALID_PARAM;
    };
    if (operation != NIXL_READ && operation != NIXL_WRITE) return refuse("operation is neither READ nor WRITE");
    if (remote_agent != localAgent) {
        return refuse("remote agent '" + remote_agent + "': objects are this agent's own (" + localAgent + ")");
    }
    if (local.getType() != DRAM_SEG && local.getType() != VRAM_SEG) return refuse("local memory is not DRAM or VRAM");
    if (remote.getType() != OBJ_SEG) return refuse("remote memory is not OBJ");
    if (local.descCount() != remote.descCount() || local.descCount() == 0) {
        return refuse(std::to_string(local.descCount()) + " local and " + std::to_string(remote.descCount()) +
                      " remote descriptors");
    }

    auto request = std::make_unique<Request>();
    const size_t count = static_cast<size_t>(local.descCount());
    request->keys.reserve(count); // ops[i].key points into it: no reallocation below
    request->ops.reserve(count);
    const int opcode = operation == NIXL_WRITE ? HIPOBJ_BATCH_PUT : HIPOBJ_BATCH_GET;
    for (size_t i = 0; i < count; i++) {
        const nixlMetaDesc &buf = local[i];
        const nixlMetaDesc &obj = remote[i];
        const auto *memory = dynamic_cast<const MemoryMD *>(buf.metadataP);
        const auto *object = dynamic_cast<const ObjectMD *>(obj.metadataP);
        const std::string at = "descriptor " + std::to_string(i) + ": ";
        if (!memory) return refuse(at + "the local buffer is not registered with this backend");
        if (!object) return refuse(at + "the object is not registered with this backend");
        if (buf.len == 0) return refuse(at + "length 0");
        if (buf.addr < memory->base || buf.len > memory->len || buf.addr - memory->base > memory->len - buf.len) {
            return refuse(at + "the buffer leaves its registration");
        }
        if (opcode == HIPOBJ_BATCH_PUT && obj.addr != 0) {
            return refuse(at + "a WRITE stores the whole object from offset 0 (offset " + std::to_string(obj.addr) +
                          " asked; NIXL's OBJ plugin has the same rule)");
        }
        request->keys.push_back(object->key);
        hipObjBatchOp_t op{};
        op.opcode = opcode;
        op.bucket = settings_.bucket.c_str();
        op.key = request->keys.back().c_str();
        op.objectOffset = opcode == HIPOBJ_BATCH_GET ? obj.addr : 0;
        op.length = buf.len;
        op.buffer = reinterpret_cast<void *>(memory->base);
        op.bufferOffset = buf.addr - memory->base;
        request->ops.push_back(op);
    }
    request->states.assign(count, Request::State::Waiting);
    handle = request.release();
    return NIXL_SUCCESS;
}

nixl_status_t Engine::postXfer(const nixl_xfer_op_t &, const nixl_meta_dlist_t &, const nixl_meta_dlist_t &,
                               const std::string &, nixlBackendReqH *&handle, const nixl_opt_b_args_t *) const {
    auto *request = dynamic_cast<Request *>(handle);
    if (!request) return NIXL_ERR_INVALID_PARAM;
    std::lock_guard<std::mutex> lock(mutex_);
    if (request->posted && request->inQueue() > 0) return NIXL_ERR_REPOST_ACTIVE;
    forget(*request);
    request->posted = true;
    request->failed = false;
    request->nextToSubmit = 0;
    request->ended = 0;
    std::fill(request->states.begin(), request->states.end(), Request::State::Waiting);
    for (size_t i = 0; i < request->ops.size(); i++) {
        const uint64_t cookie = nextCookie_++;
        request->ops[i].cookie = reinterpret_cast<void *>(static_cast<uintptr_t>(cookie));
        routes_[cookie] = Route{request, i};
    }
    waiting_.push_back(request);
    submitWaiting();
    return request->failed ? NIXL_ERR_BACKEND : NIXL_IN_PROG;
}

void Engine::submitWaiting() const {
    std::vector<Request *> still;
    for (Request *request : waiting_) {
        while (!request->failed && request->nextToSubmit < request->ops.size() && inFlight_ < settings_.depth) {
            const size_t first = request->nextToSubmit;
            const size_t count = std::min(request->ops.size() - first, settings_.depth - inFlight_);
            const hipObjError_t err = hipObjBatchSubmit(batch_.get(), &request->ops[first], count);
            if (err.opError == hipObjBusy) break; // full after all: the next pump tries again
            if (err.opError != hipObjSuccess) {
                report(std::string(opName(request->ops[first].opcode)) + " of " + std::to_string(count) +
                       " objects from " + where(request->keys[first]) + ": submit: " + describe(err));
                request->failed = true;
                break;
            }
            for (size_t i = first; i < first + count; i++) request->states[i] = Request::State::Submitted;
            request->nextToSubmit += count;
            inFlight_ += count;
        }
        if (!request->failed && request->nextToSubmit < request->ops.size()) still.push_back(request);
    }
    waiting_.swap(still);
}

void Engine::pump(int timeoutMs) const {
    constexpr size_t kMax = 64;
    hipObjBatchEvent_t events[kMax];
    bool first = true;
    for (;;) {
        size_t n = 0;
        const bool wait = first && timeoutMs != 0 && inFlight_ > 0;
        const hipObjError_t err = hipObjBatchPoll(batch_.get(), wait ? 1 : 0, kMax, events, &n, wait ? timeoutMs : 0);
        first = false;
        if (err.opError != hipObjSuccess) {
            report("poll: " + describe(err));
            break;
        }
        Counters &c = counters();
        for (size_t i = 0; i < n; i++) {
            const hipObjBatchEvent_t &ev = events[i];
            inFlight_--;
            const auto route = routes_.find(reinterpret_cast<uintptr_t>(ev.cookie));
            if (route == routes_.end()) continue; // its request was released without waiting
            Request &request = *route->second.request;
            const size_t index = route->second.index;
            routes_.erase(route);
            request.states[index] = Request::State::Ended;
            request.ended++;
            const hipObjBatchOp_t &op = request.ops[index];
            if (ev.status == HIPOBJ_BATCH_COMPLETE) {
                c.completed++;
                c.bytes += ev.bytes;
                (op.opcode == HIPOBJ_BATCH_PUT ? c.puts : c.gets)++;
                c.verified += ev.verified ? 1 : 0;
                switch (ev.path) {
                case HIPOBJ_BATCH_PATH_RDMA_V1: c.rdmaV1++; break;
                case HIPOBJ_BATCH_PATH_RDMA_V2: c.rdmaV2++; break;
                case HIPOBJ_BATCH_PATH_HTTP: c.http++; break;
                default: c.pathUnknown++; break;
                }
            } else if (ev.status == HIPOBJ_BATCH_CANCELLED) {
                c.cancelled++;
                if (!request.releasing) request.failed = true;
            } else {
                c.failed++;
                if (!request.failed) { // one line per request: the first failure names the cause
                    std::string http;
                    if (ev.httpStatus != 0) {
                        http = ", HTTP " + std::to_string(ev.httpStatus) + (ev.s3Code[0] ? std::string(" ") + ev.s3Code : "");
                    }
                    report(std::string(opName(op.opcode)) + " " + where(op.key) + ": " + describe(ev.error) + http);
                }
                request.failed = true;
            }
            c.retries += ev.retries;
        }
        if (n < kMax) break;
    }
    submitWaiting();
}

nixl_status_t Engine::checkXfer(nixlBackendReqH *handle) const {
    auto *request = dynamic_cast<Request *>(handle);
    if (!request) return NIXL_ERR_INVALID_PARAM;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!request->posted) return NIXL_ERR_NOT_POSTED;
    pump(0);
    if (request->failed) return NIXL_ERR_BACKEND;
    return request->ended == request->ops.size() ? NIXL_SUCCESS : NIXL_IN_PROG;
}

void Engine::forget(Request &request) const {
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), &request), waiting_.end());
    for (const hipObjBatchOp_t &op : request.ops) {
        if (op.cookie) routes_.erase(reinterpret_cast<uintptr_t>(op.cookie));
    }
}

nixl_status_t Engine::releaseReqH(nixlBackendReqH *handle) const {
    auto *request = dynamic_cast<Request *>(handle);
    if (!request) return NIXL_ERR_INVALID_PARAM;
    std::unique_ptr<Request> owned(request);
    std::lock_guard<std::mutex> lock(mutex_);
    request->releasing = true;
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), request), waiting_.end());
    // Cancel what is in the queue: each cancel returns once no worker touches the buffer for it.
    // Last submitted first: those still queued end at once, before the workers, which go on while
    // a running operation's cancel waits for its transfer, can claim them.
    for (size_t i = request->nextToSubmit; i-- > 0;) {
        if (request->states[i] != Request::State::Submitted) continue;
        const hipObjError_t err = hipObjBatchCancel(batch_.get(), request->ops[i].cookie);
        if (err.opError != hipObjSuccess) report("cancel " + where(request->keys[i]) + ": " + describe(err));
    }
    // Their events: afterwards no operation of this request holds its buffer's registration.
    while (request->inQueue() > 0) {
        const size_t before = request->ended;
        pump(1000);
        if (request->ended == before && inFlight_ == 0) break; // nothing more can come
    }
    forget(*request);
    return NIXL_SUCCESS;
}

nixl_status_t Engine::queryMem(const nixl_reg_dlist_t &descs, std::vector<nixl_query_resp_t> &resp) const {
    resp.assign(static_cast<size_t>(descs.descCount()), std::nullopt);
    for (int i = 0; i < descs.descCount(); i++) {
        const std::string key = objectKey(descs[i]);
        uint64_t size = 0;
        int httpStatus = 0;
        const hipObjError_t err = hipObjBatchHead(batch_.get(), settings_.bucket.c_str(), key.c_str(), &size, &httpStatus);
        if (err.opError == hipObjSuccess) {
            resp[static_cast<size_t>(i)] = nixl_b_params_t{{"size", std::to_string(size)}};
        } else if (httpStatus != 404) { // 404: no such object, the answer nullopt says
            report("HEAD " + where(key) + ": " + describe(err) +
                   (httpStatus ? ", HTTP " + std::to_string(httpStatus) : ", no reply"));
            return NIXL_ERR_BACKEND;
        }
    }
    return NIXL_SUCCESS;
}

} // namespace hipobj_nixl
