/* End-to-end PUT and GET through hipobj-server with libcurl as the application's S3 client: the
 * examples' own client (examples/s3_curl.c: CURLOPT_AWS_SIGV4, HTTP sent from the token's NIC
 * address), driven here through hipObjPut/hipObjGet with checks on what each transfer did.
 * Runs in the Soft-RoCE lane: curl_e2e ENDPOINT NIC SIZE
 * (e.g. curl_e2e http://127.0.0.1:9000 rxe0 1048576). The bucket "cbkt" must exist.
 * With HIPOBJ_S3_USER=ACCESS_KEY:SECRET_KEY in the environment every request is SigV4-signed,
 * x-amz-rdma-token included, as docs/protocol.md rule 9.2 requires. */
#include "hipobj.h"
#include "s3_curl.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;
#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (cond) {                                                                                          \
            passed++;                                                                                        \
        } else {                                                                                             \
            failed++;                                                                                        \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                      \
            printf(__VA_ARGS__);                                                                             \
            printf("\n");                                                                                    \
        }                                                                                                    \
    } while (0)

/* HIPOBJ_S3_USER=ACCESS:SECRET into the target's key pair (none: unsigned requests). */
static int credentials_from_env(struct s3_target *t, char *buf, size_t len) {
    const char *user = getenv("HIPOBJ_S3_USER");
    char *colon;
    if (!user || !*user) return 0;
    if (strlen(user) >= len || !(colon = strchr(strcpy(buf, user), ':'))) return -1;
    *colon = '\0';
    t->access_key = buf;
    t->secret_key = colon + 1;
    return 0;
}

int main(int argc, char **argv) {
    hipObjConfig_t cfg;
    hipObjOps_t ops = {s3_send_request, s3_recv_reply};
    hipObjError_t e;
    struct s3_target target;
    struct s3_request req;
    char user[512];
    size_t size, i;
    unsigned char *src, *dst;
    if (argc != 4) {
        fprintf(stderr, "usage: %s ENDPOINT NIC SIZE\n", argv[0]);
        return 2;
    }
    memset(&target, 0, sizeof target);
    target.endpoint = argv[1];
    target.region = "us-east-1";
    target.nic = argv[2];
    target.bucket = "cbkt";
    target.key = "from-c";
    if (credentials_from_env(&target, user, sizeof user) != 0) {
        fprintf(stderr, "HIPOBJ_S3_USER must be ACCESS_KEY:SECRET_KEY\n");
        return 2;
    }
    size = (size_t)strtoull(argv[3], NULL, 10);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    memset(&cfg, 0, sizeof cfg);
    cfg.gpuDevice = -1;
    cfg.nicHint = target.nic;
    e = hipObjInit(&cfg);
    CHECK(e.opError == hipObjSuccess, "hipObjInit: %s", hipObjGetErrorString(e.opError));
    if (e.opError != hipObjSuccess) goto out;

    src = malloc(size);
    dst = calloc(1, size);
    for (i = 0; i < size; i++) src[i] = (unsigned char)(i * 131 + 7);
    CHECK(hipObjBufRegisterHost(src, size).opError == hipObjSuccess, "register src");
    CHECK(hipObjBufRegisterHost(dst, size).opError == hipObjSuccess, "register dst");

    memset(&req, 0, sizeof req);
    req.target = &target;
    req.method = "PUT";
    e = hipObjPut(NULL, src, size, 0, &ops, &req);
    CHECK(e.opError == hipObjSuccess, "hipObjPut: %s", hipObjGetErrorString(e.opError));
    CHECK(req.requests == 2, "first PUT pairs then transfers: %d requests", req.requests);
    CHECK(req.http_status == 200, "PUT answered %ld", req.http_status);

    memset(&req, 0, sizeof req);
    req.target = &target;
    req.method = "GET";
    e = hipObjGet(NULL, dst, size, 0, &ops, &req);
    CHECK(e.opError == hipObjSuccess, "hipObjGet: %s", hipObjGetErrorString(e.opError));
    CHECK(req.requests == 1, "paired GET takes one request: %d", req.requests);
    CHECK(req.http_status == 200, "GET answered %ld", req.http_status);
    CHECK(memcmp(src, dst, size) == 0, "GET returned the bytes PUT stored");

    /* More warm GETs on the paired connection than it keeps receives posted for remote
     * invalidation (docs/protocol.md section 11: 16, refilled by 8): one request each, every time. */
    for (i = 0; i < 40; i++) {
        memset(&req, 0, sizeof req);
        req.target = &target;
        req.method = "GET";
        dst[i] ^= 0xff;
        e = hipObjGet(NULL, dst, size, 0, &ops, &req);
        if (e.opError != hipObjSuccess || req.requests != 1 || memcmp(src, dst, size) != 0) break;
    }
    CHECK(i == 40, "warm GET %zu: %s, %d requests, bytes %s", i, hipObjGetErrorString(e.opError),
          req.requests, memcmp(src, dst, size) == 0 ? "equal" : "differ");

    /* A GET of a missing key is refused (404) before anything starts; the next GET of the object
     * succeeds on the same connection. Revision 5 (docs/protocol.md section 12) keeps the pairing,
     * so that GET takes one request; a revision-4 library replaces its QP and pairs again (two).
     * HIPOBJ_EXPECT_KEPT_PAIRING=1 asks for the revision-5 count (both sides revision 5). */
    memset(&req, 0, sizeof req);
    req.target = &target;
    req.method = "GET";
    target.key = "missing-c";
    e = hipObjGet(NULL, dst, size, 0, &ops, &req);
    target.key = "from-c";
    CHECK(e.opError == hipObjS3Error, "GET of a missing key: %s", hipObjGetErrorString(e.opError));
    CHECK(req.http_status == 404, "GET of a missing key answered %ld", req.http_status);
    memset(&req, 0, sizeof req);
    req.target = &target;
    req.method = "GET";
    memset(dst, 0, size);
    e = hipObjGet(NULL, dst, size, 0, &ops, &req);
    CHECK(e.opError == hipObjSuccess, "GET after the 404: %s", hipObjGetErrorString(e.opError));
    CHECK(memcmp(src, dst, size) == 0, "GET after the 404 returned the bytes PUT stored");
    {
        const char *kept = getenv("HIPOBJ_EXPECT_KEPT_PAIRING");
        int want = kept && strcmp(kept, "1") == 0 ? 1 : 2;
        CHECK(req.requests >= 1 && req.requests <= want, "GET after the 404 took %d requests (at most %d)",
              req.requests, want);
        printf("GET after a 404: %d request(s)\n", req.requests);
    }

    CHECK(hipObjBufDeregister(src).opError == hipObjSuccess, "deregister src");
    CHECK(hipObjBufDeregister(dst).opError == hipObjSuccess, "deregister dst");
    CHECK(hipObjShutdown().opError == hipObjSuccess, "shutdown");
    free(src);
    free(dst);
out:
    curl_global_cleanup();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
