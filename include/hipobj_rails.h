/* hipObject C API extension: the counters of each RDMA device (rail).
 *
 * SPDX-License-Identifier: MIT
 *
 * hipObject may run on several RDMA devices at once (docs/rails.md): with
 * a GPU, the devices nicHint lists (or every device) in PCIe-distance
 * order; without one, the nicHint device plus those HIPOBJ_NICS names
 * (HIPOBJ_NICS=rxe2,rxe4). Transfers take turns on the nearest devices
 * whose port is up; a transfer whose device or path fails is run again on
 * the next device inside the same hipObjGet()/hipObjPut() call, and the
 * application sees success. These counters say what happened:
 *
 *   hipObjRailStats_t rails[8];
 *   size_t n;
 *   hipObjRailStats(rails, 8, &n);
 *   for (size_t i = 0; i < n && i < 8; i++)
 *       printf("%s: %llu transfers, %llu failovers\n", rails[i].device,
 *              (unsigned long long)rails[i].transfers,
 *              (unsigned long long)rails[i].failovers);
 *
 * The counters start at hipObjInit() and are read while transfers run
 * (each value is current; they are not one atomic snapshot).
 */

#pragma once

#include <stddef.h>
#include <stdint.h>

#include "hipobj.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Room for a device name and its NUL (names longer are cut to fit). */
#define HIPOBJ_RAIL_DEVICE_LEN 64

/* One device's counters, in the order hipObjInit() opened the devices
 * (the first is the one nearest the GPU, or the nicHint device). */
typedef struct hipObjRailStats {
    char device[HIPOBJ_RAIL_DEVICE_LEN]; /* the RDMA device, e.g. "rxe0" */
    uint64_t transfers; /* transfers that succeeded on this device */
    uint64_t bytes;     /* and their bytes */
    uint64_t failovers; /* transfers that failed here and moved to another device */
    uint64_t portDowns; /* times its port was seen going down */
    uint64_t portUps;   /* and coming back */
    uint64_t failbacks; /* times it carried a transfer again after its port came back */
    int portUp;         /* 1 when its port was up when last read, else 0 */
} hipObjRailStats_t;

/* Writes the counters of the first `capacity` devices to stats[0..] and
 * the number of devices the library uses to *count (which may be more than
 * capacity: call again with more room). Checked in this order:
 * hipObjNotInitialized before hipObjInit() (nothing written);
 * hipObjInvalidValue when count is NULL, or stats is NULL and capacity is
 * not 0 (nothing written). */
HIPOBJ_API hipObjError_t hipObjRailStats(hipObjRailStats_t *stats, size_t capacity, size_t *count);

#ifdef __cplusplus
}
#endif
