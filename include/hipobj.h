/* hipObject C API.
 *
 * SPDX-License-Identifier: MIT
 *
 * libhipobj.so implements this header. It moves S3 object data straight
 * between an RDMA-capable S3 server and GPU or host memory: the application's
 * own S3 client carries a token to the server and hands back the server's
 * reply, and the server reads or writes the registered memory over RDMA.
 */

#pragma once

#include <stdint.h>
#include <stdlib.h>

#include <sys/types.h>

#if defined(__GNUC__)
#define HIPOBJ_API __attribute__((visibility("default")))
#else
#define HIPOBJ_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Threads and concurrency
 * =======================
 *
 * Any function may be called from any thread, at any time, and also from
 * inside the hipObjOps_t callbacks. Calls on different threads proceed in
 * parallel; one waits for another only for a moment while shared state (for
 * example the table of registered buffers) is updated. The exceptions: a
 * transfer may wait for a free RDMA connection, and hipObjInit() and
 * hipObjShutdown() are serialised with each other. hipObjInit() reads the
 * environment, so no thread may modify the environment (setenv(), putenv(),
 * unsetenv(), ...) while it runs.
 *
 * Transfers. hipObjGet() and hipObjPut() run concurrently with each other and
 * with everything else. hipObjInit() opens a fixed set of RDMA connections and
 * every transfer holds one of them while it runs. HIPOBJ_MAX_TRANSFERS sets
 * the size of the set, an integer in 1..1024; any other value is ignored and
 * the default, 16, is used. When all connections are busy, a new transfer
 * waits until one is returned.
 *
 * Callbacks. A callback may call any hipObject function, hipObjGet() and
 * hipObjPut() included. A transfer started inside a callback never waits for
 * a connection (the one it would wait for may be held by the callback's own
 * transfer); if none is free it fails with hipObjBusy. A callback that waits
 * for a transfer running on another thread may deadlock, which hipObject
 * cannot detect. hipObject recognises a callback's nested calls by thread, so
 * a callback must return on the thread it was called on (mind fibers and
 * coroutines that migrate between threads).
 *
 * Buffers. While another call uses a buffer (a transfer, including the one
 * whose callback is asking, hipObjBufSync() or hipObjGetRdmaToken()),
 * hipObjBufDeregister() fails with hipObjBusy and the buffer stays
 * registered. Calls on different buffers are independent. The usual C rule
 * applies: concurrent calls must not share memory that one of them writes,
 * i.e. overlapping ranges of a registered buffer, or a token that one of them
 * releases. For a buffer staged through host memory (see hipObjBufSync()),
 * hipObjPut() and HIPOBJ_SYNC_TO_HOST write the staging copy and therefore
 * count as writers of the range they use.
 *
 * Shutdown. hipObjShutdown() returns without waiting for calls in progress.
 * Those complete normally; RDMA resources and registrations are released when
 * the last of them returns. A transfer still waiting for a connection fails
 * with hipObjNotInitialized. Any call that starts after hipObjShutdown(), on
 * any thread, and needs the library initialised fails with
 * hipObjNotInitialized until hipObjInit() succeeds again, which is allowed
 * before the earlier calls have drained.
 *
 * Application-driven transfers. A transfer assembled from
 * hipObjGetRdmaToken(), the application's own S3 request and hipObjBufSync()
 * spans several calls, and hipObject does not know it is in progress in
 * between. Nothing stops other threads from deregistering the buffer or
 * shutting the library down meanwhile: the application must keep both alive
 * until it is finished. All tokens from hipObjGetRdmaToken() refer to one
 * shared RDMA connection, so the application must not run two such
 * transfers at once. They may overlap hipObjGet()/hipObjPut(), which use
 * connections from the set above.
 */

/* ---- Version of this header ------------------------------------------ */

/* Each version part is defined on its own line, exactly as
 * "#define HIPOBJ_VERSION_<PART> <number>", so that tools can read it. */

/* Major version. */
#define HIPOBJ_VERSION_MAJOR 0
/* Minor version. */
#define HIPOBJ_VERSION_MINOR 1
/* Patch version. */
#define HIPOBJ_VERSION_PATCH 0

/* ---- Errors ------------------------------------------------------------ */

/* Start of hipObject's error number range (kept for compatibility; the
 * codes below do not use it). */
#define HIPOBJ_BASE_ERR 6000

/* What went wrong in a call. The values are fixed. */
typedef enum {
    hipObjSuccess = 0,
    hipObjInvalidValue,
    hipObjNotInitialized,
    hipObjAlreadyInitialized,
    hipObjRdmaError,
    hipObjS3Error,
    hipObjBufNotRegistered,
    hipObjBufAlreadyRegistered,
    hipObjNicNotFound,
    hipObjDmabufNotSupported,
    hipObjSizeTooLarge,
    hipObjInternalError,
    /* Something the call needs is taken; retry later. Either a staging copy
     * of the buffer timed out and is still running (see hipObjBufSync()),
     * hipObjBufDeregister() was given a buffer that another call is using,
     * or a transfer started inside a callback found no free RDMA connection
     * (see "Threads and concurrency"). cuObject has no such code. */
    hipObjBusy,
} hipObjOpError_t;

/* Result of every call that can fail: the operation code, and the HIP
 * error code behind it when a HIP call failed (0 otherwise); on NVIDIA GPUs,
 * where hipObject uses the CUDA driver, the CUresult of the failed call (the
 * common codes have the same values in both). Returned by value. */
typedef struct {
    hipObjOpError_t opError;
    int             hipError;
} hipObjError_t;

/* A static, NUL-terminated description of an error code. Never NULL; a value
 * outside the enum yields "Unknown error". Needs no initialisation. */
HIPOBJ_API const char *hipObjGetErrorString(hipObjOpError_t err);

/* ---- Types ------------------------------------------------------------- */

/* The application's handle for an S3 object. hipObject passes it along and
 * never looks at it. */
typedef void *hipObjHandle_t;

/* The application's S3 client, as two callbacks that hipObjGet() and
 * hipObjPut() call, in this order, on the calling thread (the same shape as
 * cuObject's CUObjOps_t). Both must be set. A callback may itself call any
 * hipObject function (see "Threads and concurrency"). */
typedef struct {
    /* Issue the S3 request with the RDMA token in its x-amz-rdma-token
     * header. `token` points at tokenLen (88) hex characters followed by a
     * NUL. `ctx` is the pointer given to hipObjGet()/hipObjPut(). Return 0
     * when the request went through, a negative value otherwise. */
    int (*sendRequest)(void *ctx, const char *token, size_t tokenLen);

    /* Copy the value of the response's x-amz-rdma-reply header into
     * `reply`. On entry *replyLen is the size of `reply`; on return it must
     * hold the number of bytes written (at most the size given). Return 0
     * on success, a negative value otherwise. */
    int (*recvReply)(void *ctx, char *reply, size_t *replyLen);
} hipObjOps_t;

/* Settings for hipObjInit(). Zero or NULL every field you do not use.
 *
 * endpoint, region, accessKey and secretKey are ignored: S3 requests are made
 * by the application's client, not by hipObject.
 *
 * gpuDevice: the HIP device whose nearest RDMA NIC hipObject picks, or -1 for
 * the calling thread's current device. hipObject uses HIP when it has a
 * device, else the CUDA driver (libcuda.so.1) when it has one; gpuDevice then
 * indexes that runtime's devices (on CUDA, -1 is the device of the thread's
 * current context, or device 0). Without a GPU, use -1 and set nicHint.
 *
 * nicHint: comma-separated RDMA device names (as printed by ibv_devices) that
 * hipObject may pick from; NULL or "" means any. When the NIC cannot be chosen
 * by GPU locality (no GPU, for instance), hipObject opens the device nicHint
 * names, which must then be exactly one name. */
typedef struct {
    const char *endpoint;  /* ignored */
    const char *region;    /* ignored */
    const char *accessKey; /* ignored */
    const char *secretKey; /* ignored */
    uint32_t    flags;     /* must be 0 */
    int         gpuDevice; /* HIP device index, or -1 */
    const char *nicHint;   /* allowed RDMA devices, or NULL */
} hipObjConfig_t;

/* hipObjGetRdmaToken() op: the server RDMA-READs the buffer (a PUT). */
#define HIPOBJ_RDMA_OP_PUT 0
/* hipObjGetRdmaToken() op: the server RDMA-WRITEs the buffer (a GET). */
#define HIPOBJ_RDMA_OP_GET 1

/* Reply code meaning the server will not use RDMA for this request; the
 * application repeats it as a plain HTTP request. */
#define HIPOBJ_RDMA_REPLY_NOT_IMPLEMENTED 501

/* ---- Lifecycle ----------------------------------------------------------- */

/* Start the library: pick the RDMA NIC nearest the GPU (see hipObjConfig_t),
 * open it and create the set of RDMA connections used by transfers.
 *
 * Until this succeeds, every function answers hipObjNotInitialized except
 * hipObjGetErrorString(), hipObjGetVersionString(), hipObjGetVersion(),
 * hipObjParseRdmaReply(), hipObjTokenClientNic() and hipObjPutRdmaToken(),
 * which need no initialisation, and hipObjShutdown(), which then does
 * nothing. The environment is read here (HIPOBJ_MAX_TRANSFERS,
 * HIPOBJ_STAGE_TIMEOUT_MS, HIPOBJ_REQUIRE_GPU_DIRECT, HIPOBJ_REQUIRE_MW); do
 * not modify it from another thread meanwhile. HIPOBJ_REQUIRE_MW=1 makes
 * this fail with hipObjRdmaError on a device without type-2 memory windows
 * (MEM_WINDOW_TYPE_2B), instead of falling back to registrations that grant
 * remote access for their whole life.
 *
 * Errors: hipObjInvalidValue when config is NULL, flags is not 0, or
 * gpuDevice is below -1 or is not an existing GPU; hipObjAlreadyInitialized
 * when already started; hipObjNicNotFound when no usable NIC exists;
 * hipObjRdmaError when libibverbs cannot be loaded, the NIC cannot be opened,
 * the connections cannot be created, or a HIP call fails (its code is then
 * in hipError). */
HIPOBJ_API hipObjError_t hipObjInit(hipObjConfig_t *config);

/* Stop the library, releasing its RDMA resources; every registration is
 * dropped. Returns at once, without waiting for calls in progress (including
 * the transfer whose callback calls it): they complete normally and the
 * resources go away when the last one returns (see "Threads and
 * concurrency"). A staging buffer that a timed-out copy may still touch
 * (see hipObjBufSync()) is never freed. Does nothing if not initialised. */
HIPOBJ_API hipObjError_t hipObjShutdown(void);

/* ---- Buffer registration ------------------------------------------------- */

/* Make a GPU buffer (from hipMalloc) available to RDMA, via dmabuf export.
 * At most 4 GiB per registration. The whole range must belong to the one
 * HIP allocation that contains devPtr, else hipObjInvalidValue. hipObject
 * neither allocates nor frees that memory, and reads and writes it whenever
 * a call uses the buffer: keep the allocation alive (do not hipFree() it)
 * while it is registered, that is until hipObjBufDeregister() of it has
 * returned hipObjSuccess. */
HIPOBJ_API hipObjError_t hipObjBufRegister(void *devPtr, size_t size);

/* Make application-owned host memory (malloc(), hipHostMalloc(), ...)
 * available to RDMA. hipObject neither allocates nor frees it, and reads and
 * writes it whenever a call uses the buffer: keep [hostPtr, hostPtr + size)
 * allocated (do not free() or unmap it) while it is registered, that is
 * until hipObjBufDeregister() of it has returned hipObjSuccess. At most
 * 4 GiB per registration. */
HIPOBJ_API hipObjError_t hipObjBufRegisterHost(void *hostPtr, size_t size);

/* Undo hipObjBufRegister()/hipObjBufRegisterHost(); devPtr must be the
 * exact pointer that was registered. If another call is using the buffer
 * (see "Threads and concurrency") or a timed-out staging copy of it is
 * still running (see hipObjBufSync()), fails with hipObjBusy and keeps the
 * registration: retry once that has finished, and keep the memory
 * allocated until then. */
HIPOBJ_API hipObjError_t hipObjBufDeregister(void *devPtr);

/* ---- Transfers ----------------------------------------------------------- */

/* GET: the server RDMA-WRITEs object data into the registered buffer devPtr,
 * at byte `offset` of it; [offset, offset + size) must lie inside the
 * registration. Which part of the object is sent is up to the request the
 * callbacks make; no object offset is passed to the server.
 *
 * No GPU work may be using the buffer when this is called. On hipObjSuccess
 * the data is in the buffer.
 *
 * Each request of the transfer binds a memory window over exactly these
 * bytes (remote write only), reachable only by the server QP paired with the
 * connection, and invalidates it before this returns, success or failure: a
 * server still retrying after a failed or abandoned request cannot write the
 * buffer afterwards, so the buffer may be reused at once. The callbacks
 * should send HTTP from the address hipObjTokenClientNic() gives for the
 * token (the server checks it against the token's GID).
 *
 * When every RDMA connection is taken, waits for one, or, inside a
 * callback, fails with hipObjBusy (see "Threads and concurrency").
 *
 * For a host-staged buffer (see hipObjBufSync()), a copy into the buffer
 * that overruns HIPOBJ_STAGE_TIMEOUT_MS makes this fail with
 * hipObjInternalError while the copy keeps running: it may write the buffer
 * after the return, and until it ends, later calls cannot use or deregister
 * the buffer.
 *
 * `handle` is passed through unused; `ctx` is handed to the callbacks. */
HIPOBJ_API hipObjError_t hipObjGet(hipObjHandle_t handle, void *devPtr, size_t size, off_t offset,
                                   hipObjOps_t *ops, void *ctx);

/* PUT: the server RDMA-READs [offset, offset + size) of the registered
 * buffer devPtr, which must lie inside the registration, and stores it.
 * Where it lands in the object is up to the request the callbacks make.
 *
 * hipObject does not synchronise with GPU work on any stream: finish the
 * work that fills the buffer (e.g. hipStreamSynchronize()) before calling.
 *
 * Connection waiting and staging timeouts behave as for hipObjGet(), except
 * that a timed-out copy out of the buffer may still read it after the
 * return. */
HIPOBJ_API hipObjError_t hipObjPut(hipObjHandle_t handle, const void *devPtr, size_t size, off_t offset,
                                   hipObjOps_t *ops, void *ctx);

/* hipObjBufSync() direction: copy device memory into the staging buffer. */
#define HIPOBJ_SYNC_TO_HOST 0
/* hipObjBufSync() direction: copy the staging buffer into device memory. */
#define HIPOBJ_SYNC_TO_DEVICE 1

/* Copy [offset, offset + size) of a registered buffer between the device
 * and its host staging buffer.
 *
 * If device memory cannot be registered with the NIC directly (no dmabuf, or
 * no peer-to-peer path), hipObjBufRegister() registers a host staging buffer
 * instead, and the server's RDMA lands there. Applications that drive
 * transfers through hipObjGetRdmaToken() therefore call this with
 * HIPOBJ_SYNC_TO_HOST before a PUT and HIPOBJ_SYNC_TO_DEVICE after a GET.
 * For directly registered buffers it succeeds without copying.
 * hipObjGet() and hipObjPut() do this on their own.
 *
 * hipObjSuccess means the copy is complete. A copy that overruns
 * HIPOBJ_STAGE_TIMEOUT_MS makes this fail with hipObjInternalError and keeps
 * running, possibly still reading or writing the buffer. Until it ends, the
 * staging buffer is kept, and calls that start afterwards cannot use the
 * buffer: hipObjGet(), hipObjPut(), hipObjBufSync(), hipObjGetRdmaToken()
 * and hipObjBufDeregister() fail with hipObjBusy (the buffer stays
 * registered). Calls already running are not affected. When the copy ends,
 * the buffer is usable again; if it never ends, the staging buffer is never
 * freed.
 *
 * No synchronisation with GPU streams is done: before HIPOBJ_SYNC_TO_HOST,
 * the GPU work writing the buffer must be finished; before
 * HIPOBJ_SYNC_TO_DEVICE, no GPU work may be reading or writing it. */
HIPOBJ_API hipObjError_t hipObjBufSync(void *devPtr, size_t size, off_t offset, int direction);

/* Produce the 88-character hex RDMA token for [devPtr, devPtr + size) of a
 * registered buffer, for an S3 request the application makes itself.
 * op is HIPOBJ_RDMA_OP_PUT (the server will read these bytes) or
 * HIPOBJ_RDMA_OP_GET (the server will write them). On success *outToken
 * points at a NUL-terminated string owned by hipObject: release it with
 * hipObjPutRdmaToken(), never with free(). On failure *outToken is not
 * written. Fails with hipObjBusy while a timed-out staging copy of the buffer
 * is running (see hipObjBufSync()).
 *
 * Memory windows (protocol revision 2): registrations grant no remote access
 * of their own. While the connection that these tokens use is not paired,
 * the token's rkey is 0 and grants nothing (the server answers 428; pass that
 * reply to hipObjParseRdmaReply() and ask for a new token). Once it is
 * paired, this call binds a memory window over exactly [devPtr, devPtr +
 * size), with remote write for HIPOBJ_RDMA_OP_GET or remote read for
 * HIPOBJ_RDMA_OP_PUT, reachable only by the server QP of that pairing, and
 * the token carries the window's rkey. The window stays open until the token
 * is released with hipObjPutRdmaToken(): finish the request (or give up on
 * it) before releasing the token, and release every token, or the server
 * can keep reaching those bytes. On a device without type-2 memory windows
 * the token carries the registration's own rkey (revision 1; hipObject warns
 * once, and HIPOBJ_REQUIRE_MW=1 makes hipObjInit() fail instead).
 *
 * Send the request from the NIC address that hipObjTokenClientNic() returns
 * for the token: the server checks that the HTTP peer address is the one in
 * the token's GID. */
HIPOBJ_API hipObjError_t hipObjGetRdmaToken(const void *devPtr, size_t size, int op, char **outToken);

/* Release a token from hipObjGetRdmaToken(). NULL is hipObjInvalidValue.
 * Passing any other pointer is undefined behaviour. While the library is
 * initialised, the memory window that the token's rkey names is invalidated
 * first (and the call returns only once the NIC confirmed it, or after the
 * connection's QP was moved to the error state, which ends every window on
 * it): from then on the server cannot reach the token's bytes. After
 * hipObjShutdown() the windows are already gone and this only frees the
 * string. */
HIPOBJ_API hipObjError_t hipObjPutRdmaToken(char *token);

/* Parse the first replyLen bytes of an x-amz-rdma-reply value: "ok", "err",
 * a three-digit code 100..599, or "200:" / "428:" followed by an 88-digit
 * token; trailing NUL, CR and LF bytes are ignored. On success *httpCode is
 * set to the code (200 for "ok", -1 for "err"); on any failure it is left
 * alone. While the library is initialised, a "428:<token>" reply also pairs
 * the connection that hipObjGetRdmaToken() tokens use, so that the request
 * can be repeated with a new token. */
HIPOBJ_API hipObjError_t hipObjParseRdmaReply(const char *reply, size_t replyLen, int *httpCode);

/* Write into nicIp the dotted-quad IPv4 address of the client NIC that a
 * token names, when its GID is IPv4-mapped (::ffff:a.b.c.d); otherwise write
 * "" and succeed. A malformed token, or a buffer of nicIpLen bytes too small
 * for the address and its NUL, gives hipObjInvalidValue with "" written. */
HIPOBJ_API hipObjError_t hipObjTokenClientNic(const char *token, char *nicIp, size_t nicIpLen);

/* The running library's version, "MAJOR.MINOR.PATCH", as a static string. */
HIPOBJ_API const char *hipObjGetVersionString(void);

/* The running library's version as numbers; it can differ from the
 * HIPOBJ_VERSION_* macros the application was compiled with. A NULL
 * pointer skips its part. Always hipObjSuccess. */
HIPOBJ_API hipObjError_t hipObjGetVersion(unsigned *major, unsigned *minor, unsigned *patch);

#ifdef __cplusplus
}
#endif
