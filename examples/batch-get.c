/* batch-get: many objects through one batch queue from one thread (include/hipobj_batch.h).
 *
 *   batch-get NIC ENDPOINT BUCKET COUNT OBJECT_BYTES
 *
 * Credentials and region come as the AWS SDKs find them (AWS_ACCESS_KEY_ID and
 * AWS_SECRET_ACCESS_KEY, AWS_PROFILE and ~/.aws/credentials, AWS_REGION); no S3 client of the
 * application's is involved: the queue sends the requests. The program registers one buffer of
 * COUNT slices, PUTs COUNT objects (batch-0 .. batch-COUNT-1, each its own pattern) through the
 * queue, clears the buffer, GETs them back through the queue, waiting on the queue's eventfd with
 * poll(2), and compares every byte. Each operation goes over RDMA or plain HTTP as HIPOBJ_TRANSPORT
 * says (auto, the default, decides by measurement; rdma; http). It prints one line and exits 1
 * when any operation failed or any byte differs. */
#include <hipobj.h>
#include <hipobj_batch.h>

#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEPTH 64

static void pattern(unsigned char *out, size_t len, size_t index) {
    uint64_t x = 0x9e3779b97f4a7c15ull ^ ((uint64_t)index << 20);
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[i] = (unsigned char)x;
    }
}

/* Submit COUNT operations of `opcode`, at most DEPTH in flight, and wait for every event: the
 * number that did not complete. */
static size_t run_phase(hipObjBatch_t *q, int opcode, const char *bucket, unsigned char *buffer,
                        size_t count, size_t size, char keys[][32], uint64_t *verified, size_t *over_http) {
    size_t next = 0, ended = 0, failed = 0, in_flight = 0;
    int fd = -1;
    hipObjBatchEventFd(q, &fd);
    while (ended < count) {
        while (next < count && in_flight < DEPTH) {
            hipObjBatchOp_t op = {opcode, bucket, keys[next], 0, size, buffer, next * size,
                                  (void *)(uintptr_t)(next + 1)};
            hipObjError_t e = hipObjBatchSubmit(q, &op, 1);
            if (e.opError == hipObjBusy) break; /* full: poll first */
            if (e.opError != hipObjSuccess) {
                fprintf(stderr, "submit %s: %s\n", keys[next], hipObjGetErrorString(e.opError));
                return count;
            }
            next++;
            in_flight++;
        }
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 120000) != 1) {
            fprintf(stderr, "no event in 120 s\n");
            return count;
        }
        hipObjBatchEvent_t ev[DEPTH];
        size_t n = 0;
        hipObjBatchPoll(q, 0, DEPTH, ev, &n, 0);
        for (size_t i = 0; i < n; i++) {
            size_t index = (size_t)(uintptr_t)ev[i].cookie - 1;
            if (ev[i].status != HIPOBJ_BATCH_COMPLETE) {
                fprintf(stderr, "%s %s: status %d, %s (HTTP %d %s)\n", opcode ? "PUT" : "GET", keys[index],
                        ev[i].status, hipObjGetErrorString(ev[i].error.opError), ev[i].httpStatus, ev[i].s3Code);
                failed++;
            }
            *verified += (uint64_t)ev[i].verified;
            *over_http += ev[i].path == HIPOBJ_BATCH_PATH_HTTP;
        }
        ended += n;
        in_flight -= n;
    }
    return failed;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: batch-get NIC ENDPOINT BUCKET COUNT OBJECT_BYTES\n");
        return 2;
    }
    size_t count = strtoull(argv[4], NULL, 10), size = strtoull(argv[5], NULL, 10);
    if (count == 0 || count > 100000 || size == 0 || size > ((size_t)1 << 30) / count) {
        fprintf(stderr, "COUNT 1..100000 and COUNT x OBJECT_BYTES up to 1 GiB\n");
        return 2;
    }
    hipObjConfig_t init = {0};
    init.nicHint = argv[1];
    init.gpuDevice = -1;
    hipObjError_t e = hipObjInit(&init);
    if (e.opError != hipObjSuccess) {
        fprintf(stderr, "hipObjInit(%s): %s\n", argv[1], hipObjGetErrorString(e.opError));
        return 1;
    }
    unsigned char *buffer = malloc(count * size), *want = malloc(size);
    char(*keys)[32] = calloc(count, sizeof *keys);
    if (!buffer || !want || !keys) return 1;
    for (size_t i = 0; i < count; i++) {
        snprintf(keys[i], sizeof keys[i], "batch-%zu", i);
        pattern(buffer + i * size, size, i);
    }
    e = hipObjBufRegisterHost(buffer, count * size);
    hipObjBatchConfig_t cfg = {0};
    cfg.endpoint = argv[2];
    cfg.depth = DEPTH;
    cfg.verify = 1;
    cfg.transport = HIPOBJ_TRANSPORT_FROM_ENV;
    hipObjBatch_t *q = NULL;
    if (e.opError == hipObjSuccess) e = hipObjBatchCreate(&cfg, &q);
    if (e.opError != hipObjSuccess) {
        fprintf(stderr, "setup: %s\n", hipObjGetErrorString(e.opError));
        return 1;
    }
    uint64_t verified = 0;
    size_t over_http = 0;
    size_t put_failed = run_phase(q, HIPOBJ_BATCH_PUT, argv[3], buffer, count, size, keys, &verified, &over_http);
    memset(buffer, 0, count * size);
    size_t get_failed = run_phase(q, HIPOBJ_BATCH_GET, argv[3], buffer, count, size, keys, &verified, &over_http);
    size_t differ = 0;
    for (size_t i = 0; i < count; i++) {
        pattern(want, size, i);
        differ += memcmp(buffer + i * size, want, size) != 0;
    }
    hipObjBatchDestroy(q);
    hipObjBufDeregister(buffer);
    hipObjShutdown();
    printf("batch-get: %zu PUT (%zu failed), %zu GET (%zu failed, %llu verified), %zu differ, %zu over HTTP\n", count,
           put_failed, count, get_failed, (unsigned long long)verified, differ, over_http);
    free(buffer);
    free(want);
    free(keys);
    return put_failed || get_failed || differ ? 1 : 0;
}
