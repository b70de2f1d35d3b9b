/* The hipobj-rc-v2 control requests of examples/v2-object.c with libcurl: the four
 * hipObjOpsV2_t callbacks. Each request is a body-less POST to the control endpoint, signed by
 * libcurl's own SigV4 (CURLOPT_AWS_SIGV4: every x-amz-rdma-* header is in SignedHeaders), sent
 * from the NIC address the transfer's token names. READY is split: sendReadyRequest drives a
 * curl multi handle until the request has left, finishReady drives it to the answer. */
#ifndef S3_CURL_V2_H
#define S3_CURL_V2_H

#include "s3_curl.h"

#include <hipobj_v2.h>

#include <curl/curl.h>

/* The answer headers a v2 request keeps (names lowercased). */
#define S3V2_MAX_HEADERS 48
struct s3v2_headers {
    int n;
    char name[S3V2_MAX_HEADERS][48];
    char value[S3V2_MAX_HEADERS][256];
};

/* One transfer's control state, the `ctx` of hipObjGetV2/hipObjPutV2. */
struct s3v2_request {
    const struct s3_target *target; /* region, keys (none: unsigned) */
    const char *control;            /* control endpoint, http://host:port */
    /* the READY exchange in flight */
    CURLM *multi;
    CURL *ready;
    struct curl_slist *ready_headers;
    char url[1024], userpwd[512], sigv4[128], interface[80];
    int ready_sent;
    struct s3v2_headers answer; /* of the last request */
    long http_status;           /* of the last request */
    int prepares, readies, cancels;
};

int s3v2_send_prepare(void *ctx, const hipObjTransferReqV2_t *req, hipObjPrepareReplyV2_t *out);
int s3v2_send_ready_request(void *ctx, const hipObjTransferReqV2_t *req);
int s3v2_finish_ready(void *ctx, const hipObjTransferReqV2_t *req, hipObjFinalReplyV2_t *out);
int s3v2_send_cancel(void *ctx, const hipObjTransferReqV2_t *req);

/* Release a READY exchange that was abandoned (finishReady never came). */
void s3v2_request_cleanup(struct s3v2_request *r);

#endif
