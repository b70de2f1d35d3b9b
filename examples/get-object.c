/* get-object: read an S3 object into host memory over RDMA with hipObject, and save it.
 *
 *   get-object [-e ENDPOINT] [-n NIC] [-r REGION] [-a ACCESS_KEY -s SECRET_KEY] [-c CA_BUNDLE] BUCKET KEY SIZE FILE
 *
 * ENDPOINT, REGION and the keys default to AWS_ENDPOINT_URL, AWS_REGION (AWS_DEFAULT_REGION) and
 * AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; NIC to HIPOBJ_NIC. SIZE is the object's size (the
 * buffer the server writes into). A server that declines RDMA (501) is read over plain HTTP. */
#include "s3_curl.h"

#include <hipobj.h>

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    struct s3_target target = {0};
    struct s3_request req = {0};
    hipObjError_t e;
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
    e = hipObjGet(NULL, buf, size, 0, &(hipObjOps_t){s3_send_request, s3_recv_reply}, &req);
    if (e.opError == hipObjSuccess) {
        printf("GET s3://%s/%s: %zu bytes over RDMA (%d requests)\n", target.bucket, target.key, size, req.requests);
        received = size;
    } else if (s3_declined_rdma(&req)) {
        printf("server declined RDMA (501): falling back to plain HTTP\n");
        if (s3_plain_get(&req, buf, size, &received) != 0) goto done;
        printf("GET s3://%s/%s: %zu bytes over plain HTTP\n", target.bucket, target.key, received);
    } else {
        fprintf(stderr, "hipObjGet: %s (HTTP %ld, reply '%.*s')\n", hipObjGetErrorString(e.opError), req.http_status,
                (int)req.reply_len, req.reply);
        goto done;
    }
    if (s3_save_file(argv[arg + 3], buf, received) == 0) status = 0;
done:
    s3_host_session_close(buf);
out:
    free(buf);
    return status;
}
