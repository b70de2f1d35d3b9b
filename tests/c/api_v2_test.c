/* The hipobj-rc-v2 extension header (include/hipobj_v2.h) as a C11 or C++11 program sees it
 * (compiled as both, -Wall -Wextra -Werror -pedantic): layouts of the V2 line's structs, the
 * extension's error code and string, the not-initialised answers, and hipObjInitV2's checks of
 * invalid configs (nothing here initialises the library, and no callback may run). Prints
 * "N passed, M failed"; the exit status is non-zero when anything failed. */

#include "hipobj_v2.h"
#include "hipobj_v2.h" /* #pragma once */

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

#ifdef __cplusplus
#define HO_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define HO_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* ---- layouts (LP64 Linux), as src/ffi/v2/types.rs has them ---- */
HO_STATIC_ASSERT(sizeof(hipObjControlEndpointV2_t) == 8, "endpoint size");
HO_STATIC_ASSERT(offsetof(hipObjConfigV2_t, control) == 48, "control offset");
HO_STATIC_ASSERT(offsetof(hipObjConfigV2_t, connectDeadlineMs) == 56, "connectDeadlineMs offset");
HO_STATIC_ASSERT(offsetof(hipObjConfigV2_t, cancelCleanupBudgetMs) == 64, "cancel budget offset");
HO_STATIC_ASSERT(sizeof(hipObjConfigV2_t) == 72, "config size");
HO_STATIC_ASSERT(offsetof(hipObjTransferReqV2_t, target) == 48, "target offset");
HO_STATIC_ASSERT(offsetof(hipObjTransferReqV2_t, size) == 56, "size offset");
HO_STATIC_ASSERT(offsetof(hipObjTransferReqV2_t, cookie) == 72, "cookie offset");
HO_STATIC_ASSERT(offsetof(hipObjTransferReqV2_t, remainingMs) == 84, "remainingMs offset");
HO_STATIC_ASSERT(offsetof(hipObjTransferReqV2_t, endpoint) == 88, "endpoint offset");
HO_STATIC_ASSERT(offsetof(hipObjTransferReqV2_t, nicGidIndex) == 108, "nicGidIndex offset");
HO_STATIC_ASSERT(offsetof(hipObjTransferReqV2_t, clientMrAddr) == 120, "clientMrAddr offset");
HO_STATIC_ASSERT(offsetof(hipObjTransferReqV2_t, clientMrRkey) == 128, "clientMrRkey offset");
HO_STATIC_ASSERT(sizeof(hipObjTransferReqV2_t) == 136, "request size");
HO_STATIC_ASSERT(offsetof(hipObjPrepareReplyV2_t, serverToken) == 12, "serverToken offset");
HO_STATIC_ASSERT(offsetof(hipObjPrepareReplyV2_t, session) == 109, "session offset");
HO_STATIC_ASSERT(offsetof(hipObjPrepareReplyV2_t, serverPsn) == 176, "serverPsn offset");
HO_STATIC_ASSERT(offsetof(hipObjPrepareReplyV2_t, stagingAddr) == 184, "stagingAddr offset");
HO_STATIC_ASSERT(offsetof(hipObjPrepareReplyV2_t, stagingPresent) == 196, "stagingPresent offset");
HO_STATIC_ASSERT(sizeof(hipObjPrepareReplyV2_t) == 200, "prepare reply size");
HO_STATIC_ASSERT(offsetof(hipObjFinalReplyV2_t, bytes) == 8, "bytes offset");
HO_STATIC_ASSERT(offsetof(hipObjFinalReplyV2_t, etag) == 20, "etag offset");
HO_STATIC_ASSERT(offsetof(hipObjFinalReplyV2_t, checksumB64) == 276, "checksum offset");
HO_STATIC_ASSERT(offsetof(hipObjFinalReplyV2_t, cookiePresent) == 292, "cookiePresent offset");
HO_STATIC_ASSERT(sizeof(hipObjFinalReplyV2_t) == 296, "final reply size");
HO_STATIC_ASSERT(offsetof(hipObjOpsV2_t, v1) == 0, "v1 offset");
HO_STATIC_ASSERT(offsetof(hipObjOpsV2_t, sendPrepare) == 16, "sendPrepare offset");
HO_STATIC_ASSERT(offsetof(hipObjOpsV2_t, sendCancel) == 40, "sendCancel offset");
HO_STATIC_ASSERT(sizeof(hipObjOpsV2_t) == 48, "ops size");
HO_STATIC_ASSERT(hipObjNotSupported == 13, "hipObjNotSupported value");
HO_STATIC_ASSERT(HIPOBJ_DIAG_DEADLINE_EXPIRED == 0x54494D45, "deadline marker");

static int callbacks;



#ifdef __cplusplus
extern "C" {
#endif
static int prepare(void *ctx, const hipObjTransferReqV2_t *req, hipObjPrepareReplyV2_t *out) {
    (void)ctx; (void)req; (void)out;
    callbacks++;
    return -1;
}
static int ready(void *ctx, const hipObjTransferReqV2_t *req) {
    (void)ctx; (void)req;
    callbacks++;
    return -1;
}
static int finish(void *ctx, const hipObjTransferReqV2_t *req, hipObjFinalReplyV2_t *out) {
    (void)ctx; (void)req; (void)out;
    callbacks++;
    return -1;
}
static int cancel(void *ctx, const hipObjTransferReqV2_t *req) {
    (void)ctx; (void)req;
    callbacks++;
    return -1;
}
#ifdef __cplusplus
}
#endif

static void error_string(void) {
    CHECK(strcmp(hipObjGetErrorString(hipObjNotSupported), "hipobj-rc-v2 not supported by server") == 0);
    CHECK(strcmp(hipObjGetErrorString(hipObjBusy), hipObjGetErrorString(hipObjNotSupported)) != 0);
}

static void not_initialized(void) {
    unsigned char buf[16];
    hipObjOpsV2_t ops;
    int port = 7, gid = 7;
    char name[8] = "xxxxxxx";
    memset(&ops, 0, sizeof ops);
    ops.sendPrepare = prepare;
    ops.sendReadyRequest = ready;
    ops.finishReady = finish;
    ops.sendCancel = cancel;
    /* initialisation is checked first, before any argument */
    CHECK(is_err(hipObjGetV2("b", "k", buf, sizeof buf, 0, NULL, &ops, NULL), hipObjNotInitialized));
    CHECK(is_err(hipObjPutV2("b", "k", buf, sizeof buf, 0, NULL, &ops, NULL), hipObjNotInitialized));
    CHECK(is_err(hipObjGetV2(NULL, NULL, NULL, 0, 0, "not canonical", NULL, NULL), hipObjNotInitialized));
    CHECK(callbacks == 0);
    CHECK(hipObjNicV2() == NULL);
    hipObjFreeNicV2(NULL);
    CHECK(hipObjSelectedPortV2() == 0);
    CHECK(hipObjSelectedGidIndexV2() == -1);
    CHECK(hipObjInterfaceSnapshotV2(name, sizeof name, &port, &gid) == 0);
    CHECK(port == 7 && gid == 7 && name[0] == 'x');
    CHECK(hipObjInterfaceSnapshotV2(NULL, 0, NULL, NULL) == 0);
}

static void init_rejects_invalid_configs(void) {
    hipObjConfigV2_t cfg;
    CHECK(is_err(hipObjInitV2(NULL), hipObjInvalidValue));
    memset(&cfg, 0, sizeof cfg);
    cfg.v1.gpuDevice = -1;
    cfg.control.controlEndpoint = "http://127.0.0.1:9000";
    cfg.v1.flags = 1; /* v1's checks come before the control endpoint's */
    CHECK(is_err(hipObjInitV2(&cfg), hipObjInvalidValue));
    cfg.v1.flags = 0;
    cfg.v1.gpuDevice = -2;
    CHECK(is_err(hipObjInitV2(&cfg), hipObjInvalidValue));
    cfg.v1.gpuDevice = -1;
    cfg.control.controlEndpoint = NULL;
    CHECK(is_err(hipObjInitV2(&cfg), hipObjInvalidValue));
    cfg.control.controlEndpoint = "";
    CHECK(is_err(hipObjInitV2(&cfg), hipObjInvalidValue));
    cfg.control.controlEndpoint = "ftp://127.0.0.1:9000";
    CHECK(is_err(hipObjInitV2(&cfg), hipObjInvalidValue));
    cfg.control.controlEndpoint = "127.0.0.1:9000";
    CHECK(is_err(hipObjInitV2(&cfg), hipObjInvalidValue));
    CHECK(hipObjNicV2() == NULL); /* nothing was initialised */
}

int main(void) {
    error_string();
    not_initialized();
    init_rejects_invalid_configs();
    return report("api_v2_test");
}
