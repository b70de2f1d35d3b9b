#!/bin/bash
# The guest half of benches/server-datapath: every RDMA figure alternates with its perftest
# baseline round by round inside the benchmark (benches/server-datapath-perftest.sh), in one boot.
set -uo pipefail
ROUNDS=${1:-6}
STREAM_ROUNDS=${2:-4}
BENCH=$(cat target/e2e/server-datapath-bench.txt)
export HIPOBJ_SERVER_BIN=$PWD/target/e2e/release/hipobj-server HIPOBJ_LOG=${HIPOBJ_LOG:-warn}
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
figure single "$ROUNDS"
figure streams4 "$STREAM_ROUNDS"
# Variant: READs of one transfer limited to 2 MiB in flight (8 x 256 KiB) instead of 8 MiB
# (32 x 256 KiB); WRITEs then 2 x 1 MiB: compare the PUT ratios of the two streams4 runs.
HIPOBJ_BENCH_SERVER_ARGS="--wr-depth 2" figure streams4 "$STREAM_ROUNDS"
figure threads16 8
figure small 1000
echo "=== server-datapath benchmarks: $FAILED failed"
[ "$FAILED" = 0 ]
