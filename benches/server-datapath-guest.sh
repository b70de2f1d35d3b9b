#!/bin/bash
# The guest half of benches/server-datapath: baseline, figure, baseline, figure, ... in one boot.
set -uo pipefail
ROUNDS=${1:-8}
BENCH=$(cat target/e2e/server-datapath-bench.txt)
export HIPOBJ_SERVER_BIN=$PWD/target/e2e/release/hipobj-server HIPOBJ_LOG=${HIPOBJ_LOG:-warn}
FAILED=0
perf() { # QPS -> "WRITE READ" MB/s of perftest at 8 MiB in this boot
  HIPOBJ_E2E_PERF_ONLY=1 HIPOBJ_E2E_SIZES=8388608 HIPOBJ_E2E_PERF_QPS=$1 tests/vm/guest-e2e.sh \
    > /tmp/bench-perf.log 2>&1
  grep -E "^(BW|FAIL)" /tmp/bench-perf.log | sed "s/^/  [perftest -q $1] /" >&2
  printf '%s %s\n' \
    "$(sed -n 's/^BW ib_write_bw 8MiB: \([0-9.]*\) MB\/s/\1/p' /tmp/bench-perf.log | tail -1)" \
    "$(sed -n 's/^BW ib_read_bw 8MiB: \([0-9.]*\) MB\/s/\1/p' /tmp/bench-perf.log | tail -1)"
}
figure() { # MODE ROUNDS [ENV=VALUE...]
  local mode=$1 rounds=$2; shift 2
  echo "=== $mode"
  env "$@" "$BENCH" "$mode" "$rounds" || { echo "FAIL: $mode"; FAILED=$((FAILED + 1)); }
}
echo "=== baseline: perftest, 1 QP"
read -r W1 R1 < <(perf 1)
echo "BASELINE ib_write_bw 8MiB -q 1: ${W1:-none} MB/s, ib_read_bw 8MiB -q 1: ${R1:-none} MB/s"
figure single "$ROUNDS" HIPOBJ_BASELINE_WRITE_MBS="${W1:-}" HIPOBJ_BASELINE_READ_MBS="${R1:-}"
echo "=== baseline: perftest, 4 QPs"
read -r W4 R4 < <(perf 4)
echo "BASELINE ib_write_bw 8MiB -q 4: ${W4:-none} MB/s, ib_read_bw 8MiB -q 4: ${R4:-none} MB/s"
figure streams4 "$ROUNDS" HIPOBJ_BASELINE_WRITE4_MBS="${W4:-}" HIPOBJ_BASELINE_READ4_MBS="${R4:-}"
figure threads16 "$ROUNDS"
figure small 1000
echo "=== baseline again: perftest, 1 QP (drift check)"
read -r W1b R1b < <(perf 1)
echo "BASELINE (end) ib_write_bw 8MiB -q 1: ${W1b:-none} MB/s, ib_read_bw 8MiB -q 1: ${R1b:-none} MB/s"
echo "=== server-datapath benchmarks: $FAILED failed"
[ "$FAILED" = 0 ]
