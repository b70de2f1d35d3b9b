/* get-object: read an S3 object into host memory over RDMA with hipObject, check it, and save it.
 *
 *   get-object [-e ENDPOINT] [-n NIC] [-r REGION] [-a ACCESS_KEY -s SECRET_KEY] [-c CA_BUNDLE] BUCKET KEY SIZE FILE
 *
 * ENDPOINT, REGION and the keys default to AWS_ENDPOINT_URL, AWS_REGION (AWS_DEFAULT_REGION) and
 * AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; NIC to HIPOBJ_NIC. SIZE is the object's size (the
 * buffer the server writes into). A server that declines RDMA (501) is read over plain HTTP.
 *
 * The GET asks for the object's stored checksum (x-amz-checksum-mode: ENABLED) and checks the
 * bytes that landed against it (include/hipobj_checksum.h) before FILE is written: a mismatch is
 * read again once, then the program exits 1 naming the algorithm and both values, and FILE is not
 * written. An object stored without a checksum is saved, said to be unchecked. */
#include "s3_curl.h"

#include <hipobj.h>
#include <hipobj_checksum.h>

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>

/* One GET of the whole object into buf: over RDMA, or plain HTTP when the server declines it.
 * 0 with the bytes received in *received, or -1 after printing why. */
static int get_once(struct s3_request *req, unsigned char *buf, size_t size, size_t *received) {
    const struct s3_target *t = req->target;
    hipObjError_t e = hipObjGet(NULL, buf, size, 0, &(hipObjOps_t){s3_send_request, s3_recv_reply}, req);
    if (e.opError == hipObjSuccess) {
        printf("GET s3://%s/%s: %zu bytes over RDMA (%d requests)\n", t->bucket, t->key, size, req->requests);
        *received = size;
        return 0;
    }
    if (s3_declined_rdma(req)) {
        printf("server declined RDMA (501): falling back to plain HTTP\n");
        if (s3_plain_get(req, buf, size, received) != 0) return -1;
        printf("GET s3://%s/%s: %zu bytes over plain HTTP\n", t->bucket, t->key, *received);
        return 0;
    }
    fprintf(stderr, "hipObjGet: %s (HTTP %ld, reply '%.*s')\n", hipObjGetErrorString(e.opError), req->http_status,
            (int)req->reply_len, req->reply);
    return -1;
}

/* GET, check, and on a mismatch GET and check once more. 0 when the bytes may be saved (verified,
 * or stored without a checksum), -1 after printing why not. */
static int get_checked(struct s3_request *req, unsigned char *buf, size_t size, size_t *received) {
    const struct s3_target *t = req->target;
    char message[256];
    int attempt, found = -1;
    for (attempt = 1; attempt <= 2; attempt++) {
        if (get_once(req, buf, size, received) != 0) return -1;
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
    int arg = s3_parse_args(argc, argv, &target), status = 1;
    if (arg < 0 || argc - arg != 4) {
        fprintf(stderr, "usage: %s [-e ENDPOINT] [-n NIC] [-r REGION] [-a ACCESS_KEY -s SECRET_KEY] [-c CA_BUNDLE] BUCKET KEY SIZE FILE\n",
                argv[0]);
        return 2;
    }
    target.bucket = argv[arg];
    target.key = argv[arg + 1];
    size = strtoull(argv[arg + 2], NULL, 10);
    buf = malloc(size ? size : 1);
    if (!buf) return 1;
    if (s3_host_session_open(&target, buf, size) != 0) goto out;
    req.target = &target;
    req.method = "GET";
    req.checksum_mode = 1;
    if (get_checked(&req, buf, size, &received) == 0 && s3_save_file(argv[arg + 3], buf, received) == 0) status = 0;
    s3_host_session_close(buf);
out:
    free(buf);
    return status;
}
