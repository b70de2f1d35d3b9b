/* hipObject C API extension: many transfers in flight from one thread.
 *
 * SPDX-License-Identifier: MIT
 *
 * The seed's hipObjGet()/hipObjPut() move one object per calling thread,
 * through the application's own S3 callbacks. A batch queue moves many at
 * once for one thread (an inference server's scheduler, a KV-cache tier): it
 * is created with a depth and an S3 endpoint with its credentials; the
 * library sends the S3 requests itself (SigV4, the token, RDMA v1 or
 * hipobj-rc-v2 as the endpoint speaks it, the AWS standard retry mode,
 * failover across the RDMA devices); operations are submitted without
 * blocking and end out of order, as events the application polls, or waits
 * for on the queue's eventfd. The shape is cuFile's batch API (SetUp,
 * Submit, GetStatus, Cancel, Destroy). docs/batch.md has the design.
 *
 *   hipObjBatchConfig_t cfg = {.endpoint = "http://10.0.0.2:9000", .depth = 256, .verify = 1,
 *                              .transport = HIPOBJ_TRANSPORT_RDMA};
 *   hipObjBatch_t *q;
 *   hipObjBatchCreate(&cfg, &q);                       (after hipObjInit())
 *   hipObjBatchOp_t op = {HIPOBJ_BATCH_GET, "bucket", "key", 0, len, buf, 0, my_cookie};
 *   hipObjBatchSubmit(q, &op, 1);                      (buf registered)
 *   hipObjBatchEvent_t ev[64]; size_t n;
 *   hipObjBatchPoll(q, 1, 64, ev, &n, -1);             (ev[i].cookie == my_cookie, ...)
 *   hipObjBatchDestroy(q);
 *
 * Rules:
 *   - Submit is all or nothing and never blocks. Every operation is checked
 *     first; then the room: operations submitted and not yet polled, with
 *     these, past the depth answer hipObjBusy. A rejected submit queues
 *     nothing.
 *   - Each submitted operation ends exactly once, as one event that carries
 *     its cookie back untouched; an event is handed out by one poll only. A
 *     cookie names one operation from its submit until its event is polled:
 *     submitting a cookie in use is hipObjInvalidValue.
 *   - An operation holds a use of its registration from submit to its event:
 *     hipObjBufDeregister() of that buffer answers hipObjBusy meanwhile, and
 *     the memory stays the operation's (the NIC may write it) until then.
 *   - Cancel of a queued operation ends it at once (CANCELLED). Of a running
 *     one: it stops before its next transfer (a GET of more than 8 MiB moves
 *     in parts; a multipart PUT is aborted), and the call returns once the
 *     transfer in progress has ended, so that from then on nothing, NIC or
 *     library, touches the buffer for it. Its event is CANCELLED, or COMPLETE
 *     when every byte had already moved. A cancelled PUT leaves the object as
 *     it was, or whole.
 *   - Destroy cancels what is left, waits for the workers to let go of every
 *     buffer, closes the eventfd and drops the events not polled.
 *     hipObjShutdown() destroys every queue still open. A queue used after
 *     either answers hipObjInvalidValue: handles are never reused.
 *   - Each operation goes over RDMA (v1 or hipobj-rc-v2, as the endpoint
 *     speaks it) or plain HTTP, as the queue's transport mode decides per
 *     operation (hipobj_transport.h: AUTO measures both paths per size
 *     class and takes the faster; RDMA and HTTP force one). The event names
 *     the path taken. Over HTTP the bytes are copied between the body and
 *     the registration (through a host bounce for device memory); the
 *     checks are the same.
 *
 * Errors are those of include/hipobj.h; argument checks come in parameter
 * order.
 */

#pragma once

#include <stddef.h>
#include <stdint.h>

#include "hipobj.h"
#include "hipobj_transport.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A queue (opaque): a handle, never a pointer the application may follow. */
typedef struct hipObjBatch hipObjBatch_t;

/* The most operations a queue holds between submit and poll. */
#define HIPOBJ_BATCH_MAX_DEPTH 4096

/* An operation's direction. */
#define HIPOBJ_BATCH_GET 0 /* object bytes -> buffer */
#define HIPOBJ_BATCH_PUT 1 /* buffer -> the whole object */

/* How an operation ended. */
#define HIPOBJ_BATCH_COMPLETE 0
#define HIPOBJ_BATCH_FAILED 1
#define HIPOBJ_BATCH_CANCELLED 2

/* The path an operation took: RDMA (with the protocol the endpoint speaks,
 * as far as known) or plain HTTP. */
#define HIPOBJ_BATCH_PATH_UNKNOWN 0
#define HIPOBJ_BATCH_PATH_RDMA_V1 1
#define HIPOBJ_BATCH_PATH_RDMA_V2 2
#define HIPOBJ_BATCH_PATH_HTTP 3    /* plain HTTP (the queue's transport chose it) */

/* Room for an S3 error code in an event, its NUL included. */
#define HIPOBJ_BATCH_S3_CODE_LEN 64

/* What a queue is created with. Strings are copied; NULL means "resolve as
 * the AWS SDKs do": keys from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
 * (+ AWS_SESSION_TOKEN), else the profile (AWS_PROFILE, else "default") of
 * ~/.aws/credentials; region from AWS_REGION, AWS_DEFAULT_REGION, else
 * us-east-1; an https endpoint's roots from AWS_CA_BUNDLE, else the
 * system's. */
typedef struct {
    const char *endpoint;  /* http(s)://host:port; required */
    const char *region;    /* or NULL */
    const char *accessKey; /* or NULL; with secretKey */
    const char *secretKey; /* or NULL; with accessKey */
    const char *profile;   /* or NULL */
    const char *caBundle;  /* a PEM file, or NULL */
    unsigned depth;        /* 1 .. HIPOBJ_BATCH_MAX_DEPTH */
    int verify;            /* nonzero: a GET of a whole object checks the landed
                              bytes against the stored checksum its reply names */
    hipObjTransportMode_t transport; /* HIPOBJ_TRANSPORT_AUTO (0), _RDMA, _HTTP
                              or _FROM_ENV (HIPOBJ_TRANSPORT): per operation */
} hipObjBatchConfig_t;

/* One operation. */
typedef struct {
    int opcode;            /* HIPOBJ_BATCH_GET or HIPOBJ_BATCH_PUT */
    const char *bucket;    /* NUL-terminated, copied at submit */
    const char *key;       /* NUL-terminated, copied at submit */
    uint64_t objectOffset; /* GET: the object's first byte; PUT: 0 */
    size_t length;         /* bytes, at least 1 */
    void *buffer;          /* the base of a registration (hipObjBufRegister*) */
    size_t bufferOffset;   /* buffer + bufferOffset .. + length lies inside it */
    void *cookie;          /* given back untouched in the event */
} hipObjBatchOp_t;

/* One operation's end. */
typedef struct {
    void *cookie;
    int status;            /* HIPOBJ_BATCH_COMPLETE, _FAILED or _CANCELLED */
    hipObjError_t error;   /* FAILED: why (hipObjS3Error when the server refused) */
    int httpStatus;        /* the server's status of a refusal, else 0 */
    char s3Code[HIPOBJ_BATCH_S3_CODE_LEN]; /* its S3 error code, else "" */
    uint64_t bytes;        /* moved */
    int path;              /* HIPOBJ_BATCH_PATH_* */
    int verified;          /* 1: the landed bytes had the stored checksum */
    uint64_t retries;      /* requests sent again after a retryable failure */
} hipObjBatchEvent_t;

/* A queue and its workers (one per RDMA connection, HIPOBJ_MAX_TRANSFERS, at
 * most depth). Needs hipObjInit(). Errors: hipObjNotInitialized;
 * hipObjInvalidValue, in this order, when config is NULL, endpoint is NULL,
 * depth is 0 or past HIPOBJ_BATCH_MAX_DEPTH, transport is not a
 * HIPOBJ_TRANSPORT_* mode (or FROM_ENV and HIPOBJ_TRANSPORT is not auto, rdma
 * or http), batch is NULL, only one of accessKey and secretKey is given,
 * endpoint is not http(s)://host:port, or caBundle cannot be read. *batch is
 * written on success only. */
HIPOBJ_API hipObjError_t hipObjBatchCreate(const hipObjBatchConfig_t *config, hipObjBatch_t **batch);

/* Queue count operations (all or none). Errors: hipObjInvalidValue for a
 * batch that is not an open queue, ops NULL, count 0 or past the depth, an
 * opcode, bucket, key, length or offset out of bounds, a cookie in use;
 * hipObjBufNotRegistered for a buffer that is not a registration's base;
 * hipObjBusy when the queue has no room for all of them. */
HIPOBJ_API hipObjError_t hipObjBatchSubmit(hipObjBatch_t *batch, const hipObjBatchOp_t *ops, size_t count);

/* Up to maxEvents events into events, *count of them, once minEvents are
 * ready (never more than can still come) or timeoutMs passed (-1: no limit,
 * 0: no wait). Running out of time is no error: *count says how many. Errors:
 * hipObjInvalidValue for a batch that is not an open queue, events NULL with
 * maxEvents > 0, count NULL, minEvents > maxEvents, timeoutMs < -1. */
HIPOBJ_API hipObjError_t hipObjBatchPoll(hipObjBatch_t *batch, size_t minEvents, size_t maxEvents,
                                         hipObjBatchEvent_t *events, size_t *count, int timeoutMs);

/* Cancel the operation of cookie (see Rules). Errors: hipObjInvalidValue for
 * a batch that is not an open queue, or a cookie that names no operation not
 * yet polled. */
HIPOBJ_API hipObjError_t hipObjBatchCancel(hipObjBatch_t *batch, void *cookie);

/* Cancel every operation not yet ended. */
HIPOBJ_API hipObjError_t hipObjBatchCancelAll(hipObjBatch_t *batch);

/* The queue's eventfd: readable while events wait to be polled; poll()
 * makes it unreadable when it takes the last one. Owned by the queue (do not
 * close it); closed by hipObjBatchDestroy(). */
HIPOBJ_API hipObjError_t hipObjBatchEventFd(hipObjBatch_t *batch, int *fd);

/* HEAD through the queue's endpoint and keys, on the calling thread (one
 * request, retried by the standard mode): an object (key given) or a bucket
 * (key NULL). *size gets the object's length (0 for a bucket) on success
 * only; *httpStatus, when not NULL, the server's final status (0 when no
 * reply came), whatever the result. Errors: hipObjInvalidValue for a batch
 * that is not an open queue, bucket NULL or "", size NULL; hipObjS3Error
 * when the server refused (404: no such object or bucket; 403: the keys) or
 * could not be reached. */
HIPOBJ_API hipObjError_t hipObjBatchHead(hipObjBatch_t *batch, const char *bucket, const char *key,
                                         uint64_t *size, int *httpStatus);

/* Cancel what is left, wait for the workers, free the queue. */
HIPOBJ_API hipObjError_t hipObjBatchDestroy(hipObjBatch_t *batch);

#ifdef __cplusplus
}
#endif
