/* hipObject C API extension: the end-to-end check of a GET.
 *
 * SPDX-License-Identifier: MIT
 *
 * hipObjGet() answers success once the server says its RDMA WRITE completed;
 * the bytes never pass through the application's S3 client, so the checksum
 * checks an AWS SDK runs over an HTTP body never see them. A byte changed on
 * the server's disk, a WRITE at the wrong offset or a wrong buffer reaches
 * the application unnoticed unless it checks what landed. S3 stores a
 * full-object CRC64NVME with every new object (CRC32C and CRC32 when the
 * uploader chose them) and returns it when the request asks for it:
 *
 *   1. send the GET's request with "x-amz-checksum-mode: ENABLED" (signed);
 *   2. keep the reply's x-amz-checksum-* headers (names and values);
 *   3. once hipObjGet() returned success and the bytes are in host memory,
 *      pass them and those headers to hipObjChecksumCheck();
 *   4. on HIPOBJ_CHECKSUM_MISMATCH, GET again once (a fresh token), then
 *      treat the object as unreadable: the buffer's bytes are not the
 *      object's. docs/protocol.md section 15 is the normative text.
 *
 * The check is the library's (the same code as the command line's and the
 * Python package's): CRC64NVME preferred, then CRC32C, then CRC32. A
 * COMPOSITE multipart checksum, or only a SHA checksum, cannot be checked
 * against the whole object: the answer is then HIPOBJ_CHECKSUM_UNCHECKED,
 * with the reason. It reads host memory only (copy device memory to the
 * host first).
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
/* Nothing to check against (no checksum in the headers, a COMPOSITE or SHA
 * one, or a malformed value): the message says which. */
#define HIPOBJ_CHECKSUM_UNCHECKED ((hipObjChecksumStatus_t)2)

/* Checks the `size` bytes at `hostPtr` (the whole object, as it landed)
 * against the checksum in a GET or HEAD reply's headers: `headerCount`
 * names and values (names in any case; headers that are not checksums are
 * ignored). Writes the outcome to *status and a NUL-terminated description
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

#ifdef __cplusplus
}
#endif
