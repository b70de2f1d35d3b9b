/* get-object: read an S3 object into host memory over RDMA with hipObject, check it, and save it.
 *
 *   get-object [-e ENDPOINT] [-n NIC] [-r REGION] [-a ACCESS_KEY -s SECRET_KEY] [-c CA_BUNDLE] BUCKET KEY SIZE FILE
 *
 * ENDPOINT, REGION and the keys default to AWS_ENDPOINT_URL, AWS_REGION (AWS_DEFAULT_REGION) and
 * AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; NIC to HIPOBJ_NIC. SIZE is the object's size (the
 * buffer the server writes into).
 *
 * The path is the RDMA-or-HTTP decision's (include/hipobj_transport.h), in the mode HIPOBJ_TRANSPORT
 * names (auto, rdma or http; auto when unset), as for the command line: RDMA for an object of 1 MiB
 * or more, plain HTTP below, until the decision has measured both (a program that reads many
 * objects from one endpoint gets the faster path as measured; this one records its one outcome
 * to show how). A server that declines RDMA (501), or a host where hipObjInit() finds no usable
 * RDMA device, is read over plain HTTP, said once.
 *
 * The bytes that landed are checked against the object's stored checksum before FILE is written
 * (include/hipobj_checksum.h): a token GET's reply names it in x-amz-rdma-checksum unasked, which
 * the header callback keeps (s3_curl.c: on_header, checked by hipObjRdmaChecksumCheck); a plain
 * HTTP GET (and a revision-5 server's token GET) is asked for it with x-amz-checksum-mode: ENABLED. A mismatch is
 * read again once, then the program exits 1 naming the algorithm and both values, and FILE is not
 * written. An object stored without a checksum is saved, said to be unchecked. */
#include "s3_curl.h"

#include <hipobj.h>
#include <hipobj_checksum.h>
#include <hipobj_transport.h>

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const char *reason_name(hipObjTransportReason_t r) {
    static const char *names[] = {"forced", "default start", "measured", "probe", "no RDMA device",
                                  "server declined RDMA"};
    return r >= 0 && r <= HIPOBJ_REASON_DECLINED ? names[r] : "?";
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The decision's path for this GET of `size` bytes to host memory (and why). */
static int choose(hipObjTransport_t *tp, const struct s3_target *t, size_t size, hipObjTransportPath_t *path,
                  hipObjTransportReason_t *reason) {
    hipObjError_t e =
        hipObjTransportChoose(tp, t->endpoint, size, HIPOBJ_TRANSPORT_GET, HIPOBJ_TRANSPORT_HOST, path, reason);
    if (e.opError == hipObjSuccess) return 0;
    fprintf(stderr, "hipObjTransportChoose: %s\n", hipObjGetErrorString(e.opError));
    return -1;
}

/* One GET of the whole object into buf over the path the decision gives (plain HTTP after a 501),
 * its outcome recorded. 0 with the bytes received in *received, or -1 after printing why. */
static int get_once(hipObjTransport_t *tp, struct s3_request *req, unsigned char *buf, size_t size,
                    size_t *received) {
    const struct s3_target *t = req->target;
    hipObjTransportPath_t path;
    hipObjTransportReason_t reason;
    double t0 = now_s();
    if (choose(tp, t, size, &path, &reason) != 0) return -1;
    if (path == HIPOBJ_PATH_RDMA) {
        int first = 0;
        hipObjError_t e = hipObjGet(NULL, buf, size, 0, &(hipObjOps_t){s3_send_request, s3_recv_reply}, req);
        if (e.opError == hipObjSuccess) {
            printf("GET s3://%s/%s: %zu bytes over RDMA (%s, %d requests)\n", t->bucket, t->key, size,
                   reason_name(reason), req->requests);
            *received = size;
            hipObjTransportRecord(tp, t->endpoint, size, HIPOBJ_TRANSPORT_GET, HIPOBJ_TRANSPORT_HOST, path, reason,
                                  now_s() - t0);
            return 0;
        }
        if (!s3_declined_rdma(req)) {
            fprintf(stderr, "hipObjGet: %s (HTTP %ld, reply '%.*s')\n", hipObjGetErrorString(e.opError),
                    req->http_status, (int)req->reply_len, req->reply);
            return -1;
        }
        hipObjTransportNoRdma(tp, t->endpoint, &first);
        if (first) printf("server declined RDMA (501): falling back to plain HTTP\n");
        t0 = now_s();
        if (choose(tp, t, size, &path, &reason) != 0) return -1;
    }
    if (s3_plain_get(req, buf, size, received) != 0) return -1;
    printf("GET s3://%s/%s: %zu bytes over plain HTTP (%s)\n", t->bucket, t->key, *received, reason_name(reason));
    hipObjTransportRecord(tp, t->endpoint, *received, HIPOBJ_TRANSPORT_GET, HIPOBJ_TRANSPORT_HOST, path, reason,
                          now_s() - t0);
    return 0;
}

/* GET, check, and on a mismatch GET and check once more. 0 when the bytes may be saved (verified,
 * or stored without a checksum), -1 after printing why not. */
static int get_checked(hipObjTransport_t *tp, struct s3_request *req, unsigned char *buf, size_t size,
                       size_t *received) {
    const struct s3_target *t = req->target;
    char message[256];
    int attempt, found = -1;
    for (attempt = 1; attempt <= 2; attempt++) {
        if (get_once(tp, req, buf, size, received) != 0) return -1;
        found = s3_check_landed(req, buf, *received, message, sizeof message);
        if (found != HIPOBJ_CHECKSUM_MISMATCH) break;
        if (attempt == 1) fprintf(stderr, "GET s3://%s/%s: %s; reading the object again\n", t->bucket, t->key, message);
    }
    if (found == HIPOBJ_CHECKSUM_MISMATCH) {
        fprintf(stderr, "GET s3://%s/%s: %s (read twice): the bytes are not the object's, nothing saved\n", t->bucket,
                t->key, message);
        return -1;
    }
    if (found < 0) return -1;
    printf("GET s3://%s/%s: %s\n", t->bucket, t->key, message);
    return 0;
}

int main(int argc, char **argv) {
    struct s3_target target = {0};
    struct s3_request req = {0};
    size_t size, received;
    unsigned char *buf;
    hipObjTransport_t *tp = NULL;
    int arg = s3_parse_args(argc, argv, &target), status = 1, rdma;
    if (arg < 0 || argc - arg != 4) {
        fprintf(stderr, "usage: %s [-e ENDPOINT] [-n NIC] [-r REGION] [-a ACCESS_KEY -s SECRET_KEY] [-c CA_BUNDLE] BUCKET KEY SIZE FILE\n",
                argv[0]);
        return 2;
    }
    target.bucket = argv[arg];
    target.key = argv[arg + 1];
    size = strtoull(argv[arg + 2], NULL, 10);
    buf = malloc(size ? size : 1);
    if (!buf || hipObjTransportCreate(HIPOBJ_TRANSPORT_FROM_ENV, &tp).opError != hipObjSuccess) {
        fprintf(stderr, "%s\n", buf ? "HIPOBJ_TRANSPORT: expected auto, rdma or http" : "out of memory");
        free(buf);
        return 1;
    }
    rdma = s3_host_session_open(&target, buf, size) == 0;
    if (!rdma) {
        /* No usable RDMA device (hipObjInit said why above): plain HTTP, as the decision answers,
         * unless RDMA is forced. */
        hipObjTransportPath_t path;
        hipObjTransportReason_t reason;
        hipObjTransportNoRdma(tp, NULL, NULL);
        if (choose(tp, &target, size, &path, &reason) != 0 || path == HIPOBJ_PATH_RDMA) {
            fprintf(stderr, "HIPOBJ_TRANSPORT=rdma and no usable RDMA device: nothing read\n");
            hipObjTransportDestroy(tp);
            free(buf);
            return 3;
        }
        printf("no usable RDMA device: reading over plain HTTP\n");
        curl_global_init(CURL_GLOBAL_DEFAULT);
    }
    req.target = &target;
    req.method = "GET";
    req.checksum_mode = 1; /* a plain GET's checksums (a revision-6 token GET's come unasked) */
    if (get_checked(tp, &req, buf, size, &received) == 0 && s3_save_file(argv[arg + 3], buf, received) == 0)
        status = 0;
    if (rdma)
        s3_host_session_close(buf);
    else
        curl_global_cleanup();
    hipObjTransportDestroy(tp);
    free(buf);
    return status;
}
