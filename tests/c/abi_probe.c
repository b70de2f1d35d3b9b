/* Prints every ABI-relevant number of the hipobj.h found on the include path: type sizes and
 * alignments, field offsets, enum values and macro values. tests/c/run compiles it against our
 * include/hipobj.h and against the spec header and requires identical output. */

#include "hipobj.h"

#include <stddef.h>
#include <stdio.h>

#define SIZE(T) printf("sizeof(" #T ")=%u alignof=%u\n", (unsigned)sizeof(T), (unsigned)_Alignof(T))
#define OFF(T, f) printf("offsetof(" #T "," #f ")=%u size=%u\n", (unsigned)offsetof(T, f), (unsigned)sizeof(((T *)0)->f))
#define VAL(x) printf(#x "=%ld\n", (long)(x))
#define STR_(x) #x
#define STR(x) STR_(x)
#define TEXT(x) printf(#x " -> \"%s\"\n", STR(x))

int main(void) {
    SIZE(hipObjOpError_t);
    SIZE(hipObjError_t);
    SIZE(hipObjOps_t);
    SIZE(hipObjConfig_t);
    SIZE(hipObjHandle_t);
    OFF(hipObjError_t, opError);
    OFF(hipObjError_t, hipError);
    OFF(hipObjOps_t, sendRequest);
    OFF(hipObjOps_t, recvReply);
    OFF(hipObjConfig_t, endpoint);
    OFF(hipObjConfig_t, region);
    OFF(hipObjConfig_t, accessKey);
    OFF(hipObjConfig_t, secretKey);
    OFF(hipObjConfig_t, flags);
    OFF(hipObjConfig_t, gpuDevice);
    OFF(hipObjConfig_t, nicHint);
    VAL(hipObjSuccess);
    VAL(hipObjInvalidValue);
    VAL(hipObjNotInitialized);
    VAL(hipObjAlreadyInitialized);
    VAL(hipObjRdmaError);
    VAL(hipObjS3Error);
    VAL(hipObjBufNotRegistered);
    VAL(hipObjBufAlreadyRegistered);
    VAL(hipObjNicNotFound);
    VAL(hipObjDmabufNotSupported);
    VAL(hipObjSizeTooLarge);
    VAL(hipObjInternalError);
    VAL(hipObjBusy);
    VAL(HIPOBJ_VERSION_MAJOR);
    VAL(HIPOBJ_VERSION_MINOR);
    VAL(HIPOBJ_VERSION_PATCH);
    VAL(HIPOBJ_BASE_ERR);
    VAL(HIPOBJ_RDMA_OP_PUT);
    VAL(HIPOBJ_RDMA_OP_GET);
    VAL(HIPOBJ_RDMA_REPLY_NOT_IMPLEMENTED);
    VAL(HIPOBJ_SYNC_TO_HOST);
    VAL(HIPOBJ_SYNC_TO_DEVICE);
    TEXT(HIPOBJ_API);
    return 0;
}
