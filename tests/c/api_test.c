/* The C API as a C11 or C++11 program sees it (this file is compiled as both, with
 * -Wall -Wextra -Werror -pedantic): type layouts, enum and macro values, the functions that
 * need no initialisation, the not-initialised answers of the others, and hipObjInit's checks on
 * invalid configs. No call here initialises hipObject. Prints "N passed, M failed"; the exit
 * status is non-zero when anything failed. */

#include "hipobj.h"
#include "hipobj.h" /* #pragma once: a second include is harmless */

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

#ifdef __cplusplus
#define HO_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#define HO_LANG "C++"
#else
#define HO_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#define HO_LANG "C"
#endif

/* ---- layouts, at compile time (LP64 Linux) ---- */
HO_STATIC_ASSERT(sizeof(hipObjOpError_t) == sizeof(int), "enum is int-sized");
HO_STATIC_ASSERT(sizeof(hipObjError_t) == 8, "hipObjError_t size");
HO_STATIC_ASSERT(offsetof(hipObjError_t, opError) == 0, "opError offset");
HO_STATIC_ASSERT(offsetof(hipObjError_t, hipError) == 4, "hipError offset");
HO_STATIC_ASSERT(sizeof(hipObjOps_t) == 16, "hipObjOps_t size");
HO_STATIC_ASSERT(offsetof(hipObjOps_t, sendRequest) == 0, "sendRequest offset");
HO_STATIC_ASSERT(offsetof(hipObjOps_t, recvReply) == 8, "recvReply offset");
HO_STATIC_ASSERT(sizeof(hipObjConfig_t) == 48, "hipObjConfig_t size");
HO_STATIC_ASSERT(offsetof(hipObjConfig_t, endpoint) == 0, "endpoint offset");
HO_STATIC_ASSERT(offsetof(hipObjConfig_t, region) == 8, "region offset");
HO_STATIC_ASSERT(offsetof(hipObjConfig_t, accessKey) == 16, "accessKey offset");
HO_STATIC_ASSERT(offsetof(hipObjConfig_t, secretKey) == 24, "secretKey offset");
HO_STATIC_ASSERT(offsetof(hipObjConfig_t, flags) == 32, "flags offset");
HO_STATIC_ASSERT(offsetof(hipObjConfig_t, gpuDevice) == 36, "gpuDevice offset");
HO_STATIC_ASSERT(offsetof(hipObjConfig_t, nicHint) == 40, "nicHint offset");
HO_STATIC_ASSERT(sizeof(hipObjHandle_t) == sizeof(void *), "handle size");
HO_STATIC_ASSERT(sizeof(off_t) == 8, "64-bit off_t");
HO_STATIC_ASSERT(hipObjBusy == 12, "hipObjBusy value");


#define CHECK_ERR(call, code) CHECK(is_err((call), (code)))


#ifdef __cplusplus
extern "C" {
#endif
static int send_calls, recv_calls;
static int counting_send(void *ctx, const char *token, size_t tokenLen) {
    (void)ctx;
    (void)token;
    (void)tokenLen;
    send_calls++;
    return 0;
}
static int counting_recv(void *ctx, char *reply, size_t *replyLen) {
    (void)ctx;
    recv_calls++;
    if (*replyLen >= 3) {
        memcpy(reply, "200", 3);
        *replyLen = 3;
    }
    return 0;
}
#ifdef __cplusplus
}
#endif

/* docs/protocol.md section 2's worked example: RC, GID ::ffff:192.168.100.200. */
static const char TOKEN[] =
    "015500000000000000000000000000ffffc0a864c83412000000100000007f00000010000000000000010000";

static void layouts_at_run_time(void) {
    printf("%s: sizeof hipObjError_t=%u opError@%u hipError@%u\n", HO_LANG, (unsigned)sizeof(hipObjError_t),
           (unsigned)offsetof(hipObjError_t, opError), (unsigned)offsetof(hipObjError_t, hipError));
    printf("%s: sizeof hipObjOps_t=%u sendRequest@%u recvReply@%u\n", HO_LANG, (unsigned)sizeof(hipObjOps_t),
           (unsigned)offsetof(hipObjOps_t, sendRequest), (unsigned)offsetof(hipObjOps_t, recvReply));
    printf("%s: sizeof hipObjConfig_t=%u flags@%u gpuDevice@%u nicHint@%u\n", HO_LANG,
           (unsigned)sizeof(hipObjConfig_t), (unsigned)offsetof(hipObjConfig_t, flags),
           (unsigned)offsetof(hipObjConfig_t, gpuDevice), (unsigned)offsetof(hipObjConfig_t, nicHint));
    CHECK(sizeof(hipObjError_t) == 8);
    CHECK(sizeof(hipObjOps_t) == 2 * sizeof(void *));
    CHECK(sizeof(hipObjConfig_t) == 48);
}

static void enum_and_macro_values(void) {
    const int values[] = {hipObjSuccess,          hipObjInvalidValue,     hipObjNotInitialized,
                          hipObjAlreadyInitialized, hipObjRdmaError,      hipObjS3Error,
                          hipObjBufNotRegistered, hipObjBufAlreadyRegistered, hipObjNicNotFound,
                          hipObjDmabufNotSupported, hipObjSizeTooLarge,   hipObjInternalError,
                          hipObjBusy};
    int i;
    for (i = 0; i < 13; i++) CHECK(values[i] == i);
    CHECK(HIPOBJ_BASE_ERR == 6000);
    CHECK(HIPOBJ_RDMA_OP_PUT == 0);
    CHECK(HIPOBJ_RDMA_OP_GET == 1);
    CHECK(HIPOBJ_RDMA_REPLY_NOT_IMPLEMENTED == 501);
    CHECK(HIPOBJ_SYNC_TO_HOST == 0);
    CHECK(HIPOBJ_SYNC_TO_DEVICE == 1);
    CHECK(HIPOBJ_VERSION_MAJOR == 0 && HIPOBJ_VERSION_MINOR == 1 && HIPOBJ_VERSION_PATCH == 0);
}

static void version_functions(void) {
    unsigned major = 99, minor = 99, patch = 99;
    char expect[64];
    const char *v = hipObjGetVersionString();
    CHECK(v != NULL);
    snprintf(expect, sizeof expect, "%d.%d.%d", HIPOBJ_VERSION_MAJOR, HIPOBJ_VERSION_MINOR, HIPOBJ_VERSION_PATCH);
    CHECK(v != NULL && strcmp(v, expect) == 0);
    CHECK(v == hipObjGetVersionString());
    CHECK_ERR(hipObjGetVersion(&major, &minor, &patch), hipObjSuccess);
    CHECK(major == HIPOBJ_VERSION_MAJOR && minor == HIPOBJ_VERSION_MINOR && patch == HIPOBJ_VERSION_PATCH);
    major = minor = patch = 99;
    CHECK_ERR(hipObjGetVersion(NULL, &minor, NULL), hipObjSuccess);
    CHECK(major == 99 && minor == HIPOBJ_VERSION_MINOR && patch == 99);
    CHECK_ERR(hipObjGetVersion(NULL, NULL, NULL), hipObjSuccess);
}

static void error_strings(void) {
    const char *s[13];
    int i, j;
    for (i = 0; i < 13; i++) {
        s[i] = hipObjGetErrorString((hipObjOpError_t)i);
        CHECK(s[i] != NULL && s[i][0] != '\0' && strcmp(s[i], "Unknown error") != 0);
    }
    for (i = 0; i < 13; i++)
        for (j = i + 1; j < 13; j++) CHECK(s[i] && s[j] && strcmp(s[i], s[j]) != 0);
    CHECK(strcmp(s[0], "Success") == 0);
    CHECK(strstr(s[12], "busy") != NULL || strstr(s[12], "Busy") != NULL);
    CHECK(strcmp(hipObjGetErrorString((hipObjOpError_t)14), "Unknown error") == 0); /* 13: hipobj_v2.h */
    CHECK(strcmp(hipObjGetErrorString((hipObjOpError_t)15), "Unknown error") == 0);
#ifndef __cplusplus
    /* Any int may reach the function from C. */
    CHECK(strcmp(hipObjGetErrorString((hipObjOpError_t)-1), "Unknown error") == 0);
    CHECK(strcmp(hipObjGetErrorString((hipObjOpError_t)6000), "Unknown error") == 0);
#endif
}

static int parse(const char *reply, size_t len, int *code) {
    *code = -777;
    return (int)hipObjParseRdmaReply(reply, len, code).opError;
}

static void reply_parsing(void) {
    struct { const char *in; size_t len; int code; } good[] = {
        {"ok", 2, 200},   {"ok\n", 3, 200},     {"err", 3, -1},       {"200", 3, 200},
        {"204", 3, 204},  {"206", 3, 206},      {"404", 3, 404},      {"501", 3, 501},
        {"100", 3, 100},  {"599", 3, 599},      {"428", 3, 428},      {"200\r\n", 5, 200},
        {"200\0\0", 5, 200}, {"2004", 3, 200},
    };
    const char *bad[] = {"",     "\r\n", "ok ", " 200", "200 ", "okay", "OK",  "error", "abc", "20",
                         "2000", "0200", "+200", "-200", "2x0", "099",  "600", "999",   "200\r\n200"};
    char buf[128];
    int code;
    size_t i;
    for (i = 0; i < sizeof good / sizeof good[0]; i++) {
        CHECK(parse(good[i].in, good[i].len, &code) == hipObjSuccess && code == good[i].code);
    }
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(parse(bad[i], strlen(bad[i]), &code) == hipObjInvalidValue && code == -777);
    }
    CHECK(parse("2\0 00", 5, &code) == hipObjInvalidValue && code == -777);
    snprintf(buf, sizeof buf, "200:%s", TOKEN);
    CHECK(parse(buf, strlen(buf), &code) == hipObjSuccess && code == 200);
    snprintf(buf, sizeof buf, "428:%s", TOKEN);
    CHECK(parse(buf, strlen(buf), &code) == hipObjSuccess && code == 428);
    snprintf(buf, sizeof buf, "206:%s", TOKEN);
    CHECK(parse(buf, strlen(buf), &code) == hipObjInvalidValue && code == -777);
    snprintf(buf, sizeof buf, "200:%s:1:2", TOKEN);
    CHECK(parse(buf, strlen(buf), &code) == hipObjInvalidValue && code == -777);
    snprintf(buf, sizeof buf, "200:02%s", TOKEN + 2);
    CHECK(parse(buf, strlen(buf), &code) == hipObjInvalidValue && code == -777);
    snprintf(buf, sizeof buf, "200:%.87s", TOKEN);
    CHECK(parse(buf, strlen(buf), &code) == hipObjInvalidValue && code == -777);
    /* NULL arguments. */
    code = -777;
    CHECK_ERR(hipObjParseRdmaReply(NULL, 3, &code), hipObjInvalidValue);
    CHECK_ERR(hipObjParseRdmaReply("200", 3, NULL), hipObjInvalidValue);
    CHECK(code == -777);
}

static void token_client_nic(void) {
    char ip[32];
    char tok[128];
    memset(ip, 'Z', sizeof ip);
    CHECK_ERR(hipObjTokenClientNic(TOKEN, ip, 16), hipObjSuccess);
    CHECK(strcmp(ip, "192.168.100.200") == 0 && ip[16] == 'Z');
    memset(ip, 'Z', sizeof ip);
    CHECK_ERR(hipObjTokenClientNic(TOKEN, ip, 15), hipObjInvalidValue);
    CHECK(ip[0] == '\0' && ip[1] == 'Z');
    memset(ip, 'Z', sizeof ip);
    CHECK_ERR(hipObjTokenClientNic(TOKEN, ip, 0), hipObjInvalidValue);
    CHECK(ip[0] == 'Z');
    CHECK_ERR(hipObjTokenClientNic(NULL, ip, sizeof ip), hipObjInvalidValue);
    CHECK(ip[0] == 'Z');
    CHECK_ERR(hipObjTokenClientNic(TOKEN, NULL, 16), hipObjInvalidValue);
    /* A link-local GID: success with "". */
    snprintf(tok, sizeof tok, "%.10sfe80000000000000000000000000000a%s", TOKEN, TOKEN + 42);
    memset(ip, 'Z', sizeof ip);
    CHECK_ERR(hipObjTokenClientNic(tok, ip, sizeof ip), hipObjSuccess);
    CHECK(ip[0] == '\0');
    /* 0xffff at bytes 10-11 but a non-zero byte 0: not IPv4-mapped. */
    snprintf(tok, sizeof tok, "%.10s01000000000000000000ffffc0a864c8%s", TOKEN, TOKEN + 42);
    memset(ip, 'Z', sizeof ip);
    CHECK_ERR(hipObjTokenClientNic(tok, ip, sizeof ip), hipObjSuccess);
    CHECK(ip[0] == '\0');
    /* Malformed tokens: "" and hipObjInvalidValue. */
    snprintf(tok, sizeof tok, "%s:00007f0000001000:0000000000001000", TOKEN);
    memset(ip, 'Z', sizeof ip);
    CHECK_ERR(hipObjTokenClientNic(tok, ip, sizeof ip), hipObjInvalidValue);
    CHECK(ip[0] == '\0');
    snprintf(tok, sizeof tok, "%.87s", TOKEN);
    memset(ip, 'Z', sizeof ip);
    CHECK_ERR(hipObjTokenClientNic(tok, ip, sizeof ip), hipObjInvalidValue);
    CHECK(ip[0] == '\0');
    snprintf(tok, sizeof tok, "ff%s", TOKEN + 2);
    CHECK_ERR(hipObjTokenClientNic(tok, ip, sizeof ip), hipObjInvalidValue);
}

static void not_initialized(void) {
    char buf[64];
    char *out = (char *)&buf[1];
    hipObjOps_t ops;
    ops.sendRequest = counting_send;
    ops.recvReply = counting_recv;
    memset(buf, 0, sizeof buf);
    CHECK_ERR(hipObjShutdown(), hipObjSuccess);
    CHECK_ERR(hipObjBufRegister(buf, sizeof buf), hipObjNotInitialized);
    CHECK_ERR(hipObjBufRegister(NULL, 0), hipObjNotInitialized);
    CHECK_ERR(hipObjBufRegisterHost(buf, sizeof buf), hipObjNotInitialized);
    CHECK_ERR(hipObjBufRegisterHost(NULL, 0), hipObjNotInitialized);
    CHECK_ERR(hipObjBufDeregister(buf), hipObjNotInitialized);
    CHECK_ERR(hipObjBufDeregister(NULL), hipObjNotInitialized);
    CHECK_ERR(hipObjGet(NULL, buf, sizeof buf, 0, &ops, NULL), hipObjNotInitialized);
    CHECK_ERR(hipObjPut(NULL, buf, sizeof buf, 0, &ops, NULL), hipObjNotInitialized);
    CHECK_ERR(hipObjGet(NULL, NULL, 0, -1, NULL, NULL), hipObjNotInitialized);
    CHECK_ERR(hipObjPut(NULL, NULL, 0, -1, NULL, NULL), hipObjNotInitialized);
    CHECK(send_calls == 0 && recv_calls == 0);
    CHECK_ERR(hipObjBufSync(buf, sizeof buf, 0, HIPOBJ_SYNC_TO_HOST), hipObjNotInitialized);
    CHECK_ERR(hipObjBufSync(buf, sizeof buf, 0, 7), hipObjNotInitialized);
    CHECK_ERR(hipObjGetRdmaToken(buf, sizeof buf, HIPOBJ_RDMA_OP_GET, &out), hipObjNotInitialized);
    CHECK(out == (char *)&buf[1]);
    CHECK_ERR(hipObjGetRdmaToken(buf, sizeof buf, 5, NULL), hipObjNotInitialized);
    CHECK_ERR(hipObjPutRdmaToken(NULL), hipObjInvalidValue);
}

static void init_rejects_invalid_configs(void) {
    hipObjConfig_t cfg;
    char out_sentinel = 'S';
    char *out = &out_sentinel;
    CHECK_ERR(hipObjInit(NULL), hipObjInvalidValue);
    memset(&cfg, 0, sizeof cfg);
    cfg.flags = 1;
    CHECK_ERR(hipObjInit(&cfg), hipObjInvalidValue);
    cfg.flags = 0x80000000u;
    cfg.gpuDevice = -1;
    cfg.nicHint = "rxe0";
    CHECK_ERR(hipObjInit(&cfg), hipObjInvalidValue);
    memset(&cfg, 0, sizeof cfg);
    cfg.gpuDevice = -2;
    CHECK_ERR(hipObjInit(&cfg), hipObjInvalidValue);
    cfg.gpuDevice = -2147483647 - 1;
    cfg.endpoint = "http://ignored";
    CHECK_ERR(hipObjInit(&cfg), hipObjInvalidValue);
    /* None of them initialised the library. */
    CHECK_ERR(hipObjGetRdmaToken(&out_sentinel, 1, 0, &out), hipObjNotInitialized);
    CHECK(out == &out_sentinel);
}

int main(void) {
    layouts_at_run_time();
    enum_and_macro_values();
    version_functions();
    error_strings();
    reply_parsing();
    token_client_nic();
    not_initialized();
    init_rejects_invalid_configs();
    return report("API test");
}
