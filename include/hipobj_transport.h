/* hipObject C API extension: RDMA or plain HTTP, per transfer.
 *
 * SPDX-License-Identifier: MIT
 *
 * RDMA is not faster everywhere: small transfers, an emulated NIC or a
 * busy fabric can make plain HTTP (the application's own S3 client) the
 * faster path. A fixed size threshold is right on one fabric only. This
 * helper is the decision the command line and the Python package use
 * (docs/transport.md): it keeps, per endpoint, size class
 * (powers of 4 from 4 KiB), direction and destination, the recent throughput
 * of each path the application reports, and answers which path the next
 * transfer takes:
 *
 *   - until both paths are measured in that cell: RDMA from 1 MiB up, HTTP
 *     below, with the other path tried every second transfer;
 *   - then the faster path by the median of its recent samples, the other
 *     path probed now and then (more rarely while the choice holds, and
 *     the more rarely the slower it measured), and a
 *     switch only when the other path was faster by 25 % in 3 probes in a
 *     row, so noise does not make it flap;
 *   - after hipObjTransportNoRdma(): HTTP (no RDMA device in this process,
 *     or an endpoint that answered 501).
 *
 * Use:
 *
 *   hipObjTransport_t *t;
 *   hipObjTransportCreate(HIPOBJ_TRANSPORT_AUTO, &t);
 *   ...
 *   hipObjTransportChoose(t, endpoint, size, HIPOBJ_TRANSPORT_GET,
 *                         HIPOBJ_TRANSPORT_HOST, &path, &reason);
 *   (time the transfer over `path`: hipObjGet(), or the plain HTTP GET)
 *   hipObjTransportRecord(t, endpoint, size, HIPOBJ_TRANSPORT_GET,
 *                         HIPOBJ_TRANSPORT_HOST, path, reason, seconds);
 *   ...
 *   hipObjTransportDestroy(t);
 *
 * A handle is safe to use from several threads at once. None of these
 * functions needs hipObjInit(). `endpoint` is any NUL-terminated name of the
 * S3 endpoint (e.g. "http://10.0.0.2:9000"); the same string names the same
 * endpoint.
 */

#pragma once

#include <stddef.h>
#include <stdint.h>

#include "hipobj.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One decision (opaque); made by hipObjTransportCreate(). */
typedef struct hipObjTransport hipObjTransport_t;

/* What hipObjTransportCreate() is asked for. */
typedef int hipObjTransportMode_t;
/* The decision described above. */
#define HIPOBJ_TRANSPORT_AUTO ((hipObjTransportMode_t)0)
/* Always RDMA (outcomes are still recorded and counted). */
#define HIPOBJ_TRANSPORT_RDMA ((hipObjTransportMode_t)1)
/* Always plain HTTP. */
#define HIPOBJ_TRANSPORT_HTTP ((hipObjTransportMode_t)2)
/* The mode the environment variable HIPOBJ_TRANSPORT names (auto, rdma or
 * http, any case), as the command line and the Python package read it;
 * AUTO when it is unset or empty. A program built on this helper thus
 * follows the same switch as they do (a test that exists to exercise RDMA
 * sets HIPOBJ_TRANSPORT=rdma). */
#define HIPOBJ_TRANSPORT_FROM_ENV ((hipObjTransportMode_t)3)

/* A path. */
typedef int hipObjTransportPath_t;
#define HIPOBJ_PATH_RDMA ((hipObjTransportPath_t)0)
#define HIPOBJ_PATH_HTTP ((hipObjTransportPath_t)1)

/* Why a transfer takes its path. */
typedef int hipObjTransportReason_t;
/* The mode names the path. */
#define HIPOBJ_REASON_FORCED ((hipObjTransportReason_t)0)
/* Not measured on both paths yet: RDMA from 1 MiB up, HTTP below. */
#define HIPOBJ_REASON_DEFAULT_START ((hipObjTransportReason_t)1)
/* The measurements chose it. */
#define HIPOBJ_REASON_MEASURED ((hipObjTransportReason_t)2)
/* A probe of the path not held, to see whether conditions changed. */
#define HIPOBJ_REASON_PROBE ((hipObjTransportReason_t)3)
/* No usable RDMA device in this process. */
#define HIPOBJ_REASON_NO_RDMA_DEVICE ((hipObjTransportReason_t)4)
/* The endpoint declined RDMA (501). */
#define HIPOBJ_REASON_DECLINED ((hipObjTransportReason_t)5)

/* Which way the bytes go. */
typedef int hipObjTransportDirection_t;
#define HIPOBJ_TRANSPORT_GET ((hipObjTransportDirection_t)0)
#define HIPOBJ_TRANSPORT_PUT ((hipObjTransportDirection_t)1)

/* Where a GET lands or a PUT's bytes come from. */
typedef int hipObjTransportDestination_t;
#define HIPOBJ_TRANSPORT_HOST ((hipObjTransportDestination_t)0)
/* GPU memory directly. */
#define HIPOBJ_TRANSPORT_GPU ((hipObjTransportDestination_t)1)
/* GPU memory through a host buffer the bytes are copied through. */
#define HIPOBJ_TRANSPORT_GPU_BOUNCE ((hipObjTransportDestination_t)2)

/* Makes a decision in `mode` and writes it to *transport (only on success).
 * hipObjInvalidValue when transport is NULL, mode is not one of the
 * HIPOBJ_TRANSPORT_AUTO/RDMA/HTTP/FROM_ENV values, or mode is FROM_ENV and
 * HIPOBJ_TRANSPORT holds something else than auto, rdma or http. */
HIPOBJ_API hipObjError_t hipObjTransportCreate(hipObjTransportMode_t mode, hipObjTransport_t **transport);

/* Frees a decision (NULL: nothing happens). No call on it may be running
 * or follow. */
HIPOBJ_API void hipObjTransportDestroy(hipObjTransport_t *transport);

/* The path of the next transfer of `bytes` to `endpoint` in `direction` to
 * or from `destination`: *path, and *reason unless reason is NULL (both
 * written only on success). hipObjInvalidValue when transport, endpoint or
 * path is NULL, or direction or destination is not one of its values. */
HIPOBJ_API hipObjError_t hipObjTransportChoose(hipObjTransport_t *transport, const char *endpoint, uint64_t bytes,
                                               hipObjTransportDirection_t direction,
                                               hipObjTransportDestination_t destination,
                                               hipObjTransportPath_t *path, hipObjTransportReason_t *reason);

/* A transfer that hipObjTransportChoose() gave `path` and `reason` moved
 * `bytes` in `seconds` (from the start of the transfer to its end; a failed
 * transfer is not recorded). Counted, and measured unless bytes is 0 or
 * seconds is not above 0. hipObjInvalidValue when transport or endpoint is
 * NULL, or direction, destination, path or reason is not one of its
 * values. */
HIPOBJ_API hipObjError_t hipObjTransportRecord(hipObjTransport_t *transport, const char *endpoint, uint64_t bytes,
                                               hipObjTransportDirection_t direction,
                                               hipObjTransportDestination_t destination,
                                               hipObjTransportPath_t path, hipObjTransportReason_t reason,
                                               double seconds);

/* RDMA cannot be used: with endpoint NULL, not at all in this process (no
 * RDMA device: hipObjInit() failed with hipObjNicNotFound or
 * hipObjRdmaError); else not to that endpoint (it answered 501). Under
 * HIPOBJ_TRANSPORT_AUTO every later choice for it is HTTP. *first (unless
 * NULL) is 1 the first time this is said, else 0, so the application can
 * say why once. hipObjInvalidValue when transport is NULL. */
HIPOBJ_API hipObjError_t hipObjTransportNoRdma(hipObjTransport_t *transport, const char *endpoint, int *first);

/* The transfers and bytes recorded over `path` so far (over all endpoints),
 * and how many of those transfers took it for `reason`: *transfers, *bytes
 * and *forReason, each unless NULL. hipObjInvalidValue when transport is
 * NULL, or path or reason is not one of its values. */
HIPOBJ_API hipObjError_t hipObjTransportCounters(hipObjTransport_t *transport, hipObjTransportPath_t path,
                                                 hipObjTransportReason_t reason, uint64_t *transfers,
                                                 uint64_t *bytes, uint64_t *forReason);

#ifdef __cplusplus
}
#endif
