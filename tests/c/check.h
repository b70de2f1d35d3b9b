/* The C API tests' one harness (tests/c/api_test.c, api_v2_test.c, api_checksum_test.c): CHECK
 * counts a condition as passed or failed and prints the failed one with its line; is_err says
 * whether a call failed with exactly that code; report prints "<test> (C|C++): N passed, M failed"
 * and gives the exit status. */
#ifndef HIPOBJ_TESTS_C_CHECK_H
#define HIPOBJ_TESTS_C_CHECK_H

#include <stdio.h>

#include "hipobj.h"

static int passed, failed;

static void check(int ok, const char *what, int line) {
    if (ok) {
        passed++;
    } else {
        failed++;
        printf("FAIL (line %d): %s\n", line, what);
    }
}
#define CHECK(cond) check((cond) ? 1 : 0, #cond, __LINE__)

static int is_err(hipObjError_t e, hipObjOpError_t code) { return e.opError == code && e.hipError == 0; }

/* Print "<test> (C|C++): N passed, M failed" (tests/c/run reads it); the exit status. */
static int report(const char *test) {
    printf("%s (%s): %d passed, %d failed\n", test,
#ifdef __cplusplus
           "C++",
#else
           "C",
#endif
           passed, failed);
    return failed ? 1 : 0;
}

#endif
