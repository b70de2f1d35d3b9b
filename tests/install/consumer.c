/* A program as a user of the installed library writes it: built only from what `make install`
 * puts in PREFIX (pkg-config --cflags --libs hipobj, or CMake's find_package(hipobj)).
 *   consumer NIC EXPECTED_IP
 * Opens NIC through hipObjInit, asks hipobj_v2.h which NIC it uses, registers a host buffer, takes an application-driven token for
 * it and checks that the token names NIC's IPv4 address (hipObjTokenClientNic), then releases
 * everything. Prints one line per step and "consumer: N passed, M failed". */
#include <hipobj.h>
#include <hipobj_v2.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;

static void check(int ok, const char *what, const char *detail) {
    if (ok) passed++; else failed++;
    printf("%s: %s%s%s\n", ok ? "ok" : "FAIL", what, detail ? ": " : "", detail ? detail : "");
}

static int succeeded(hipObjError_t e, const char *what) {
    check(e.opError == hipObjSuccess, what, hipObjGetErrorString(e.opError));
    return e.opError == hipObjSuccess;
}

int main(int argc, char **argv) {
    hipObjConfig_t cfg;
    unsigned major = 0, minor = 0, patch = 0;
    char version[32], ip[64] = "", *token = NULL;
    size_t size = 1 << 20;
    unsigned char *buf;
    if (argc != 3) {
        fprintf(stderr, "usage: %s NIC EXPECTED_IP\n", argv[0]);
        return 2;
    }
    hipObjGetVersion(&major, &minor, &patch);
    snprintf(version, sizeof version, "%u.%u.%u", major, minor, patch);
    check(strcmp(version, hipObjGetVersionString()) == 0, "library version", version);
    check(major == HIPOBJ_VERSION_MAJOR, "header and library major version agree", NULL);

    memset(&cfg, 0, sizeof cfg);
    cfg.gpuDevice = -1;
    cfg.nicHint = argv[1];
    if (!succeeded(hipObjInit(&cfg), "hipObjInit")) goto out;
    {   /* the hipobj-rc-v2 extension header is installed and its functions link */
        char *nic = hipObjNicV2();
        check(nic && strcmp(nic, argv[1]) == 0, "hipObjNicV2 names the NIC", nic);
        hipObjFreeNicV2(nic);
        check(hipObjSelectedPortV2() >= 1 && hipObjSelectedGidIndexV2() >= 0, "hipObjSelectedPortV2/GidIndexV2", NULL);
    }
    buf = calloc(1, size);
    if (succeeded(hipObjBufRegisterHost(buf, size), "hipObjBufRegisterHost 1 MiB")) {
        if (succeeded(hipObjGetRdmaToken(buf, size, HIPOBJ_RDMA_OP_GET, &token), "hipObjGetRdmaToken")) {
            check(strlen(token) == 88, "token is 88 hex digits", NULL);
            succeeded(hipObjTokenClientNic(token, ip, sizeof ip), "hipObjTokenClientNic");
            check(strcmp(ip, argv[2]) == 0, "token names the NIC's address", ip);
            succeeded(hipObjPutRdmaToken(token), "hipObjPutRdmaToken");
        }
        succeeded(hipObjBufDeregister(buf), "hipObjBufDeregister");
    }
    free(buf);
    succeeded(hipObjShutdown(), "hipObjShutdown");
out:
    printf("consumer: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
