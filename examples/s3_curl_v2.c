/* See s3_curl_v2.h. */
#include "s3_curl_v2.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Keep one answer header (name lowercased, value trimmed). */
static size_t on_header(char *buf, size_t size, size_t n, void *userdata) {
    struct s3v2_request *r = userdata;
    struct s3v2_headers *h = &r->answer;
    size_t len = size * n, i, name_len, value_len;
    const char *colon = memchr(buf, ':', len), *v;
    if (strncmp(buf, "HTTP/", 5) == 0) h->n = 0; /* a new response (after 100 Continue) */
    if (!colon || h->n >= S3V2_MAX_HEADERS) return len;
    name_len = (size_t)(colon - buf);
    if (name_len >= sizeof h->name[0]) return len;
    for (i = 0; i < name_len; i++) h->name[h->n][i] = (char)tolower((unsigned char)buf[i]);
    h->name[h->n][name_len] = '\0';
    v = colon + 1;
    value_len = len - name_len - 1;
    while (value_len && (*v == ' ' || *v == '\t')) { v++; value_len--; }
    while (value_len && (v[value_len - 1] == '\r' || v[value_len - 1] == '\n' || v[value_len - 1] == ' ')) value_len--;
    if (value_len >= sizeof h->value[0]) return len;
    memcpy(h->value[h->n], v, value_len);
    h->value[h->n][value_len] = '\0';
    h->n++;
    return len;
}

static const char *header(const struct s3v2_request *r, const char *name) {
    int i;
    for (i = 0; i < r->answer.n; i++)
        if (strcmp(r->answer.name[i], name) == 0) return r->answer.value[i];
    return NULL;
}

static size_t discard(char *p, size_t s, size_t n, void *u) {
    (void)p; (void)u;
    return s * n;
}

/* A signed, body-less POST of `path` with the headers in `h`, from the token's NIC address. */
static CURL *new_post(struct s3v2_request *r, const hipObjTransferReqV2_t *req, const char *path,
                      struct curl_slist *h) {
    const struct s3_target *t = r->target;
    char nic_ip[64];
    CURL *c = curl_easy_init();
    long timeout_ms = req->remainingMs ? (long)req->remainingMs : 1L;
    if (!c) return NULL;
    snprintf(r->url, sizeof r->url, "%s%s", r->control, path);
    curl_easy_setopt(c, CURLOPT_URL, r->url);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
    if (t->access_key) {
        snprintf(r->sigv4, sizeof r->sigv4, "aws:amz:%s:s3", t->region);
        snprintf(r->userpwd, sizeof r->userpwd, "%s:%s", t->access_key, t->secret_key);
        curl_easy_setopt(c, CURLOPT_AWS_SIGV4, r->sigv4);
        curl_easy_setopt(c, CURLOPT_USERPWD, r->userpwd);
    }
    /* The server takes a session only from the address its token's GID names. */
    if (hipObjTokenClientNic(req->token, nic_ip, sizeof nic_ip).opError == hipObjSuccess && nic_ip[0]) {
        snprintf(r->interface, sizeof r->interface, "host!%s", nic_ip);
        curl_easy_setopt(c, CURLOPT_INTERFACE, r->interface);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    r->answer.n = 0;
    r->http_status = 0;
    return c;
}

/* The headers every v2 request carries, plus the session (READY, CANCEL). */
static struct curl_slist *common_headers(const hipObjTransferReqV2_t *req) {
    char line[160];
    struct curl_slist *h = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    h = curl_slist_append(h, "x-amz-rdma-protocol: hipobj-rc-v2");
    if (req->session) {
        snprintf(line, sizeof line, "x-amz-rdma-session: %s", req->session);
        h = curl_slist_append(h, line);
    }
    return h;
}

/* Append one header line, formatted. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static struct curl_slist *add(struct curl_slist *h, const char *fmt, ...) {
    char line[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    return curl_slist_append(h, line);
}

/* One blocking exchange; 0 when an answer (any status) came. */
static int perform(struct s3v2_request *r, CURL *c, struct curl_slist *h) {
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->http_status);
    if (rc != CURLE_OK) fprintf(stderr, "POST %s: %s\n", r->url, curl_easy_strerror(rc));
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc == CURLE_OK ? 0 : -1;
}

static void copy(char *dst, size_t cap, const char *src) {
    if (!src) return;
    snprintf(dst, cap, "%s", src);
}

int s3v2_send_prepare(void *ctx, const hipObjTransferReqV2_t *req, hipObjPrepareReplyV2_t *out) {
    struct s3v2_request *r = ctx;
    const char *v;
    struct curl_slist *h = common_headers(req);
    CURL *c;
    h = add(h, "x-amz-rdma-token: %s", req->token);
    h = add(h, "x-amz-rdma-psn: %06x", (unsigned)req->clientPsn);
    h = add(h, "x-amz-rdma-cookie: %08x", (unsigned)req->cookie);
    h = add(h, "x-amz-rdma-op: %s", req->method);
    h = add(h, "x-amz-rdma-target: %s", req->target);
    h = add(h, "x-amz-rdma-size: %llu", (unsigned long long)req->size);
    h = add(h, "x-amz-rdma-offset: %llu", (unsigned long long)req->offset);
    c = new_post(r, req, "/.hipobj-rc/prepare", h);
    if (!c) { curl_slist_free_all(h); return -1; }
    r->prepares++;
    if (perform(r, c, h) != 0) return -1;
    out->httpStatus = (int)r->http_status;
    out->protocolEcho = (v = header(r, "x-amz-rdma-protocol")) && strcmp(v, "hipobj-rc-v2") == 0;
    out->unsupportedMarker = (v = header(r, "x-amz-rdma-protocol-status")) && strcasecmp(v, "unsupported") == 0;
    if ((v = header(r, "x-amz-rdma-reply")) && strncmp(v, "200:", 4) == 0)
        copy(out->serverToken, sizeof out->serverToken, v + 4);
    copy(out->session, sizeof out->session, header(r, "x-amz-rdma-session"));
    if ((v = header(r, "x-amz-rdma-psn"))) out->serverPsn = (uint32_t)strtoul(v, NULL, 16);
    if (header(r, "x-amz-rdma-mr-addr") && header(r, "x-amz-rdma-mr-rkey")) {
        out->stagingAddr = strtoull(header(r, "x-amz-rdma-mr-addr"), NULL, 16);
        out->stagingRkey = (uint32_t)strtoul(header(r, "x-amz-rdma-mr-rkey"), NULL, 16);
        out->stagingPresent = 1;
    }
    return 0;
}

/* Debug callback: the request's headers have been sent (a body-less POST is then complete). */
static int on_debug(CURL *c, curl_infotype type, char *data, size_t size, void *userdata) {
    struct s3v2_request *r = userdata;
    (void)c; (void)data; (void)size;
    if (type == CURLINFO_HEADER_OUT) r->ready_sent = 1;
    return 0;
}

int s3v2_send_ready_request(void *ctx, const hipObjTransferReqV2_t *req) {
    struct s3v2_request *r = ctx;
    int running = 1, waited_ms = 0;
    struct curl_slist *h = common_headers(req);
    h = add(h, "x-amz-rdma-cookie: %08x", (unsigned)req->cookie);
    h = add(h, "x-amz-rdma-qpn: %x", (unsigned)req->clientQpn);
    h = add(h, "x-amz-rdma-mr-addr: %llx", (unsigned long long)req->clientMrAddr);
    h = add(h, "x-amz-rdma-mr-rkey: %x", (unsigned)req->clientMrRkey);
    s3v2_request_cleanup(r);
    r->ready = new_post(r, req, "/.hipobj-rc/ready", h);
    r->ready_headers = h;
    r->multi = curl_multi_init();
    if (!r->ready || !r->multi) { s3v2_request_cleanup(r); return -1; }
    curl_easy_setopt(r->ready, CURLOPT_VERBOSE, 1L);
    curl_easy_setopt(r->ready, CURLOPT_DEBUGFUNCTION, on_debug);
    curl_easy_setopt(r->ready, CURLOPT_DEBUGDATA, r);
    curl_multi_add_handle(r->multi, r->ready);
    r->readies++;
    r->ready_sent = 0;
    while (!r->ready_sent && running && (uint32_t)waited_ms < req->remainingMs) {
        if (curl_multi_perform(r->multi, &running) != CURLM_OK) break;
        if (!r->ready_sent && running) {
            curl_multi_poll(r->multi, NULL, 0, 10, NULL);
            waited_ms += 10;
        }
    }
    if (!r->ready_sent) { fprintf(stderr, "POST %s: the request did not leave\n", r->url); s3v2_request_cleanup(r); return -1; }
    return 0;
}

int s3v2_finish_ready(void *ctx, const hipObjTransferReqV2_t *req, hipObjFinalReplyV2_t *out) {
    struct s3v2_request *r = ctx;
    int running = 1, waited_ms = 0, pending;
    CURLcode result = CURLE_OPERATION_TIMEDOUT;
    CURLMsg *m;
    const char *v;
    if (!r->multi) return -1;
    while (running && (uint32_t)waited_ms < req->remainingMs) {
        if (curl_multi_perform(r->multi, &running) != CURLM_OK) break;
        if (running) {
            curl_multi_poll(r->multi, NULL, 0, 20, NULL);
            waited_ms += 20;
        }
    }
    while ((m = curl_multi_info_read(r->multi, &pending)))
        if (m->msg == CURLMSG_DONE) result = m->data.result;
    curl_easy_getinfo(r->ready, CURLINFO_RESPONSE_CODE, &r->http_status);
    s3v2_request_cleanup(r);
    if (result != CURLE_OK) { fprintf(stderr, "POST %s: %s\n", r->url, curl_easy_strerror(result)); return -1; }
    out->httpStatus = (int)r->http_status;
    out->protocolEcho = (v = header(r, "x-amz-rdma-protocol")) && strcmp(v, "hipobj-rc-v2") == 0;
    if ((v = header(r, "x-amz-rdma-cookie"))) {
        out->cookieEcho = (uint32_t)strtoul(v, NULL, 16);
        out->cookiePresent = 1;
    }
    if ((v = header(r, "x-amz-rdma-bytes-transferred"))) out->bytes = strtoull(v, NULL, 10);
    copy(out->etag, sizeof out->etag, header(r, "x-amz-rdma-etag"));
    copy(out->versionId, sizeof out->versionId, header(r, "x-amz-rdma-version-id"));
    if ((v = header(r, "x-amz-rdma-checksum")) && strncmp(v, "CRC64NVME ", 10) == 0)
        copy(out->checksumB64, sizeof out->checksumB64, v + 10);
    return 0;
}

int s3v2_send_cancel(void *ctx, const hipObjTransferReqV2_t *req) {
    struct s3v2_request *r = ctx;
    struct curl_slist *h = common_headers(req);
    CURL *c;
    s3v2_request_cleanup(r); /* a READY whose answer will never be read */
    c = new_post(r, req, "/.hipobj-rc/cancel", h);
    if (!c) { curl_slist_free_all(h); return -1; }
    r->cancels++;
    return perform(r, c, h);
}

void s3v2_request_cleanup(struct s3v2_request *r) {
    if (r->multi && r->ready) curl_multi_remove_handle(r->multi, r->ready);
    if (r->ready) curl_easy_cleanup(r->ready);
    if (r->multi) curl_multi_cleanup(r->multi);
    curl_slist_free_all(r->ready_headers);
    r->ready = NULL;
    r->multi = NULL;
    r->ready_headers = NULL;
}
