/* The RDMA-or-HTTP decision's extension header (include/hipobj_transport.h) as a C11 or C++11
 * program sees it (compiled as both, -Wall -Wextra -Werror -pedantic): the values, the start (RDMA
 * from 1 MiB up, HTTP below), a cell that measures both paths and then holds the faster one, the
 * counters, "no RDMA" for the process and for one endpoint, forced modes, the mode HIPOBJ_TRANSPORT
 * names, and the argument checks
 * (nothing written on a rejected call). Needs no hipObjInit(). Prints "N passed, M failed"; the
 * exit status is non-zero when anything failed. */

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200112L /* setenv */
#endif
#include "hipobj_transport.h"
#include "hipobj_transport.h" /* #pragma once */

#include <stdio.h>
#include <stdlib.h>

#include "check.h"

static const char *ep = "http://10.0.0.2:9000";

static void values(void) {
    CHECK(HIPOBJ_TRANSPORT_AUTO == 0 && HIPOBJ_TRANSPORT_RDMA == 1 && HIPOBJ_TRANSPORT_HTTP == 2);
    CHECK(HIPOBJ_TRANSPORT_FROM_ENV == 3);
    CHECK(HIPOBJ_PATH_RDMA == 0 && HIPOBJ_PATH_HTTP == 1);
    CHECK(HIPOBJ_REASON_FORCED == 0 && HIPOBJ_REASON_DEFAULT_START == 1 && HIPOBJ_REASON_MEASURED == 2);
    CHECK(HIPOBJ_REASON_PROBE == 3 && HIPOBJ_REASON_NO_RDMA_DEVICE == 4 && HIPOBJ_REASON_DECLINED == 5);
    CHECK(HIPOBJ_TRANSPORT_GET == 0 && HIPOBJ_TRANSPORT_PUT == 1);
    CHECK(HIPOBJ_TRANSPORT_HOST == 0 && HIPOBJ_TRANSPORT_GPU == 1 && HIPOBJ_TRANSPORT_GPU_BOUNCE == 2);
}

/* One GET of `bytes` to host memory, the path moving at `rdma` or `http` MB/s: the path taken. */
static hipObjTransportPath_t transfer(hipObjTransport_t *t, uint64_t bytes, double rdma, double http,
                                      hipObjTransportReason_t *why) {
    hipObjTransportPath_t path = -1;
    hipObjTransportReason_t reason = -1;
    CHECK(is_err(hipObjTransportChoose(t, ep, bytes, HIPOBJ_TRANSPORT_GET, HIPOBJ_TRANSPORT_HOST, &path, &reason),
                 hipObjSuccess));
    double seconds = (double)bytes / ((path == HIPOBJ_PATH_RDMA ? rdma : http) * 1e6);
    CHECK(is_err(hipObjTransportRecord(t, ep, bytes, HIPOBJ_TRANSPORT_GET, HIPOBJ_TRANSPORT_HOST, path, reason,
                                       seconds),
                 hipObjSuccess));
    if (why) *why = reason;
    return path;
}

static void auto_mode(void) {
    hipObjTransport_t *t = NULL;
    CHECK(is_err(hipObjTransportCreate(HIPOBJ_TRANSPORT_AUTO, &t), hipObjSuccess) && t != NULL);
    hipObjTransportReason_t why = -1;
    CHECK(transfer(t, 64 << 10, 100, 100, &why) == HIPOBJ_PATH_HTTP && why == HIPOBJ_REASON_DEFAULT_START);
    CHECK(transfer(t, 16 << 20, 100, 100, &why) == HIPOBJ_PATH_RDMA && why == HIPOBJ_REASON_DEFAULT_START);

    /* 16 MiB: HTTP is 3x faster here; once both are measured the cell holds HTTP. */
    for (int i = 0; i < 12; i++) transfer(t, 16 << 20, 300, 900, NULL);
    CHECK(transfer(t, 16 << 20, 300, 900, &why) == HIPOBJ_PATH_HTTP && why == HIPOBJ_REASON_MEASURED);

    uint64_t n = 0, bytes = 0, probes = 0, all = 0;
    CHECK(is_err(hipObjTransportCounters(t, HIPOBJ_PATH_RDMA, HIPOBJ_REASON_PROBE, &n, &bytes, &probes),
                 hipObjSuccess));
    CHECK(n >= 3 && bytes == n * (16 << 20));
    uint64_t http_n = 0;
    CHECK(is_err(hipObjTransportCounters(t, HIPOBJ_PATH_HTTP, HIPOBJ_REASON_FORCED, &http_n, NULL, NULL),
                 hipObjSuccess));
    all = n + http_n;
    CHECK(all == 15);

    /* An endpoint that answered 501: HTTP to it, said once; others unchanged. */
    int first = -1;
    CHECK(is_err(hipObjTransportNoRdma(t, "http://declines:9000", &first), hipObjSuccess) && first == 1);
    CHECK(is_err(hipObjTransportNoRdma(t, "http://declines:9000", &first), hipObjSuccess) && first == 0);
    hipObjTransportPath_t path = -1;
    CHECK(is_err(hipObjTransportChoose(t, "http://declines:9000", 16 << 20, HIPOBJ_TRANSPORT_PUT,
                                       HIPOBJ_TRANSPORT_GPU, &path, &why),
                 hipObjSuccess));
    CHECK(path == HIPOBJ_PATH_HTTP && why == HIPOBJ_REASON_DECLINED);
    CHECK(is_err(hipObjTransportChoose(t, "http://other:9000", 16 << 20, HIPOBJ_TRANSPORT_PUT,
                                       HIPOBJ_TRANSPORT_GPU, &path, &why),
                 hipObjSuccess));
    CHECK(path == HIPOBJ_PATH_RDMA && why == HIPOBJ_REASON_DEFAULT_START);

    /* No RDMA device in this process: HTTP everywhere. */
    CHECK(is_err(hipObjTransportNoRdma(t, NULL, &first), hipObjSuccess) && first == 1);
    CHECK(transfer(t, 1 << 30, 900, 1, &why) == HIPOBJ_PATH_HTTP && why == HIPOBJ_REASON_NO_RDMA_DEVICE);
    hipObjTransportDestroy(t);
}

static void forced(void) {
    hipObjTransport_t *t = NULL;
    CHECK(is_err(hipObjTransportCreate(HIPOBJ_TRANSPORT_RDMA, &t), hipObjSuccess));
    hipObjTransportReason_t why = -1;
    CHECK(transfer(t, 4096, 1, 1000, &why) == HIPOBJ_PATH_RDMA && why == HIPOBJ_REASON_FORCED);
    CHECK(is_err(hipObjTransportNoRdma(t, NULL, NULL), hipObjSuccess));
    CHECK(transfer(t, 4096, 1, 1000, &why) == HIPOBJ_PATH_RDMA && why == HIPOBJ_REASON_FORCED);
    hipObjTransportDestroy(t);
    CHECK(is_err(hipObjTransportCreate(HIPOBJ_TRANSPORT_HTTP, &t), hipObjSuccess));
    CHECK(transfer(t, 1 << 30, 1000, 1, &why) == HIPOBJ_PATH_HTTP && why == HIPOBJ_REASON_FORCED);
    hipObjTransportDestroy(t);
}

/* HIPOBJ_TRANSPORT_FROM_ENV: the mode the variable names (any case), AUTO when unset or empty, and
 * an unknown name refused with nothing written. */
static void from_env(void) {
    hipObjTransport_t *t = NULL;
    hipObjTransportReason_t why = -1;
    CHECK(setenv("HIPOBJ_TRANSPORT", " RDMA", 1) == 0);
    CHECK(is_err(hipObjTransportCreate(HIPOBJ_TRANSPORT_FROM_ENV, &t), hipObjSuccess));
    CHECK(transfer(t, 4096, 1, 1000, &why) == HIPOBJ_PATH_RDMA && why == HIPOBJ_REASON_FORCED);
    hipObjTransportDestroy(t);
    CHECK(setenv("HIPOBJ_TRANSPORT", "http", 1) == 0);
    CHECK(is_err(hipObjTransportCreate(HIPOBJ_TRANSPORT_FROM_ENV, &t), hipObjSuccess));
    CHECK(transfer(t, 1 << 30, 1000, 1, &why) == HIPOBJ_PATH_HTTP && why == HIPOBJ_REASON_FORCED);
    hipObjTransportDestroy(t);
    CHECK(setenv("HIPOBJ_TRANSPORT", "", 1) == 0);
    CHECK(is_err(hipObjTransportCreate(HIPOBJ_TRANSPORT_FROM_ENV, &t), hipObjSuccess));
    CHECK(transfer(t, 4096, 1, 1000, &why) == HIPOBJ_PATH_HTTP && why == HIPOBJ_REASON_DEFAULT_START);
    hipObjTransportDestroy(t);
    hipObjTransport_t *const sentinel = (hipObjTransport_t *)&t;
    t = sentinel;
    CHECK(setenv("HIPOBJ_TRANSPORT", "tcp", 1) == 0);
    CHECK(is_err(hipObjTransportCreate(HIPOBJ_TRANSPORT_FROM_ENV, &t), hipObjInvalidValue) && t == sentinel);
    CHECK(unsetenv("HIPOBJ_TRANSPORT") == 0);
    CHECK(is_err(hipObjTransportCreate(HIPOBJ_TRANSPORT_FROM_ENV, &t), hipObjSuccess) && t != sentinel);
    CHECK(transfer(t, 1 << 20, 1000, 1, &why) == HIPOBJ_PATH_RDMA && why == HIPOBJ_REASON_DEFAULT_START);
    hipObjTransportDestroy(t);
}

static void argument_checks(void) {
    hipObjTransport_t *t = (hipObjTransport_t *)&t; /* a sentinel that must survive */
    hipObjTransport_t *const sentinel = t;
    CHECK(is_err(hipObjTransportCreate(4, &t), hipObjInvalidValue) && t == sentinel);
    CHECK(is_err(hipObjTransportCreate(-1, &t), hipObjInvalidValue) && t == sentinel);
    CHECK(is_err(hipObjTransportCreate(HIPOBJ_TRANSPORT_AUTO, NULL), hipObjInvalidValue));
    CHECK(is_err(hipObjTransportCreate(HIPOBJ_TRANSPORT_AUTO, &t), hipObjSuccess) && t != sentinel);
    hipObjTransportPath_t path = 77;
    hipObjTransportReason_t reason = 77;
    CHECK(is_err(hipObjTransportChoose(NULL, ep, 1, 0, 0, &path, &reason), hipObjInvalidValue));
    CHECK(is_err(hipObjTransportChoose(t, NULL, 1, 0, 0, &path, &reason), hipObjInvalidValue));
    CHECK(is_err(hipObjTransportChoose(t, ep, 1, 2, 0, &path, &reason), hipObjInvalidValue));
    CHECK(is_err(hipObjTransportChoose(t, ep, 1, 0, 3, &path, &reason), hipObjInvalidValue));
    CHECK(is_err(hipObjTransportChoose(t, ep, 1, 0, 0, NULL, &reason), hipObjInvalidValue));
    CHECK(path == 77 && reason == 77);
    CHECK(is_err(hipObjTransportChoose(t, ep, 1, 0, 0, &path, NULL), hipObjSuccess) && path == HIPOBJ_PATH_HTTP);
    CHECK(is_err(hipObjTransportRecord(t, ep, 1, 0, 0, 2, 0, 1.0), hipObjInvalidValue));
    CHECK(is_err(hipObjTransportRecord(t, ep, 1, 0, 0, 0, 6, 1.0), hipObjInvalidValue));
    CHECK(is_err(hipObjTransportRecord(t, NULL, 1, 0, 0, 0, 0, 1.0), hipObjInvalidValue));
    CHECK(is_err(hipObjTransportNoRdma(NULL, NULL, NULL), hipObjInvalidValue));
    uint64_t n = 5;
    CHECK(is_err(hipObjTransportCounters(t, 2, 0, &n, NULL, NULL), hipObjInvalidValue) && n == 5);
    CHECK(is_err(hipObjTransportCounters(t, 0, 0, &n, NULL, NULL), hipObjSuccess) && n == 0);
    hipObjTransportDestroy(t);
    hipObjTransportDestroy(NULL);
}

int main(void) {
    values();
    auto_mode();
    forced();
    from_env();
    argument_checks();
    return report("api_transport_test");
}
