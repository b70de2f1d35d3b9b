/* The batch extension header (include/hipobj_batch.h) as a C11 or C++11 program sees it (compiled
 * as both, -Wall -Wextra -Werror -pedantic): the structs' layout and values, and the refusals
 * that need no RDMA device: before hipObjInit(), hipObjBatchCreate() answers hipObjNotInitialized
 * and writes nothing; a handle that is not an open queue (NULL, made up, or destroyed) is
 * hipObjInvalidValue for every call (hipObjBatchHead too), with nothing written. Queues moving bytes are tested in the
 * lane (tests/batch_rdma.rs, examples/batch-get.c). Prints "N passed, M failed"; the exit status
 * is non-zero when anything failed. */

#include "hipobj_batch.h"
#include "hipobj_batch.h" /* #pragma once */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

static void layout(void) {
    CHECK(HIPOBJ_BATCH_GET == 0 && HIPOBJ_BATCH_PUT == 1);
    CHECK(HIPOBJ_BATCH_COMPLETE == 0 && HIPOBJ_BATCH_FAILED == 1 && HIPOBJ_BATCH_CANCELLED == 2);
    CHECK(HIPOBJ_BATCH_PATH_UNKNOWN == 0 && HIPOBJ_BATCH_PATH_RDMA_V1 == 1 && HIPOBJ_BATCH_PATH_RDMA_V2 == 2 &&
          HIPOBJ_BATCH_PATH_HTTP == 3);
    CHECK(offsetof(hipObjBatchConfig_t, transport) == 6 * sizeof(void *) + 8);
    CHECK(sizeof(hipObjBatchConfig_t) == 6 * sizeof(void *) + 12 + (sizeof(void *) == 8 ? 4 : 0));
    CHECK(HIPOBJ_BATCH_MAX_DEPTH == 4096);
    CHECK(offsetof(hipObjBatchConfig_t, depth) == 6 * sizeof(void *));
    CHECK(offsetof(hipObjBatchOp_t, objectOffset) == 3 * sizeof(void *));
    CHECK(offsetof(hipObjBatchOp_t, cookie) == 3 * sizeof(void *) + 8 + 3 * sizeof(size_t));
    CHECK(offsetof(hipObjBatchEvent_t, error) == 12);
    CHECK(offsetof(hipObjBatchEvent_t, s3Code) == 24);
    CHECK(offsetof(hipObjBatchEvent_t, bytes) == 24 + HIPOBJ_BATCH_S3_CODE_LEN);
    CHECK(sizeof(hipObjBatchEvent_t) == 24 + HIPOBJ_BATCH_S3_CODE_LEN + 8 + 4 + 4 + 8);
}

static void before_init(void) {
    hipObjBatchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.endpoint = "http://127.0.0.1:9";
    cfg.depth = 8;
    hipObjBatch_t *q = (hipObjBatch_t *)(uintptr_t)0x5a5a;
    CHECK(is_err(hipObjBatchCreate(&cfg, &q), hipObjNotInitialized));
    CHECK(q == (hipObjBatch_t *)(uintptr_t)0x5a5a);
    CHECK(is_err(hipObjBatchCreate(NULL, &q), hipObjNotInitialized));
}

static void not_a_queue(hipObjBatch_t *q) {
    char buf[16];
    hipObjBatchOp_t op;
    memset(&op, 0, sizeof op);
    op.opcode = HIPOBJ_BATCH_GET;
    op.bucket = "b";
    op.key = "k";
    op.length = sizeof buf;
    op.buffer = buf;
    hipObjBatchEvent_t ev[2], before[2];
    memset(ev, 0x5a, sizeof ev);
    memcpy(before, ev, sizeof ev);
    size_t n = 77;
    int fd = -7, status = -9;
    uint64_t size = 77;
    CHECK(is_err(hipObjBatchSubmit(q, &op, 1), hipObjInvalidValue));
    CHECK(is_err(hipObjBatchPoll(q, 0, 2, ev, &n, 0), hipObjInvalidValue));
    CHECK(is_err(hipObjBatchCancel(q, NULL), hipObjInvalidValue));
    CHECK(is_err(hipObjBatchCancelAll(q), hipObjInvalidValue));
    CHECK(is_err(hipObjBatchEventFd(q, &fd), hipObjInvalidValue));
    CHECK(is_err(hipObjBatchHead(q, "b", "k", &size, &status), hipObjInvalidValue));
    CHECK(is_err(hipObjBatchDestroy(q), hipObjInvalidValue));
    CHECK(n == 77 && fd == -7 && size == 77 && status == -9);
    CHECK(memcmp(ev, before, sizeof ev) == 0);
}

int main(void) {
    layout();
    before_init();
    not_a_queue(NULL);
    not_a_queue((hipObjBatch_t *)(uintptr_t)0x12345678);
    return report("api_batch_test");
}
