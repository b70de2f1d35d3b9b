/* parallel-get: read a large S3 object into one registered host buffer with several threads, each
 * moving ranges of it over RDMA at once (the shape of a checkpoint loader), and save it.
 *
 *   parallel-get [-e ENDPOINT] [-n NIC] [-r REGION] [-a ACCESS_KEY -s SECRET_KEY] [-c CA_BUNDLE]
 *                [-t THREADS] [-p PART_BYTES] BUCKET KEY SIZE FILE
 *
 * The buffer is registered once; thread i takes parts i, i + THREADS, ... and each part is one
 * hipObjGet() at its own offset of the buffer with a `Range` request. hipObject runs the transfers
 * on connections of their own (HIPOBJ_MAX_TRANSFERS, default 16), so THREADS up to that many move
 * at once. A part that fails is tried again (3 attempts in all, as the AWS SDKs' standard mode);
 * every attempt asks for a fresh token. Registrations stop at 4 GiB: a larger object takes one
 * registration per 4 GiB. Options as for get-object, plus -t (default 4) and -p (default 8 MiB). */
#include "s3_curl.h"

#include <hipobj.h>

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ATTEMPTS 3

struct job {
    const struct s3_target *target;
    unsigned char *buf;
    size_t size, part;
    int index, threads;
    int requests, retries, failed;
};

/* One part: [first, first + len) of the object into the same bytes of the buffer. */
static int get_part(struct job *j, size_t first, size_t len) {
    char range[96];
    hipObjError_t e = {0};
    snprintf(range, sizeof range, "bytes=%zu-%zu", first, first + len - 1);
    for (int attempt = 1; attempt <= ATTEMPTS; attempt++) {
        struct s3_request req = {.target = j->target, .method = "GET", .range = range};
        e = hipObjGet(NULL, j->buf, len, (off_t)first, &(hipObjOps_t){s3_send_request, s3_recv_reply}, &req);
        j->requests += req.requests;
        if (e.opError == hipObjSuccess) return 0;
        fprintf(stderr, "part %s, attempt %d: %s (HTTP %ld, reply '%.*s')\n", range, attempt,
                hipObjGetErrorString(e.opError), req.http_status, (int)req.reply_len, req.reply);
        if (attempt < ATTEMPTS) {
            j->retries++;
            struct timespec backoff = {0, 100000000L << attempt}; /* 200 ms, 400 ms */
            nanosleep(&backoff, NULL);
        }
    }
    return -1;
}

static void *worker(void *arg) {
    struct job *j = arg;
    size_t parts = (j->size + j->part - 1) / j->part;
    for (size_t p = (size_t)j->index; p < parts && !j->failed; p += (size_t)j->threads) {
        size_t first = p * j->part;
        size_t len = j->size - first < j->part ? j->size - first : j->part;
        if (get_part(j, first, len) != 0) j->failed = 1;
    }
    return NULL;
}

int main(int argc, char **argv) {
    struct s3_target target = {0};
    struct job jobs[64];
    pthread_t tids[64];
    size_t size, part = 8u << 20;
    int threads = 4, arg, status = 1, requests = 0, retries = 0, failed = 0;
    unsigned char *buf;
    /* -t and -p are this program's; every other option (each takes a value) goes on to
     * s3_parse_args with the positional arguments */
    char *rest[128];
    int n = 0;
    rest[n++] = argv[0];
    for (int i = 1; i < argc && n < 126; i++) {
        if ((strcmp(argv[i], "-t") == 0 || strcmp(argv[i], "-p") == 0) && i + 1 < argc) {
            if (argv[i][1] == 't') threads = atoi(argv[i + 1]);
            else part = strtoull(argv[i + 1], NULL, 10);
            i++;
        } else {
            rest[n++] = argv[i];
        }
    }
    rest[n] = NULL;
    argc = n;
    argv = rest;
    arg = s3_parse_args(argc, argv, &target);
    if (arg < 0 || argc - arg != 4 || threads < 1 || threads > 64 || part == 0) {
        fprintf(stderr, "usage: parallel-get [-t THREADS (1..64)] [-p PART_BYTES] [-e ENDPOINT] [-n NIC] [-r REGION] "
                        "[-a ACCESS_KEY -s SECRET_KEY] [-c CA_BUNDLE] BUCKET KEY SIZE FILE\n");
        return 2;
    }
    target.bucket = argv[arg];
    target.key = argv[arg + 1];
    size = strtoull(argv[arg + 2], NULL, 10);
    if (size == 0) {
        fprintf(stderr, "SIZE must be at least 1\n");
        return 2;
    }
    buf = malloc(size);
    if (!buf) return 1;
    /* libcurl's global state is set up here, before any thread */
    if (s3_host_session_open(&target, buf, size) != 0) goto out;
    for (int i = 0; i < threads; i++) {
        jobs[i] = (struct job){.target = &target, .buf = buf, .size = size, .part = part, .index = i, .threads = threads};
        if (pthread_create(&tids[i], NULL, worker, &jobs[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            threads = i;
            failed = 1;
            break;
        }
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(tids[i], NULL);
        requests += jobs[i].requests;
        retries += jobs[i].retries;
        failed |= jobs[i].failed;
    }
    if (failed) {
        fprintf(stderr, "GET s3://%s/%s failed (%d retries)\n", target.bucket, target.key, retries);
        goto done;
    }
    printf("GET s3://%s/%s: %zu bytes over RDMA in %zu parts by %d threads (%d requests, %d retries)\n",
           target.bucket, target.key, size, (size + part - 1) / part, threads, requests, retries);
    if (s3_save_file(argv[arg + 3], buf, size) == 0) status = 0;
done:
    s3_host_session_close(buf);
out:
    free(buf);
    return status;
}
