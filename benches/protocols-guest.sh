#!/bin/bash
# Guest half of benches/protocols (see there): one hipobj-server on the second rxe device, the
# command line on the first; ROUNDS alternating rounds of `hipobj bench --rdma-protocol v1` and
# `--rdma-protocol v2` (each with its HTTP column), then the summary.
set -uo pipefail
ROUNDS=${1:-2}
. tests/support/server.sh
set -- $HIPOBJ_VM_DEVICES
CLI_DEV=${1:-rxe0} SRV_DEV=${2:-${1:-rxe0}}
HIPOBJ=${HIPOBJ_CLI_BIN:-$PWD/target/release/hipobj}
export HIPOBJ_SERVER_BIN=${HIPOBJ_SERVER_BIN:-$PWD/target/release/hipobj-server}
start_hipobj_server "$SRV_DEV" || exit 1
export AWS_ENDPOINT_URL=$HIPOBJ_SRV_URL HIPOBJ_NIC=$CLI_DEV
export AWS_ACCESS_KEY_ID=$HIPOBJ_TEST_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$HIPOBJ_TEST_SECRET_KEY
stamp=$(date -u +%Y-%m-%dT%H%M)
out=docs/perf/protocols-$stamp
mkdir -p "$out"
rc=0
for ((r = 1; r <= ROUNDS; r++)); do
  for proto in v1 v2; do
    echo "== round $r: --rdma-protocol $proto"
    "$HIPOBJ" bench --rdma-protocol "$proto" --sizes "${HIPOBJ_BENCH_SIZES:-4K,64K,1M,16M}" --concurrency 1,4 --iterations "${HIPOBJ_BENCH_ITERATIONS:-6}" --json \
      > "$out/$proto-$r.json" || rc=1
  done
done
{ python3 benches/protocols-summary.py "$out" && python3 benches/bench_summary.py protocols "$out"; } |
  tee "$out/summary.txt" || rc=1
exit $rc
