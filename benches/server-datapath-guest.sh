#!/bin/bash
# The guest half of benches/server-datapath: every RDMA figure alternates with its perftest
# baseline round by round inside the benchmark (benches/server-datapath-perftest.sh), in one boot.
set -uo pipefail
ROUNDS=${1:-6}
STREAM_ROUNDS=${2:-4}
BENCH=$(cat target/e2e/server-datapath-bench.txt)
export HIPOBJ_SERVER_BIN=$PWD/target/release/hipobj-server HIPOBJ_LOG=${HIPOBJ_LOG:-warn}
export HIPOBJ_BENCH_PERFTEST=$PWD/benches/server-datapath-perftest.sh
FAILED=0
counters() { # rxe's retry counters (cumulative), after each figure
  for dev in ${HIPOBJ_VM_DEVICES:-}; do
    c=/sys/class/infiniband/$dev/ports/1/hw_counters
    [ -d "$c" ] && echo "  $dev counters: $(for n in sent_pkts rcvd_pkts send_err completer_retry_err duplicate_request; do
      [ -r "$c/$n" ] && printf '%s=%s ' "$n" "$(<"$c/$n")"; done)"
  done
}
figure() { # MODE ROUNDS (HIPOBJ_BENCH_SERVER_ARGS: a server variant)
  echo "=== $1${HIPOBJ_BENCH_SERVER_ARGS:+ (server $HIPOBJ_BENCH_SERVER_ARGS)} ($(date -u +%T), guest load $(cut -d' ' -f1-3 /proc/loadavg))"
  "$BENCH" "$1" "$2" || { echo "FAIL: $1"; FAILED=$((FAILED + 1)); }
  counters
}
echo "=== $(date -u '+%F %T') UTC, guest load $(cut -d' ' -f1-3 /proc/loadavg), devices ${HIPOBJ_VM_DEVICES:-?}"
# HIPOBJ_BENCH_FIGURES: the figures to run (default: all of them, in this order).
FIGURES=" ${HIPOBJ_BENCH_FIGURES:-single streams4 threads16 small} "
want() { [[ $FIGURES == *" $1 "* ]]; }
want single && figure single "$ROUNDS"
want streams4 && figure streams4 "$STREAM_ROUNDS"
# A server variant beside the defaults, in the same boot: HIPOBJ_BENCH_VARIANT="--flag value ...",
# its single-stream and 4-stream figures after the defaults' (issue 25: "--etag crc64nvme" beside
# the default MD5 ETags). (The 12:11 log ran "--wr-depth 2" when READs had 8 MiB in flight by
# default; that variant's 2 MiB won, and is the default since.)
if [ -n "${HIPOBJ_BENCH_VARIANT:-}" ]; then
  want single && HIPOBJ_BENCH_SERVER_ARGS="$HIPOBJ_BENCH_VARIANT" figure single "$ROUNDS"
  want streams4 && HIPOBJ_BENCH_SERVER_ARGS="$HIPOBJ_BENCH_VARIANT" figure streams4 "$STREAM_ROUNDS"
fi
want threads16 && figure threads16 8
want small && figure small 1000
echo "=== server-datapath benchmarks: $FAILED failed"
[ "$FAILED" = 0 ]
