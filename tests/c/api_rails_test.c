/* The devices' counters extension header (include/hipobj_rails.h) as a C11 or C++11 program sees it
 * (compiled as both, -Wall -Wextra -Werror -pedantic): the struct's layout and, before
 * hipObjInit(), hipObjNotInitialized with nothing written. The counters themselves are read in
 * the lane with two rails (tests/c/rails_threads.c, run by tests/rails_rdma.rs). Prints
 * "N passed, M failed"; the exit status is non-zero when anything failed. */

#include "hipobj_rails.h"
#include "hipobj_rails.h" /* #pragma once */

#include <stddef.h>
#include <string.h>

#include "check.h"

static void layout(void) {
    CHECK(HIPOBJ_RAIL_DEVICE_LEN == 64);
    CHECK(sizeof(((hipObjRailStats_t *)0)->device) == HIPOBJ_RAIL_DEVICE_LEN);
    CHECK(offsetof(hipObjRailStats_t, transfers) == 64);
    CHECK(offsetof(hipObjRailStats_t, bytes) == 72);
    CHECK(offsetof(hipObjRailStats_t, failovers) == 80);
    CHECK(offsetof(hipObjRailStats_t, portDowns) == 88);
    CHECK(offsetof(hipObjRailStats_t, portUps) == 96);
    CHECK(offsetof(hipObjRailStats_t, failbacks) == 104);
    CHECK(offsetof(hipObjRailStats_t, portUp) == 112);
    CHECK(sizeof(hipObjRailStats_t) == 120);
}

static void before_init(void) {
    hipObjRailStats_t stats[2], before[2];
    size_t count = 77;
    memset(stats, 0x5a, sizeof stats);
    memcpy(before, stats, sizeof stats);
    CHECK(is_err(hipObjRailStats(stats, 2, &count), hipObjNotInitialized));
    CHECK(is_err(hipObjRailStats(NULL, 2, NULL), hipObjNotInitialized));
    CHECK(is_err(hipObjRailStats(NULL, 0, &count), hipObjNotInitialized));
    CHECK(count == 77);
    CHECK(memcmp(stats, before, sizeof stats) == 0);
}

int main(void) {
    layout();
    before_init();
    return report("api_rails_test");
}
