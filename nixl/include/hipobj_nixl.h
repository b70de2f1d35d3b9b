/* hipObject's NIXL backend plugin (libplugin_HIPOBJ.so): what it moved, per path.
 *
 * SPDX-License-Identifier: MIT
 *
 * NIXL's API has no place for a backend's own counters, so the plugin exports this one C
 * function beside nixl_plugin_init(). Python reads it through ctypes on the loaded plugin
 * (docs/nixl.md). The counts are of the whole process (every HIPOBJ backend of every agent),
 * from the plugin's load on, and only grow.
 */
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint64_t completed;  /* operations that ended COMPLETE */
    uint64_t failed;     /* ... FAILED */
    uint64_t cancelled;  /* ... CANCELLED (a request released while in flight) */
    uint64_t bytes;      /* bytes moved by completed operations */
    uint64_t rdmaV1;     /* completed operations whose path was RDMA v1 */
    uint64_t rdmaV2;     /* ... hipobj-rc-v2 */
    uint64_t http;       /* ... plain HTTP */
    uint64_t pathUnknown;/* ... not named */
    uint64_t gets;       /* completed GETs (NIXL READ) */
    uint64_t puts;       /* completed PUTs (NIXL WRITE) */
    uint64_t verified;   /* completed GETs whose landed bytes had the stored checksum */
    uint64_t retries;    /* requests sent again after a retryable failure */
} hipObjNixlStats_t;

/* Copies the counters into *out; returns 0, or -1 when out is NULL. */
__attribute__((visibility("default"))) int hipobj_nixl_stats(hipObjNixlStats_t *out);

#ifdef __cplusplus
}
#endif
