// libplugin_HIPOBJ.so: the entry points NIXL's plugin manager looks up (backend_plugin.h), and
// hipobj_nixl_stats() (include/hipobj_nixl.h).
//
// SPDX-License-Identifier: MIT
#include "backend/backend_plugin.h"
#include "engine.h"
#include "hipobj_nixl.h"

namespace {

const char kName[] = "HIPOBJ";

nixlBackendEngine *createEngine(const nixlBackendInitParams *init) {
    try {
        return new hipobj_nixl::Engine(init);
    } catch (const std::exception &e) {
        hipobj_nixl::report(e.what());
        return nullptr;
    }
}

void destroyEngine(nixlBackendEngine *engine) {
    delete engine;
}

const char *pluginName() {
    return kName;
}

const char *pluginVersion() {
    return hipObjGetVersionString();
}

nixl_b_params_t backendOptions() {
    return hipobj_nixl::Settings::defaults();
}

// Before a backend exists: what it may support (getSupportedMems() of a backend says what it
// does, VRAM only with a GPU).
nixl_mem_list_t backendMems() {
    return {DRAM_SEG, VRAM_SEG, OBJ_SEG};
}

nixlBackendPlugin plugin = {NIXL_PLUGIN_API_VERSION, createEngine,   destroyEngine, pluginName,
                            pluginVersion,           backendOptions, backendMems};

} // namespace

extern "C" NIXL_PLUGIN_EXPORT nixlBackendPlugin *nixl_plugin_init() {
    return &plugin;
}

extern "C" NIXL_PLUGIN_EXPORT void nixl_plugin_fini() {}

extern "C" int hipobj_nixl_stats(hipObjNixlStats_t *out) {
    if (!out) return -1;
    const hipobj_nixl::Counters &c = hipobj_nixl::counters();
    out->completed = c.completed;
    out->failed = c.failed;
    out->cancelled = c.cancelled;
    out->bytes = c.bytes;
    out->rdmaV1 = c.rdmaV1;
    out->rdmaV2 = c.rdmaV2;
    out->http = c.http;
    out->pathUnknown = c.pathUnknown;
    out->gets = c.gets;
    out->puts = c.puts;
    out->verified = c.verified;
    out->retries = c.retries;
    return 0;
}
