/* put-get-threads: a soak test of an application's own: several threads, each storing an object
 * over RDMA and reading it back, byte-compared, until standard input closes; then what each RDMA
 * device carried (include/hipobj_rails.h).
 *
 *   put-get-threads [-e ENDPOINT] [-n NIC] [-r REGION] [-a ACCESS_KEY -s SECRET_KEY] [-c CA_BUNDLE]
 *                   BUCKET KEY_PREFIX THREADS OBJECT_BYTES  < (a pipe or terminal; EOF stops it)
 *
 * Thread i owns object KEY_PREFIX-i and slice i of one registered buffer. A round fills the slice
 * with a pattern of its own, PUTs it, clears the slice, GETs the object back and compares. A
 * failed transfer is counted and reported, never retried: with several devices (HIPOBJ_NICS beside
 * NIC, docs/rails.md) the library itself moves a transfer whose device fails to another, and that
 * is what this program shows. At the end it prints one line per device and
 *   put-get-threads: R rounds of PUT and GET by N threads, F failed
 * and exits 1 when anything failed. Options as for get-object. */
#include "s3_curl.h"

#include <hipobj.h>
#include <hipobj_rails.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_THREADS 64
#define MAX_RAILS 16

struct worker {
    struct s3_target target; /* the program's, with this thread's key */
    char key[256];
    unsigned char *slice; /* registered: the buffer + index * size */
    unsigned char *want;  /* the round's pattern, unregistered */
    size_t offset, size;
    int index;
    long rounds, failures;
};

static atomic_int stop;

/* The bytes of round `round` of worker `index`: xorshift64 from a seed of both. */
static void pattern(unsigned char *out, size_t len, int index, long round) {
    uint64_t x = 0x9e3779b97f4a7c15ull ^ ((uint64_t)index << 32) ^ (uint64_t)round;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[i] = (unsigned char)x;
    }
}

/* One PUT or GET of the worker's slice; 0, or -1 after printing why. */
static int transfer(struct worker *w, unsigned char *base, const char *method) {
    struct s3_request req = {.target = &w->target, .method = method};
    hipObjOps_t ops = {s3_send_request, s3_recv_reply};
    hipObjError_t e = method[0] == 'P' ? hipObjPut(NULL, base, w->size, (off_t)w->offset, &ops, &req)
                                       : hipObjGet(NULL, base, w->size, (off_t)w->offset, &ops, &req);
    if (e.opError == hipObjSuccess) return 0;
    fprintf(stderr, "%s s3://%s/%s round %ld: %s (HTTP %ld, reply '%.*s')\n", method, w->target.bucket, w->key,
            w->rounds, hipObjGetErrorString(e.opError), req.http_status, (int)req.reply_len, req.reply);
    return -1;
}

static unsigned char *buffer; /* every worker's slice, registered once */

static void *work(void *arg) {
    struct worker *w = arg;
    while (!atomic_load(&stop)) {
        pattern(w->want, w->size, w->index, w->rounds);
        memcpy(w->slice, w->want, w->size);
        int failed = transfer(w, buffer, "PUT");
        if (!failed) {
            memset(w->slice, 0, w->size);
            failed = transfer(w, buffer, "GET");
            if (!failed && memcmp(w->slice, w->want, w->size) != 0) {
                fprintf(stderr, "GET s3://%s/%s round %ld: the bytes differ from those PUT\n", w->target.bucket,
                        w->key, w->rounds);
                failed = 1;
            }
        }
        w->failures += failed != 0;
        w->rounds++;
    }
    return NULL;
}

/* One line per device: what it carried, its failovers, its port. */
static void print_rails(void) {
    hipObjRailStats_t rails[MAX_RAILS];
    size_t count = 0;
    hipObjError_t e = hipObjRailStats(rails, MAX_RAILS, &count);
    if (e.opError != hipObjSuccess) {
        fprintf(stderr, "hipObjRailStats: %s\n", hipObjGetErrorString(e.opError));
        return;
    }
    for (size_t i = 0; i < count && i < MAX_RAILS; i++) {
        const hipObjRailStats_t *r = &rails[i];
        printf("rail %s transfers=%llu bytes=%llu failovers=%llu port_downs=%llu port_ups=%llu failbacks=%llu "
               "port_up=%d\n",
               r->device, (unsigned long long)r->transfers, (unsigned long long)r->bytes,
               (unsigned long long)r->failovers, (unsigned long long)r->portDowns, (unsigned long long)r->portUps,
               (unsigned long long)r->failbacks, r->portUp);
    }
}

int main(int argc, char **argv) {
    struct s3_target target = {0};
    static struct worker workers[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    int arg = s3_parse_args(argc, argv, &target), threads, started = 0;
    long rounds = 0, failures = 0;
    size_t size;
    if (arg < 0 || argc - arg != 4) {
        fprintf(stderr, "usage: put-get-threads [-e ENDPOINT] [-n NIC] [-r REGION] [-a ACCESS_KEY -s SECRET_KEY] "
                        "[-c CA_BUNDLE] BUCKET KEY_PREFIX THREADS OBJECT_BYTES\n");
        return 2;
    }
    target.bucket = argv[arg];
    threads = atoi(argv[arg + 2]);
    size = strtoull(argv[arg + 3], NULL, 10);
    if (threads < 1 || threads > MAX_THREADS || size == 0 || size > (SIZE_MAX / MAX_THREADS)) {
        fprintf(stderr, "THREADS must be 1..%d and OBJECT_BYTES at least 1\n", MAX_THREADS);
        return 2;
    }
    buffer = malloc(size * (size_t)threads);
    if (!buffer) return 1;
    if (s3_host_session_open(&target, buffer, size * (size_t)threads) != 0) {
        free(buffer);
        return 1;
    }
    for (int i = 0; i < threads; i++) {
        struct worker *w = &workers[i];
        *w = (struct worker){.target = target, .offset = size * (size_t)i, .size = size, .index = i};
        snprintf(w->key, sizeof w->key, "%s-%d", argv[arg + 1], i);
        w->target.key = w->key;
        w->slice = buffer + w->offset;
        w->want = malloc(size);
        if (!w->want || pthread_create(&tids[i], NULL, work, w) != 0) {
            fprintf(stderr, "cannot start thread %d\n", i);
            free(w->want);
            failures++;
            break;
        }
        started++;
    }
    /* until standard input closes (or now, if a thread could not start) */
    while (!failures && getchar() != EOF) {
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < started; i++) {
        pthread_join(tids[i], NULL);
        rounds += workers[i].rounds;
        failures += workers[i].failures;
        free(workers[i].want);
    }
    print_rails();
    printf("put-get-threads: %ld rounds of PUT and GET by %d threads, %ld failed\n", rounds, started, failures);
    s3_host_session_close(buffer);
    free(buffer);
    return failures ? 1 : 0;
}
