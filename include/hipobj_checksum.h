/* hipObject C API extension: the end-to-end check of a GET.
 *
 * SPDX-License-Identifier: MIT
 *
 * hipObjGet() answers success once the server says its RDMA WRITE completed;
 * the bytes never pass through the application's S3 client, so the checksum
 * checks an AWS SDK runs over an HTTP body never see them. A byte changed on
 * the server's disk, a WRITE at the wrong offset or a wrong buffer reaches
 * the application unnoticed unless it checks what landed.
 *
 * The server says what to check against without being asked (protocol
 * revision 6, docs/protocol.md section 16): the 200 reply to a token GET of
 * a whole object, or of exactly one whole part, carries
 *
 *   x-amz-rdma-checksum: <ALGORITHM> <base64>[ COMPOSITE]
 *
 * (CRC64NVME, CRC32C, CRC32, SHA256 or SHA1; the value as S3 writes it) and
 * never an x-amz-checksum-* header, which an S3 SDK would check against the
 * reply's empty body. The header is not x-amz-rdma-reply, so the seed's
 * recvReply callback does not hand it to the library:
 *
 *   1. in the callback that reads the GET's reply, keep the value of
 *      x-amz-rdma-checksum when there is one (examples/get-object.c);
 *   2. once hipObjGet() returned success and the bytes are in host memory,
 *      pass them and that value to hipObjRdmaChecksumCheck();
 *   3. on HIPOBJ_CHECKSUM_MISMATCH, GET again once (a fresh token), then
 *      treat the object as unreadable: the buffer's bytes are not the
 *      object's.
 *
 * No x-amz-checksum-mode request header is needed, and the application's S3
 * client keeps its own response checks on (nothing on a token reply is left
 * for them to check). hipObjChecksumCheck() takes a reply's headers as they
 * came instead: x-amz-rdma-checksum first, else the x-amz-checksum-* of a
 * plain GET asked with "x-amz-checksum-mode: ENABLED" (or of a revision-5
 * server's token reply).
 *
 * The check is the library's (the same code as the command line's and the
 * Python package's). Every full value is checked, SHA included, since all the
 * bytes are in hand. A COMPOSITE multipart checksum is not the checksum of
 * the object's bytes: the answer is HIPOBJ_CHECKSUM_UNCHECKED, with the
 * reason; GET each part (partNumber=N, or a Range of exactly that part's
 * bytes) and check each against its own reply's value. No checksum at all (a
 * revision-5 server, or an object stored without one) is
 * HIPOBJ_CHECKSUM_UNCHECKED too, never a failure. It reads host memory only
 * (copy device memory to the host first).
 */

#pragma once

#include "hipobj.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What hipObjChecksumCheck() found (its *status). */
typedef int hipObjChecksumStatus_t;
/* The bytes have the object's stored checksum. */
#define HIPOBJ_CHECKSUM_VERIFIED ((hipObjChecksumStatus_t)0)
/* They do not: the message names the algorithm and both values. */
#define HIPOBJ_CHECKSUM_MISMATCH ((hipObjChecksumStatus_t)1)
/* Nothing to check against (no checksum in the headers, a COMPOSITE one, or
 * a malformed value): the message says which. */
#define HIPOBJ_CHECKSUM_UNCHECKED ((hipObjChecksumStatus_t)2)

/* Checks the `size` bytes at `hostPtr` (the whole object, or the whole part,
 * as it landed) against the checksum in a GET or HEAD reply's headers:
 * `headerCount` names and values (names in any case; headers that are not
 * checksums are ignored; x-amz-rdma-checksum wins over x-amz-checksum-*). Writes the outcome to *status and a NUL-terminated description
 * to `message` (truncated to messageLen - 1 bytes; nothing when messageLen
 * is 0).
 * Returns hipObjSuccess whenever the check ran, whatever it found;
 * hipObjInvalidValue when hostPtr is NULL while size > 0, headerNames or
 * headerValues is NULL while headerCount > 0, any of the names or values is
 * NULL, status is NULL, or message is NULL while messageLen > 0 (then
 * nothing is written). Needs no hipObjInit(). */
HIPOBJ_API hipObjError_t hipObjChecksumCheck(const void *hostPtr, size_t size,
                                             const char *const *headerNames,
                                             const char *const *headerValues,
                                             size_t headerCount,
                                             hipObjChecksumStatus_t *status,
                                             char *message, size_t messageLen);

/* Checks the `size` bytes at `hostPtr` (what one token GET moved: the whole
 * object, or one whole part) against `rdmaChecksum`, the value of the reply's
 * x-amz-rdma-checksum header as the application's S3 client saw it.
 * Outcome and message as hipObjChecksumCheck()'s (a malformed value is
 * HIPOBJ_CHECKSUM_UNCHECKED, naming the header).
 * Returns hipObjSuccess whenever the check ran, whatever it found;
 * hipObjInvalidValue when hostPtr is NULL while size > 0, rdmaChecksum is
 * NULL, status is NULL, or message is NULL while messageLen > 0 (then
 * nothing is written). Needs no hipObjInit(). */
HIPOBJ_API hipObjError_t hipObjRdmaChecksumCheck(const void *hostPtr,
                                                 size_t size,
                                                 const char *rdmaChecksum,
                                                 hipObjChecksumStatus_t *status,
                                                 char *message,
                                                 size_t messageLen);

#ifdef __cplusplus
}
#endif
