/* See s3_curl.h. */
#include "s3_curl.h"

#include <hipobj.h>
#include <hipobj_checksum.h>

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static const char *env_or(const char *name, const char *fallback) {
    const char *v = getenv(name);
    return (v && *v) ? v : fallback;
}

int s3_parse_args(int argc, char **argv, struct s3_target *t) {
    int opt;
    t->endpoint = env_or("AWS_ENDPOINT_URL", NULL);
    t->region = env_or("AWS_REGION", env_or("AWS_DEFAULT_REGION", "us-east-1"));
    t->access_key = env_or("AWS_ACCESS_KEY_ID", NULL);
    t->secret_key = env_or("AWS_SECRET_ACCESS_KEY", NULL);
    t->nic = env_or("HIPOBJ_NIC", NULL);
    t->ca_bundle = env_or("AWS_CA_BUNDLE", NULL);
    while ((opt = getopt(argc, argv, "e:r:a:s:n:c:")) != -1) {
        switch (opt) {
        case 'e': t->endpoint = optarg; break;
        case 'r': t->region = optarg; break;
        case 'a': t->access_key = optarg; break;
        case 's': t->secret_key = optarg; break;
        case 'n': t->nic = optarg; break;
        case 'c': t->ca_bundle = optarg; break;
        default: return -1;
        }
    }
    if (!t->endpoint) { fprintf(stderr, "no endpoint: give -e URL or set AWS_ENDPOINT_URL\n"); return -1; }
    if (!t->nic) { fprintf(stderr, "no RDMA device: give -n NIC or set HIPOBJ_NIC\n"); return -1; }
    if (!t->access_key != !t->secret_key) { fprintf(stderr, "give both the access key and the secret key\n"); return -1; }
    return optind;
}

int s3_host_session_open(const struct s3_target *t, void *buf, size_t size) {
    hipObjConfig_t cfg = {0};
    hipObjError_t e;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    cfg.gpuDevice = -1; /* host memory; a GPU program passes its device and hipMalloc's buffer */
    cfg.nicHint = t->nic;
    e = hipObjInit(&cfg);
    if (e.opError != hipObjSuccess) {
        fprintf(stderr, "hipObjInit(%s): %s\n", t->nic, hipObjGetErrorString(e.opError));
        curl_global_cleanup();
        return -1;
    }
    e = hipObjBufRegisterHost(buf, size);
    if (e.opError != hipObjSuccess) {
        fprintf(stderr, "hipObjBufRegisterHost: %s\n", hipObjGetErrorString(e.opError));
        hipObjShutdown();
        curl_global_cleanup();
        return -1;
    }
    return 0;
}

void s3_host_session_close(void *buf) {
    hipObjBufDeregister(buf);
    hipObjShutdown();
    curl_global_cleanup();
}

int s3_save_file(const char *path, const void *buf, size_t len) {
    FILE *out = fopen(path, "wb");
    if (!out || fwrite(buf, 1, len, out) != len || fclose(out) != 0) {
        perror(path);
        return -1;
    }
    return 0;
}

/* The request both ways share: URL, method, SigV4, timeouts. */
static CURL *new_request(struct s3_request *r, char *url, size_t url_len, char *userpwd, size_t up_len,
                         char *sigv4, size_t sig_len) {
    const struct s3_target *t = r->target;
    CURL *c = curl_easy_init();
    if (!c) return NULL;
    snprintf(url, url_len, "%s/%s/%s", t->endpoint, t->bucket, t->key);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r->method);
    if (t->access_key) {
        /* libcurl signs every header we add (x-amz-rdma-token included: the server requires that
         * the token is covered by the signature) */
        snprintf(sigv4, sig_len, "aws:amz:%s:s3", t->region);
        snprintf(userpwd, up_len, "%s:%s", t->access_key, t->secret_key);
        curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4);
        curl_easy_setopt(c, CURLOPT_USERPWD, userpwd);
    }
    /* longer than the server's RDMA retry window (docs/protocol.md rule 5.7) */
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
    /* https: libcurl verifies the server's certificate (its default); against these roots only
     * when given, else the system's */
    if (t->ca_bundle) curl_easy_setopt(c, CURLOPT_CAINFO, t->ca_bundle);
    return c;
}

/* Headers every request carries. libcurl 7.x signs without a payload hash of its own, and S3
 * servers require x-amz-content-sha256: the body is declared unsigned (it is empty for RDMA
 * requests, and plain PUT bodies are not hashed twice). libcurl signs every header in this list:
 * the x-amz-rdma-token added to it is covered by the signature, as the server requires. (Do not
 * add an empty "Expect:" to suppress 100-continue: libcurl would sign it without sending it, and
 * the signature would not match.) */
static struct curl_slist *base_headers(void) {
    return curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
}

/* A header line's value after `name_len` bytes of name and colon, trimmed; its length in *vl. */
static const char *header_value(const char *buf, size_t len, size_t name_len, size_t *vl) {
    const char *v = buf + name_len;
    *vl = len - name_len;
    while (*vl && (*v == ' ' || *v == '\t')) { v++; (*vl)--; }
    while (*vl && (v[*vl - 1] == '\r' || v[*vl - 1] == '\n' || v[*vl - 1] == ' ')) (*vl)--;
    return v;
}

/* Keeps x-amz-rdma-checksum, and an x-amz-checksum-* header (x-amz-checksum-crc64nvme, -type, ...),
 * for s3_check_landed. */
static void keep_checksum_header(struct s3_request *r, const char *buf, size_t len) {
    static const char prefix[] = "x-amz-checksum-", rdma[] = "x-amz-rdma-checksum:";
    const char *colon = memchr(buf, ':', len);
    size_t name_len, vl;
    const char *v;
    if (len > sizeof rdma - 1 && strncasecmp(buf, rdma, sizeof rdma - 1) == 0) {
        v = header_value(buf, len, sizeof rdma - 1, &vl);
        if (vl < sizeof r->rdma_checksum) {
            memcpy(r->rdma_checksum, v, vl);
            r->rdma_checksum[vl] = 0;
            r->have_rdma_checksum = 1;
        }
        return;
    }
    if (!colon || r->checksum_count == S3_CHECKSUM_HEADERS) return;
    name_len = (size_t)(colon - buf);
    if (name_len <= sizeof prefix - 1 || name_len >= sizeof r->checksum_names[0] ||
        strncasecmp(buf, prefix, sizeof prefix - 1) != 0)
        return;
    v = header_value(buf, len, name_len + 1, &vl);
    if (vl >= sizeof r->checksum_values[0]) return;
    memcpy(r->checksum_names[r->checksum_count], buf, name_len);
    r->checksum_names[r->checksum_count][name_len] = 0;
    memcpy(r->checksum_values[r->checksum_count], v, vl);
    r->checksum_values[r->checksum_count][vl] = 0;
    r->checksum_count++;
}

static size_t on_header(char *buf, size_t size, size_t n, void *userdata) {
    struct s3_request *r = userdata;
    size_t len = size * n, vl;
    static const char name[] = "x-amz-rdma-reply:";
    if (len > sizeof name - 1 && strncasecmp(buf, name, sizeof name - 1) == 0) {
        const char *v = header_value(buf, len, sizeof name - 1, &vl);
        if (vl < sizeof r->reply) {
            memcpy(r->reply, v, vl);
            r->reply_len = vl;
            r->have_reply = 1;
        }
    }
    keep_checksum_header(r, buf, len);
    return len;
}

int s3_check_landed(const struct s3_request *r, const void *buf, size_t len, char *message, size_t message_len) {
    const char *names[S3_CHECKSUM_HEADERS], *values[S3_CHECKSUM_HEADERS];
    hipObjChecksumStatus_t status;
    hipObjError_t e;
    size_t i;
    if (r->have_rdma_checksum) {
        /* A token GET: the stored checksum of what RDMA moved (any algorithm, whole object or
         * one whole part). */
        e = hipObjRdmaChecksumCheck(buf, len, r->rdma_checksum, &status, message, message_len);
    } else {
        /* A plain GET asked with x-amz-checksum-mode (or a revision-5 server's token reply). */
        for (i = 0; i < r->checksum_count; i++) {
            names[i] = r->checksum_names[i];
            values[i] = r->checksum_values[i];
        }
        e = hipObjChecksumCheck(buf, len, names, values, r->checksum_count, &status, message, message_len);
    }
    if (e.opError != hipObjSuccess) {
        fprintf(stderr, "checking the landed bytes: %s\n", hipObjGetErrorString(e.opError));
        return -1;
    }
    return status;
}

static size_t discard(char *p, size_t s, size_t n, void *u) {
    (void)p; (void)u;
    return s * n;
}

int s3_send_request(void *ctx, const char *token, size_t token_len) {
    struct s3_request *r = ctx;
    char url[1024], userpwd[512], sigv4[128], header[160], range[96], nic_ip[64], interface[80];
    struct curl_slist *h = NULL;
    CURLcode rc;
    CURL *c = new_request(r, url, sizeof url, userpwd, sizeof userpwd, sigv4, sizeof sigv4);
    if (!c) return -1;
    r->have_reply = 0;
    r->http_status = 0;
    r->checksum_count = 0;
    r->have_rdma_checksum = 0;
    r->requests++;
    /* The server accepts a token only from the address its GID names: send from that address. */
    if (hipObjTokenClientNic(token, nic_ip, sizeof nic_ip).opError == hipObjSuccess && nic_ip[0]) {
        snprintf(interface, sizeof interface, "host!%s", nic_ip);
        curl_easy_setopt(c, CURLOPT_INTERFACE, interface);
    }
    snprintf(header, sizeof header, "x-amz-rdma-token: %.*s", (int)token_len, token);
    h = curl_slist_append(base_headers(), header);
    if (r->range) {
        snprintf(range, sizeof range, "Range: %s", r->range);
        h = curl_slist_append(h, range);
    }
    /* A revision-6 server sends a token GET's stored checksum in x-amz-rdma-checksum unasked; the
     * mode is asked as well so that a revision-5 server's x-amz-checksum-* is checked too (libcurl
     * does not check them against the empty body, as an SDK would). */
    if (r->checksum_mode && strcmp(r->method, "GET") == 0) h = curl_slist_append(h, "x-amz-checksum-mode: ENABLED");
    if (strcmp(r->method, "PUT") == 0) {
        /* the server RDMA-READs the data: the request body is empty */
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
        h = curl_slist_append(h, "Content-Type: application/octet-stream");
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->http_status);
    if (rc != CURLE_OK) fprintf(stderr, "%s %s: %s\n", r->method, url, curl_easy_strerror(rc));
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    /* whatever the HTTP status, a response carrying the reply header goes to recvReply */
    return (rc == CURLE_OK && r->have_reply) ? 0 : -1;
}

int s3_recv_reply(void *ctx, char *reply, size_t *reply_len) {
    struct s3_request *r = ctx;
    if (!r->have_reply || r->reply_len > *reply_len) return -1;
    memcpy(reply, r->reply, r->reply_len);
    *reply_len = r->reply_len;
    return 0;
}

int s3_declined_rdma(const struct s3_request *r) {
    return r->http_status == 501 || (r->have_reply && r->reply_len == 3 && memcmp(r->reply, "501", 3) == 0);
}

/* Plain GET: the body lands in buf. */
struct sink {
    unsigned char *buf;
    size_t size, len;
};

static size_t into_buffer(char *p, size_t s, size_t n, void *u) {
    struct sink *k = u;
    size_t len = s * n;
    if (len > k->size - k->len) return 0; /* larger than the buffer: curl fails the transfer */
    memcpy(k->buf + k->len, p, len);
    k->len += len;
    return len;
}

static int finish_plain(struct s3_request *r, CURL *c, struct curl_slist *h, const char *url) {
    CURLcode rc = curl_easy_perform(c);
    r->requests++;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->http_status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK) {
        fprintf(stderr, "%s %s: %s\n", r->method, url, curl_easy_strerror(rc));
        return -1;
    }
    if (r->http_status < 200 || r->http_status > 299) {
        fprintf(stderr, "%s %s: HTTP %ld\n", r->method, url, r->http_status);
        return -1;
    }
    return 0;
}

int s3_plain_get(struct s3_request *r, void *buf, size_t size, size_t *received) {
    char url[1024], userpwd[512], sigv4[128];
    struct sink k = {buf, size, 0};
    struct curl_slist *h = base_headers();
    int rc;
    CURL *c = new_request(r, url, sizeof url, userpwd, sizeof userpwd, sigv4, sizeof sigv4);
    if (!c) return -1;
    r->checksum_count = 0;
    r->have_rdma_checksum = 0;
    if (r->checksum_mode) h = curl_slist_append(h, "x-amz-checksum-mode: ENABLED");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, into_buffer);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &k);
    rc = finish_plain(r, c, h, url);
    *received = k.len;
    return rc;
}

int s3_plain_put(struct s3_request *r, const void *buf, size_t size) {
    char url[1024], userpwd[512], sigv4[128];
    struct curl_slist *h = base_headers();
    CURL *c = new_request(r, url, sizeof url, userpwd, sizeof userpwd, sigv4, sizeof sigv4);
    if (!c) return -1;
    h = curl_slist_append(h, "Content-Type: application/octet-stream");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, buf);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)size);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    return finish_plain(r, c, h, url);
}
