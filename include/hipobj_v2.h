/* hipObject C API extension: the hipobj-rc-v2 peer protocol.
 *
 * SPDX-License-Identifier: MIT
 *
 * hipobj-rc-v2 is the two-round-trip RDMA protocol that independently
 * written S3 servers speak (elbencho's s3rdma-server, versitygw's RDMA
 * routes, Ceph RGW's RDMA branch, hipobj-server): PREPARE, then READY whose
 * answer (FINAL) comes once the bytes have moved, and CANCEL after a
 * failure. hipObjGet()/hipObjPut() of hipobj.h keep the single-round-trip
 * protocol; the functions here speak v2. The names, fields and field order
 * are those of the reference's V2 line (final callback form), so a program
 * written for it builds against this header and links with -lhipobj.
 *
 * The application owns HTTP: its callbacks send the control requests (three
 * body-less POSTs, /.hipobj-rc/prepare, /.hipobj-rc/ready and
 * /.hipobj-rc/cancel, each with Content-Length: 0) to the control endpoint,
 * sign them with SigV4 listing every x-amz-rdma-* header in SignedHeaders,
 * and copy the answers' headers into the reply structs. The library never
 * parses HTTP; it parses what the callbacks copied with the same code that
 * checks the headers on the wire. The headers each request carries are:
 *   PREPARE: x-amz-rdma-protocol: hipobj-rc-v2, x-amz-rdma-token (req->token),
 *            x-amz-rdma-psn (%06x of req->clientPsn), x-amz-rdma-cookie
 *            (%08x of req->cookie), x-amz-rdma-op (req->method),
 *            x-amz-rdma-target (req->target), x-amz-rdma-size (decimal
 *            req->size), x-amz-rdma-offset (decimal req->offset);
 *   READY:   x-amz-rdma-protocol, x-amz-rdma-session (req->session),
 *            x-amz-rdma-cookie, x-amz-rdma-qpn (%x of req->clientQpn),
 *            x-amz-rdma-mr-addr (%lx of req->clientMrAddr),
 *            x-amz-rdma-mr-rkey (%x of req->clientMrRkey);
 *   CANCEL:  x-amz-rdma-protocol, x-amz-rdma-session.
 *
 * Each transfer has its own RC queue pair, created before PREPARE (its
 * number is in the token) and destroyed before the call returns. A GET
 * exposes the buffer to the server only through a memory window bound on
 * that queue pair over exactly the transfer's bytes, remote write only,
 * invalidated before the call returns; a PUT exposes nothing (the client
 * writes into the server's staging buffer). See docs and docs/protocol.md
 * section 10.
 */

#pragma once

#include "hipobj.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Errors ------------------------------------------------------------ */

/* The server answered PREPARE 501 with X-Amz-Rdma-Protocol-Status:
 * unsupported: it speaks no hipobj-rc-v2 (plain HTTP may be used instead).
 * Its value is 13, after hipobj.h's codes; hipObjGetErrorString() knows it.
 * (The V2 line numbered it 12 and its server-busy code 13: this library
 * keeps hipobj.h's numbering, where hipObjBusy is 12.) */
#define hipObjNotSupported ((hipObjOpError_t)13)

/* hipError of a call that failed hipObjBusy because one of its deadlines
 * expired ("TIME"), as opposed to a server that answered 503. */
#define HIPOBJ_DIAG_DEADLINE_EXPIRED 0x54494D45

/* ---- Configuration ----------------------------------------------------- */

/* The control endpoint of the v2 requests. */
typedef struct {
    /* "http://host:port" or "https://host:port"; copied by hipObjInitV2().
     * The library does not connect to it: the callbacks see it in
     * hipObjTransferReqV2_t.endpoint. */
    const char *controlEndpoint;
} hipObjControlEndpointV2_t;

/* hipObjInitV2()'s settings. Zero-initialise it and set what you need; 0 in
 * a deadline selects its default. */
typedef struct {
    hipObjConfig_t v1;                 /* as for hipObjInit() */
    hipObjControlEndpointV2_t control; /* required */
    uint32_t connectDeadlineMs;        /* RTR/RTS after PREPARE; 0 = 10 s,
                                          capped by the transfer deadline */
    uint32_t transferDeadlineMs;       /* entry to return, including the wait
                                          for a transfer slot, every callback
                                          and the data phase; 0 = 60 s */
    uint32_t cancelCleanupBudgetMs;    /* the one CANCEL after a failure;
                                          0 = 1 s */
} hipObjConfigV2_t;

/* ---- Requests and replies ---------------------------------------------- */

/* What the library asks a callback to send. Every pointer is owned by the
 * library (bucket, key and query are the caller's own arguments) and valid
 * only during the callback; copy what you keep. */
typedef struct {
    const char *method;  /* "GET" or "PUT" (x-amz-rdma-op) */
    const char *bucket;  /* the call's bucket */
    const char *key;     /* the call's key */
    const char *query;   /* the call's canonical query, or NULL */
    const char *token;   /* 88 hex digits naming this transfer's QP */
    const char *session; /* READY and CANCEL: the session id (32 hex);
                            NULL for PREPARE */
    const char *target;  /* x-amz-rdma-target: "/" bucket "/" key ["?" query],
                            percent-encoded */
    uint64_t size;       /* bytes to move (1 .. 2^31 - 1) */
    uint64_t offset;     /* object byte offset */
    uint32_t cookie;     /* non-zero, random per transfer */
    uint32_t clientPsn;  /* 1 .. 0xffffff, random per transfer */
    uint32_t deadlineMs; /* what is left of the transfer's deadline */
    uint32_t remainingMs; /* the budget of this callback: deadlineMs, or the
                             cancel budget for sendCancel */
    const hipObjControlEndpointV2_t *endpoint; /* hipObjInitV2()'s control
                                                  endpoint; NULL after a plain
                                                  hipObjInit() */
    const char *nic;     /* the RDMA device in use */
    int nicPort;         /* its port (1-based) */
    int nicGidIndex;     /* the GID index in use */
    uint32_t clientQpn;  /* READY: this transfer's QP number; else 0 */
    uint64_t clientMrAddr; /* READY: the address the server writes (GET) or
                              the buffer's address (PUT); else 0 */
    uint32_t clientMrRkey; /* READY: the GET window's rkey, or the
                              registration's rkey for a PUT (which grants
                              no remote access); else 0 */
} hipObjTransferReqV2_t;

/* The answer to PREPARE, as sendPrepare copies it. The library zeroes it
 * before the call. Strings are NUL-terminated. */
typedef struct {
    int httpStatus;        /* 200; 501 (see unsupportedMarker), 400, 403,
                              413, 503, ... */
    int protocolEcho;      /* 1: X-Amz-Rdma-Protocol: hipobj-rc-v2 seen */
    int unsupportedMarker; /* 1: X-Amz-Rdma-Protocol-Status: unsupported */
    char serverToken[97];  /* X-Amz-Rdma-Reply without its "200:" (88 hex) */
    char session[65];      /* X-Amz-Rdma-Session (32 hex) */
    uint32_t serverPsn;    /* X-Amz-Rdma-Psn, parsed (1 .. 0xffffff) */
    uint64_t stagingAddr;  /* X-Amz-Rdma-Mr-Addr, parsed */
    uint32_t stagingRkey;  /* X-Amz-Rdma-Mr-Rkey, parsed */
    int stagingPresent;    /* 1: both staging headers seen (a PUT needs
                              them) */
} hipObjPrepareReplyV2_t;

/* The answer to READY (FINAL), as finishReady copies it. The library zeroes
 * it before the call. */
typedef struct {
    int httpStatus;       /* 200 (GET), 200 or 204 (PUT), else a failure */
    int protocolEcho;     /* 1: X-Amz-Rdma-Protocol: hipobj-rc-v2 seen */
    uint64_t bytes;       /* X-Amz-Rdma-Bytes-Transferred, parsed */
    uint32_t cookieEcho;  /* X-Amz-Rdma-Cookie, parsed */
    char etag[128];       /* X-Amz-Rdma-Etag, or "" */
    char versionId[128];  /* X-Amz-Rdma-Version-Id, or "" */
    char checksumB64[13]; /* the base64 of X-Amz-Rdma-Checksum
                             ("CRC64NVME <base64>"), or "" */
    int cookiePresent;    /* 1: X-Amz-Rdma-Cookie seen */
} hipObjFinalReplyV2_t;

/* The application's side of a v2 transfer. Every callback returns 0 on
 * success; any other value fails the transfer with hipObjS3Error (no answer
 * was seen). They run on the calling thread, one at a time, in this order:
 * sendPrepare; then, if the server answered 200, sendReadyRequest and, once
 * the bytes have moved, finishReady; sendCancel (at most once) when the
 * transfer failed after PREPARE published a session. */
typedef struct hipObjOpsV2 {
    hipObjOps_t v1; /* unused by the v2 functions (kept for the layout) */

    /* POST /.hipobj-rc/prepare; fill out from the answer. */
    int (*sendPrepare)(void *ctx, const hipObjTransferReqV2_t *req, hipObjPrepareReplyV2_t *out);

    /* POST /.hipobj-rc/ready: write the whole request and return WITHOUT
     * reading the answer (the server answers only when the bytes have
     * moved, and the library waits for them meanwhile). */
    int (*sendReadyRequest)(void *ctx, const hipObjTransferReqV2_t *req);

    /* Read the answer to the READY request and fill out. Called at most
     * once, only after sendReadyRequest returned 0 and the data phase
     * succeeded. When it is not called, abandon (close) that connection:
     * never reuse it. */
    int (*finishReady)(void *ctx, const hipObjTransferReqV2_t *req, hipObjFinalReplyV2_t *out);

    /* POST /.hipobj-rc/cancel, best effort; any answer will do. */
    int (*sendCancel)(void *ctx, const hipObjTransferReqV2_t *req);
} hipObjOpsV2_t;

/* ---- Functions --------------------------------------------------------- */

/* hipObjInit() plus the v2 settings. Checks, in order: config NULL, then
 * config->v1 as hipObjInit() does, then control.controlEndpoint NULL or not
 * starting with "http://" or "https://" (all hipObjInvalidValue). Calling
 * hipObjGetV2()/hipObjPutV2() after a plain hipObjInit() also works: the
 * deadlines then have their defaults and req->endpoint is NULL. */
HIPOBJ_API hipObjError_t hipObjInitV2(hipObjConfigV2_t *config);

/* A copy of the RDMA device's name (release it with hipObjFreeNicV2()), or
 * NULL when not initialised. */
HIPOBJ_API char *hipObjNicV2(void);

/* Release a name from hipObjNicV2(); NULL is ignored. */
HIPOBJ_API void hipObjFreeNicV2(char *nic);

/* The RDMA port in use (1-based), 0 when not initialised. */
HIPOBJ_API int hipObjSelectedPortV2(void);

/* The GID index in use, -1 when not initialised. With the device and port
 * it names /sys/class/infiniband/<dev>/ports/<port>/gid_attrs/ndevs/<index>,
 * the network interface to send the control requests from. */
HIPOBJ_API int hipObjSelectedGidIndexV2(void);

/* Device name (truncated to nicLen - 1 bytes), port and GID index in one
 * step; 1 when initialised, 0 otherwise. NULL outputs are skipped. */
HIPOBJ_API int hipObjInterfaceSnapshotV2(char *nicOut, size_t nicLen, int *portOut, int *gidOut);

/* GET size bytes of object bucket/key, from object byte offset, into the
 * registered buffer based at devPtr (its first size bytes).
 *
 * Checks, in order (hipObjInvalidValue unless said otherwise): not
 * initialised (hipObjNotInitialized); bucket NULL, empty or over 255 bytes;
 * key NULL, empty or over 1024 bytes; devPtr NULL; size 0; size over
 * 2^31 - 1 (hipObjSizeTooLarge); offset + size over 2^64 - 1; query not
 * canonical ("k=v" pairs joined by "&", sorted by key then value, every
 * byte an RFC 3986 unreserved character or %XX with uppercase hex; NULL or
 * "" for none); ops NULL or any of its four callbacks NULL. Then: devPtr not
 * the base of a registration (hipObjBufNotRegistered), size larger than
 * the registration (hipObjInvalidValue).
 *
 * The transfer holds one of the HIPOBJ_MAX_TRANSFERS slots that
 * hipObjGet()/hipObjPut() use (a transfer started inside a callback that
 * finds none fails hipObjBusy). A buffer staged through host memory is
 * staged around it, as hipObjGet() does.
 *
 * Results: hipObjSuccess once FINAL echoed the cookie and reported size
 * bytes; hipObjNotSupported: PREPARE answered 501 with the unsupported
 * marker; hipObjBusy: PREPARE answered 503, or a deadline expired (hipError
 * HIPOBJ_DIAG_DEADLINE_EXPIRED); hipObjInvalidValue: PREPARE answered 400 or
 * 403, or a PUT's PREPARE advertised no staging buffer; hipObjS3Error: a
 * callback failed, or any other status (PREPARE, or FINAL not 200/204);
 * hipObjRdmaError: a malformed answer (token, session, PSN, protocol echo,
 * cookie echo, byte count), the queue pair could not be connected, or the
 * data phase failed. Nothing is retried after READY. */
HIPOBJ_API hipObjError_t hipObjGetV2(const char *bucket, const char *key, void *devPtr, uint64_t size,
                                     uint64_t offset, const char *query, hipObjOpsV2_t *ops, void *ctx);

/* PUT the first size bytes of the registered buffer based at devPtr as
 * object bucket/key (offset: the object offset the server is told). Same
 * checks and results as hipObjGetV2(). The library writes the bytes into
 * the server's staging buffer (RDMA WRITE with immediate) after
 * sendReadyRequest returned. */
HIPOBJ_API hipObjError_t hipObjPutV2(const char *bucket, const char *key, const void *devPtr, uint64_t size,
                                     uint64_t offset, const char *query, hipObjOpsV2_t *ops, void *ctx);

#ifdef __cplusplus
}
#endif
