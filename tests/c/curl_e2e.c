/* End-to-end PUT and GET through hipobj-server with libcurl as the application's S3 client.
 * Runs in the Soft-RoCE lane: curl_e2e ENDPOINT NIC SIZE
 * (e.g. curl_e2e http://127.0.0.1:9000 rxe0 1048576). The bucket "cbkt" must exist.
 * With HIPOBJ_S3_USER=ACCESS_KEY:SECRET_KEY in the environment every request is SigV4-signed by
 * libcurl (CURLOPT_AWS_SIGV4), x-amz-rdma-token included: libcurl signs every x-amz-* header it
 * sends, as PROTOCOL.md rule 9.2 requires. */
#include "hipobj.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

/* One S3 request per transfer attempt; the reply header is kept for recvReply. */
struct request {
    const char *url;
    const char *method;
    char reply[512];
    size_t reply_len;
    int have_reply;
    int requests;
};

static size_t on_header(char *buf, size_t size, size_t n, void *userdata) {
    struct request *r = userdata;
    size_t len = size * n;
    static const char name[] = "x-amz-rdma-reply:";
    if (len > sizeof name - 1 && strncasecmp(buf, name, sizeof name - 1) == 0) {
        const char *v = buf + sizeof name - 1;
        size_t vl = len - (sizeof name - 1);
        while (vl && (*v == ' ' || *v == '\t')) { v++; vl--; }
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' ')) vl--;
        if (vl < sizeof r->reply) {
            memcpy(r->reply, v, vl);
            r->reply_len = vl;
            r->have_reply = 1;
        }
    }
    return len;
}

static size_t discard(char *p, size_t s, size_t n, void *u) {
    (void)p; (void)u;
    return s * n;
}

static int send_request(void *ctx, const char *token, size_t token_len) {
    struct request *r = ctx;
    char header[160];
    char nic[INET_ADDRSTRLEN];
    char interface[sizeof "host!" + INET_ADDRSTRLEN];
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    CURLcode rc;
    if (!c || token_len != 88) return -1;
    r->have_reply = 0;
    r->requests++;
    snprintf(header, sizeof header, "x-amz-rdma-token: %.*s", (int)token_len, token);
    h = curl_slist_append(h, header);
    /* No empty "Expect:" to suppress 100-continue: libcurl 7.88 signs it without sending it
     * (SignatureDoesNotMatch); the token requests' bodies are empty anyway. */
    if (getenv("HIPOBJ_S3_USER")) {
        /* libcurl 7.88 does not add the payload hash S3 wants; sent (and signed) by hand. */
        h = curl_slist_append(h, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
        curl_easy_setopt(c, CURLOPT_AWS_SIGV4, "aws:amz:us-east-1:s3");
        curl_easy_setopt(c, CURLOPT_USERPWD, getenv("HIPOBJ_S3_USER"));
    }
    /* Send HTTP from the RDMA NIC's address, so the server's GID == peer check holds
     * (PROTOCOL.md 9.4). */
    if (hipObjTokenClientNic(token, nic, sizeof nic).opError != hipObjSuccess) {
        curl_slist_free_all(h);
        curl_easy_cleanup(c);
        return -1;
    }
    if (nic[0]) {
        snprintf(interface, sizeof interface, "host!%s", nic);
        curl_easy_setopt(c, CURLOPT_INTERFACE, interface);
    }
    curl_easy_setopt(c, CURLOPT_URL, r->url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r->method);
    if (strcmp(r->method, "PUT") == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
        h = curl_slist_append(h, "Content-Type: application/octet-stream");
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    rc = curl_easy_perform(c);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    /* Whatever the HTTP status, a response that carries the reply header is handed over. */
    return (rc == CURLE_OK && r->have_reply) ? 0 : -1;
}

static int recv_reply(void *ctx, char *reply, size_t *reply_len) {
    struct request *r = ctx;
    if (!r->have_reply || r->reply_len > *reply_len) return -1;
    memcpy(reply, r->reply, r->reply_len);
    *reply_len = r->reply_len;
    return 0;
}

int main(int argc, char **argv) {
    hipObjConfig_t cfg;
    hipObjOps_t ops = {send_request, recv_reply};
    hipObjError_t e;
    struct request req;
    char url[512];
    size_t size, i;
    unsigned char *src, *dst;
    if (argc != 4) {
        fprintf(stderr, "usage: %s ENDPOINT NIC SIZE\n", argv[0]);
        return 2;
    }
    size = (size_t)strtoull(argv[3], NULL, 10);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    memset(&cfg, 0, sizeof cfg);
    cfg.gpuDevice = -1;
    cfg.nicHint = argv[2];
    e = hipObjInit(&cfg);
    CHECK(e.opError == hipObjSuccess, "hipObjInit: %s", hipObjGetErrorString(e.opError));
    if (e.opError != hipObjSuccess) goto out;

    src = malloc(size);
    dst = calloc(1, size);
    for (i = 0; i < size; i++) src[i] = (unsigned char)(i * 131 + 7);
    CHECK(hipObjBufRegisterHost(src, size).opError == hipObjSuccess, "register src");
    CHECK(hipObjBufRegisterHost(dst, size).opError == hipObjSuccess, "register dst");

    snprintf(url, sizeof url, "%s/cbkt/from-c", argv[1]);
    memset(&req, 0, sizeof req);
    req.url = url;
    req.method = "PUT";
    e = hipObjPut(NULL, src, size, 0, &ops, &req);
    CHECK(e.opError == hipObjSuccess, "hipObjPut: %s", hipObjGetErrorString(e.opError));
    CHECK(req.requests == 2, "first PUT pairs then transfers: %d requests", req.requests);

    memset(&req, 0, sizeof req);
    req.url = url;
    req.method = "GET";
    e = hipObjGet(NULL, dst, size, 0, &ops, &req);
    CHECK(e.opError == hipObjSuccess, "hipObjGet: %s", hipObjGetErrorString(e.opError));
    CHECK(req.requests == 1, "paired GET takes one request: %d", req.requests);
    CHECK(memcmp(src, dst, size) == 0, "GET returned the bytes PUT stored");

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
