/* The end-to-end check's extension header (include/hipobj_checksum.h) as a C11 or C++11 program
 * sees it (compiled as both, -Wall -Wextra -Werror -pedantic): the status values, a verified
 * object, a changed byte (a mismatch naming CRC64NVME and both values), no checksum to check
 * against, a message cut to its buffer, and the argument checks. Needs no hipObjInit(). Prints
 * "N passed, M failed"; the exit status is non-zero when anything failed. */

#include "hipobj_checksum.h"
#include "hipobj_checksum.h" /* #pragma once */

#include <stdio.h>
#include <string.h>

#include "check.h"




/* "123456789" is the CRCs' check input; its CRC64NVME, as S3 writes it, is rosUhgp5mIg=. */
static const char object[] = "123456789";
static const char *names[] = {"Content-Length", "X-Amz-Checksum-CRC64NVME", "x-amz-checksum-type"};
static const char *values[] = {"9", "rosUhgp5mIg=", "FULL_OBJECT"};

static void statuses(void) {
    CHECK(HIPOBJ_CHECKSUM_VERIFIED == 0);
    CHECK(HIPOBJ_CHECKSUM_MISMATCH == 1);
    CHECK(HIPOBJ_CHECKSUM_UNCHECKED == 2);
}

static void verified_and_mismatch(void) {
    hipObjChecksumStatus_t status = -1;
    char message[256], changed[9], short_message[8];
    CHECK(is_err(hipObjChecksumCheck(object, 9, names, values, 3, &status, message, sizeof message), hipObjSuccess));
    CHECK(status == HIPOBJ_CHECKSUM_VERIFIED);
    CHECK(strcmp(message, "CRC64NVME verified") == 0);
    memcpy(changed, object, 9);
    changed[4] ^= 1;
    CHECK(is_err(hipObjChecksumCheck(changed, 9, names, values, 3, &status, message, sizeof message), hipObjSuccess));
    CHECK(status == HIPOBJ_CHECKSUM_MISMATCH);
    CHECK(strstr(message, "CRC64NVME") != NULL && strstr(message, "rosUhgp5mIg=") != NULL);
    CHECK(is_err(hipObjChecksumCheck(changed, 9, names, values, 3, &status, short_message, sizeof short_message),
                 hipObjSuccess));
    CHECK(strlen(short_message) == 7 && strncmp(short_message, message, 7) == 0);
    CHECK(is_err(hipObjChecksumCheck(changed, 9, names, values, 3, &status, NULL, 0), hipObjSuccess));
    CHECK(status == HIPOBJ_CHECKSUM_MISMATCH);
}

static void unchecked(void) {
    hipObjChecksumStatus_t status = -1;
    char message[128];
    CHECK(is_err(hipObjChecksumCheck(object, 9, names, values, 1, &status, message, sizeof message), hipObjSuccess));
    CHECK(status == HIPOBJ_CHECKSUM_UNCHECKED);
    CHECK(strstr(message, "no checksum") != NULL);
    CHECK(is_err(hipObjChecksumCheck(object, 9, NULL, NULL, 0, &status, message, sizeof message), hipObjSuccess));
    CHECK(status == HIPOBJ_CHECKSUM_UNCHECKED);
}

static void invalid_arguments(void) {
    hipObjChecksumStatus_t status = -1;
    char message[16] = "untouched";
    const char *null_value[] = {NULL};
    CHECK(is_err(hipObjChecksumCheck(NULL, 9, names, values, 3, &status, message, sizeof message), hipObjInvalidValue));
    CHECK(is_err(hipObjChecksumCheck(object, 9, NULL, values, 3, &status, message, sizeof message), hipObjInvalidValue));
    CHECK(is_err(hipObjChecksumCheck(object, 9, names, null_value, 1, &status, message, sizeof message),
                 hipObjInvalidValue));
    CHECK(is_err(hipObjChecksumCheck(object, 9, names, values, 3, NULL, message, sizeof message), hipObjInvalidValue));
    CHECK(is_err(hipObjChecksumCheck(object, 9, names, values, 3, &status, NULL, 16), hipObjInvalidValue));
    CHECK(status == -1 && strcmp(message, "untouched") == 0);
}

/* Revision 6: the token reply's x-amz-rdma-checksum, as the application's callback kept it;
 * any stored algorithm, a COMPOSITE value unchecked, and it wins over x-amz-checksum-*. */
static void rdma_checksum(void) {
    const char *sha256 = "SHA256 FeKw08M4keuw8e9gnsQZQgwg4yDOlMZfvIwzEkSOsiU=";
    const char *stale_names[] = {"x-amz-checksum-crc32", "X-Amz-Rdma-Checksum"};
    const char *stale_values[] = {"AAAAAA==", "CRC64NVME rosUhgp5mIg="};
    hipObjChecksumStatus_t status = -1;
    char message[160];
    CHECK(is_err(hipObjRdmaChecksumCheck(object, 9, "CRC64NVME rosUhgp5mIg=", &status, message, sizeof message),
                 hipObjSuccess));
    CHECK(status == HIPOBJ_CHECKSUM_VERIFIED && strcmp(message, "CRC64NVME verified") == 0);
    CHECK(is_err(hipObjRdmaChecksumCheck(object, 9, sha256, &status, message, sizeof message), hipObjSuccess));
    CHECK(status == HIPOBJ_CHECKSUM_VERIFIED && strcmp(message, "SHA256 verified") == 0);
    CHECK(is_err(hipObjRdmaChecksumCheck("123456780", 9, sha256, &status, message, sizeof message), hipObjSuccess));
    CHECK(status == HIPOBJ_CHECKSUM_MISMATCH && strstr(message, "SHA256 mismatch") != NULL);
    CHECK(is_err(hipObjRdmaChecksumCheck(object, 9, "CRC32C 4waSgw==-3 COMPOSITE", &status, message, sizeof message),
                 hipObjSuccess));
    CHECK(status == HIPOBJ_CHECKSUM_UNCHECKED && strstr(message, "COMPOSITE") != NULL);
    CHECK(is_err(hipObjChecksumCheck(object, 9, stale_names, stale_values, 2, &status, message, sizeof message),
                 hipObjSuccess));
    CHECK(status == HIPOBJ_CHECKSUM_VERIFIED);
    status = -1;
    strcpy(message, "untouched");
    CHECK(is_err(hipObjRdmaChecksumCheck(object, 9, NULL, &status, message, sizeof message), hipObjInvalidValue));
    CHECK(status == -1 && strcmp(message, "untouched") == 0);
}

int main(void) {
    statuses();
    verified_and_mismatch();
    unchecked();
    invalid_arguments();
    rdma_checksum();
    return report("api_checksum_test");
}
