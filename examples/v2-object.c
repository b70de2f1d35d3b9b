/* v2-object: PUT a file as an S3 object, or GET an object (or a range of it) into a file, over
 * RDMA with the hipobj-rc-v2 protocol (include/hipobj_v2.h): the servers of the ecosystem that
 * speak only v2 (elbencho's s3rdma-server, versitygw, Ceph RGW's RDMA branch, hipobj-server).
 *
 *   v2-object [-e ENDPOINT] [-n NIC] [-r REGION] [-a ACCESS_KEY -s SECRET_KEY] put BUCKET KEY FILE
 *   v2-object [...] get BUCKET KEY FILE SIZE [OFFSET]
 *
 * The options default as in get-object/put-object (AWS_ENDPOINT_URL, HIPOBJ_NIC, AWS_*). The
 * control endpoint is HIPOBJ_CONTROL_ENDPOINT, else ENDPOINT. A server that answers PREPARE with
 * 501 + "unsupported" (no v2) is used over plain HTTP instead (whole objects only). */
#include "s3_curl.h"
#include "s3_curl_v2.h"

#include <hipobj_v2.h>

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole of `path` in a fresh buffer; its size in *size. */
static unsigned char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    long len;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc(len ? (size_t)len : 1);
        if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) { free(buf); buf = NULL; }
        *size = (size_t)len;
    }
    fclose(f);
    return buf;
}

static int write_file(const char *path, const unsigned char *buf, size_t size) {
    FILE *out = fopen(path, "wb");
    if (!out || fwrite(buf, 1, size, out) != size || fclose(out) != 0) { perror(path); return -1; }
    return 0;
}

int main(int argc, char **argv) {
    struct s3_target target = {0};
    struct s3v2_request ctl = {0};
    struct s3_request plain = {0};
    hipObjConfigV2_t cfg = {0};
    hipObjOpsV2_t ops = {0};
    hipObjError_t e;
    const char *mode, *file;
    unsigned char *buf = NULL;
    size_t size = 0, received;
    unsigned long long offset = 0;
    int put, status = 1, arg = s3_parse_args(argc, argv, &target);
    if (arg < 0 || argc - arg < 4 || (strcmp(argv[arg], "put") != 0 && strcmp(argv[arg], "get") != 0) ||
        (strcmp(argv[arg], "get") == 0 && argc - arg < 5)) {
        fprintf(stderr, "usage: %s [-e ENDPOINT] [-n NIC] [-r REGION] [-a ACCESS_KEY -s SECRET_KEY] "
                        "put BUCKET KEY FILE | get BUCKET KEY FILE SIZE [OFFSET]\n", argv[0]);
        return 2;
    }
    mode = argv[arg];
    put = strcmp(mode, "put") == 0;
    target.bucket = argv[arg + 1];
    target.key = argv[arg + 2];
    file = argv[arg + 3];
    if (put) {
        buf = read_file(file, &size);
        if (!buf) { perror(file); return 1; }
    } else {
        size = strtoull(argv[arg + 4], NULL, 10);
        if (argc - arg > 5) offset = strtoull(argv[arg + 5], NULL, 10);
        buf = calloc(size ? size : 1, 1);
        if (!buf) return 1;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);

    cfg.v1.gpuDevice = -1; /* host memory; a GPU program passes its device and hipMalloc's buffer */
    cfg.v1.nicHint = target.nic;
    cfg.control.controlEndpoint = getenv("HIPOBJ_CONTROL_ENDPOINT") ? getenv("HIPOBJ_CONTROL_ENDPOINT") : target.endpoint;
    e = hipObjInitV2(&cfg);
    if (e.opError != hipObjSuccess) {
        fprintf(stderr, "hipObjInitV2(%s): %s\n", target.nic, hipObjGetErrorString(e.opError));
        goto out;
    }
    e = hipObjBufRegisterHost(buf, size ? size : 1);
    if (e.opError != hipObjSuccess) {
        fprintf(stderr, "hipObjBufRegisterHost: %s\n", hipObjGetErrorString(e.opError));
        goto shutdown;
    }
    ctl.target = &target;
    ctl.control = cfg.control.controlEndpoint;
    ops.sendPrepare = s3v2_send_prepare;
    ops.sendReadyRequest = s3v2_send_ready_request;
    ops.finishReady = s3v2_finish_ready;
    ops.sendCancel = s3v2_send_cancel;
    if (put)
        e = hipObjPutV2(target.bucket, target.key, buf, size, 0, NULL, &ops, &ctl);
    else
        e = hipObjGetV2(target.bucket, target.key, buf, size, offset, NULL, &ops, &ctl);
    s3v2_request_cleanup(&ctl);
    if (e.opError == hipObjSuccess) {
        printf("%s s3://%s/%s: %zu bytes at %llu over RDMA (hipobj-rc-v2, %d PREPARE, %d READY)\n",
               put ? "PUT" : "GET", target.bucket, target.key, size, offset, ctl.prepares, ctl.readies);
        received = size;
    } else if (e.opError == hipObjNotSupported && offset == 0) {
        printf("server speaks no hipobj-rc-v2 (501, unsupported): falling back to plain HTTP\n");
        plain.target = &target;
        plain.method = put ? "PUT" : "GET";
        if (put ? s3_plain_put(&plain, buf, size) : s3_plain_get(&plain, buf, size, &received)) goto deregister;
        printf("%s s3://%s/%s: %zu bytes over plain HTTP\n", plain.method, target.bucket, target.key, put ? size : received);
    } else {
        fprintf(stderr, "hipObj%sV2: %s (hipError %#x; last HTTP status %ld, %d CANCEL)\n", put ? "Put" : "Get",
                hipObjGetErrorString(e.opError), (unsigned)e.hipError, ctl.http_status, ctl.cancels);
        goto deregister;
    }
    if (!put && write_file(file, buf, received) != 0) goto deregister;
    status = 0;
deregister:
    hipObjBufDeregister(buf);
shutdown:
    hipObjShutdown();
out:
    curl_global_cleanup();
    free(buf);
    return status;
}
