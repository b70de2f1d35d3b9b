/* The S3 client the two examples share: one libcurl request per hipObject callback, signed by
 * libcurl's own SigV4 (CURLOPT_AWS_SIGV4), bound to the NIC address the token names. */
#ifndef S3_CURL_H
#define S3_CURL_H

#include <stddef.h>

/* Where the object is and who asks for it (from argv or the AWS_* variables, s3_parse_args). */
struct s3_target {
    const char *endpoint;   /* http://host:port or https://host:port (-e, or AWS_ENDPOINT_URL) */
    const char *region;     /* -r, or AWS_REGION / AWS_DEFAULT_REGION, else us-east-1 */
    const char *access_key; /* -a, or AWS_ACCESS_KEY_ID; none: unsigned requests */
    const char *secret_key; /* -s, or AWS_SECRET_ACCESS_KEY */
    const char *nic;        /* -n, or HIPOBJ_NIC: the RDMA device hipObjInit uses */
    const char *ca_bundle;  /* -c, or AWS_CA_BUNDLE: PEM roots for https (else the system's) */
    const char *bucket, *key;
};

/* The most x-amz-checksum-* headers of a reply kept (the CRCs, the SHAs and the type). */
#define S3_CHECKSUM_HEADERS 8

/* One transfer's state, the `ctx` of hipObjGet/hipObjPut. */
struct s3_request {
    const struct s3_target *target;
    const char *method; /* "GET" or "PUT" */
    const char *range;  /* GET: a Range header value ("bytes=FIRST-LAST"), or NULL for the whole object */
    long http_status;   /* of the last response */
    char reply[512];    /* its x-amz-rdma-reply value */
    size_t reply_len;
    int have_reply;
    int requests;       /* requests sent (a first transfer pairs: 2) */
    int checksum_mode;  /* plain GET: ask for the object's stored checksums (x-amz-checksum-mode: ENABLED) */
    /* the last response's x-amz-rdma-checksum (a token GET's stored checksum, sent unasked:
     * docs/protocol.md section 16), for s3_check_landed */
    char rdma_checksum[128];
    int have_rdma_checksum;
    /* the last response's x-amz-checksum-* headers (a plain GET's), for s3_check_landed */
    char checksum_names[S3_CHECKSUM_HEADERS][48];
    char checksum_values[S3_CHECKSUM_HEADERS][128];
    size_t checksum_count;
};

/* Fills `t` from the options before the positional arguments; returns the index of the first
 * positional argument, or -1 after printing what is wrong. */
int s3_parse_args(int argc, char **argv, struct s3_target *t);

/* The set-up every example does: libcurl's global state (once, before any thread), hipObjInit()
 * on the target's NIC for host memory, and `buf` registered. 0, or -1 after printing what failed
 * (then everything done is undone). */
int s3_host_session_open(const struct s3_target *t, void *buf, size_t size);
/* Undoes s3_host_session_open (the buffer itself stays the caller's). */
void s3_host_session_close(void *buf);

/* Writes `len` bytes of `buf` to `path`. 0, or -1 after printing why. */
int s3_save_file(const char *path, const void *buf, size_t len);

/* The hipObjOps_t callbacks. */
int s3_send_request(void *ctx, const char *token, size_t token_len);
int s3_recv_reply(void *ctx, char *reply, size_t *reply_len);

/* Whether the server declined RDMA (HTTP 501 / reply "501"): then use plain HTTP. */
int s3_declined_rdma(const struct s3_request *r);

/* The end-to-end check (include/hipobj_checksum.h): the `len` bytes that landed in `buf` against
 * the checksum the last response carried: a token GET's x-amz-rdma-checksum
 * (hipObjRdmaChecksumCheck), else a plain GET's x-amz-checksum-* (a request with checksum_mode set
 * asks for them; hipObjChecksumCheck). Returns
 * HIPOBJ_CHECKSUM_VERIFIED, _MISMATCH or _UNCHECKED with `message` saying what it found, or -1
 * after printing why the check could not run. */
int s3_check_landed(const struct s3_request *r, const void *buf, size_t len, char *message, size_t message_len);

/* Plain HTTP (no token): the object's bytes in the body. 0 on a 2xx status. */
int s3_plain_get(struct s3_request *r, void *buf, size_t size, size_t *received);
int s3_plain_put(struct s3_request *r, const void *buf, size_t size);

#endif
