/* put-object: store a file as an S3 object over RDMA with hipObject (the server reads the
 * bytes straight out of our registered buffer).
 *
 *   put-object [-e ENDPOINT] [-n NIC] [-r REGION] [-a ACCESS_KEY -s SECRET_KEY] [-c CA_BUNDLE] BUCKET KEY FILE [SIZE]
 *
 * ENDPOINT, REGION and the keys default to AWS_ENDPOINT_URL, AWS_REGION (AWS_DEFAULT_REGION) and
 * AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; NIC to HIPOBJ_NIC. SIZE (default: the whole file) is
 * how many bytes of FILE to store. A server that declines RDMA (501) gets a plain HTTP PUT. */
#include "s3_curl.h"

#include <hipobj.h>

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int main(int argc, char **argv) {
    struct s3_target target = {0};
    struct s3_request req = {0};
    hipObjError_t e;
    struct stat st;
    size_t size;
    unsigned char *buf;
    FILE *in;
    int arg = s3_parse_args(argc, argv, &target), status = 1;
    if (arg < 0 || argc - arg < 3 || argc - arg > 4) {
        fprintf(stderr, "usage: %s [-e ENDPOINT] [-n NIC] [-r REGION] [-a ACCESS_KEY -s SECRET_KEY] [-c CA_BUNDLE] BUCKET KEY FILE [SIZE]\n",
                argv[0]);
        return 2;
    }
    target.bucket = argv[arg];
    target.key = argv[arg + 1];
    in = fopen(argv[arg + 2], "rb");
    if (!in || fstat(fileno(in), &st) != 0) {
        perror(argv[arg + 2]);
        return 1;
    }
    size = argc - arg == 4 ? strtoull(argv[arg + 3], NULL, 10) : (size_t)st.st_size;
    buf = malloc(size ? size : 1);
    if (!buf || fread(buf, 1, size, in) != size) {
        fprintf(stderr, "%s: cannot read %zu bytes\n", argv[arg + 2], size);
        return 1;
    }
    fclose(in);
    if (s3_host_session_open(&target, buf, size) != 0) goto out;
    req.target = &target;
    req.method = "PUT";
    e = hipObjPut(NULL, buf, size, 0, &(hipObjOps_t){s3_send_request, s3_recv_reply}, &req);
    if (e.opError == hipObjSuccess) {
        printf("PUT s3://%s/%s: %zu bytes over RDMA (%d requests)\n", target.bucket, target.key, size, req.requests);
        status = 0;
    } else if (s3_declined_rdma(&req)) {
        printf("server declined RDMA (501): falling back to plain HTTP\n");
        if (s3_plain_put(&req, buf, size) == 0) {
            printf("PUT s3://%s/%s: %zu bytes over plain HTTP\n", target.bucket, target.key, size);
            status = 0;
        }
    } else {
        fprintf(stderr, "hipObjPut: %s (HTTP %ld, reply '%.*s')\n", hipObjGetErrorString(e.opError), req.http_status,
                (int)req.reply_len, req.reply);
    }
    s3_host_session_close(buf);
out:
    free(buf);
    return status;
}
